"""A user's CSV tables meeting a trained model again: the columns by name, the file's own mistakes named."""

import numpy as np
import pytest
from newcomer_support import one_error_line, own_logger_restored, tool_main  # noqa: F401

from scepter_like import build_solver
from scepter_like.errors import ConfigError

run_inference = tool_main('run_inference')
FEATURES = ['area', 'age', 'rooms']


def houses_csv(path, n=64, seed=0, order=(*FEATURES, 'price')):
    """A regression table: three features and the price they make, its columns in ``order``."""
    rng = np.random.default_rng(seed)
    values = {'area': rng.uniform(50, 200, n), 'age': rng.uniform(0, 50, n), 'rooms': rng.integers(1, 6, n) * 1.0}
    values['price'] = 2 * values['area'] - values['age'] + 10 * values['rooms']
    lines = [','.join(order), *(','.join(f'{values[name][i]:.3f}' for name in order) for i in range(n))]
    path.write_text('\n'.join(lines) + '\n')
    return str(path)


def regression_cfg(path, work_dir, features=FEATURES, **solver_keys):
    data = {'NAME': 'CsvDataset', 'PATH': path, 'COLUMNS': {'x': list(features), 'y': 'price'}, 'BATCH_SIZE': 16}
    solver = {
        'NAME': 'TrainValSolver',
        'WORK_DIR': str(work_dir),
        'MAX_EPOCHS': 1,
        'MODEL': {
            'NAME': 'Classifier',
            'INPUT_KEY': 'x',
            'LABEL_KEY': 'y',
            'LOSS': {'NAME': 'MSELoss'},
            'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 3, 'HIDDEN_DIMS': [8], 'OUT_DIM': 1},
        },
        'OPTIMIZER': {'NAME': 'Adam', 'LEARNING_RATE': 0.01},
        'TRAIN_DATA': data,
        'TRAIN_HOOKS': [{'NAME': 'CheckpointHook'}],
    }
    solver.update(solver_keys)
    return {'ENV': {'SEED': 0}, 'SOLVER': solver}


@pytest.fixture
def trained(tmp_path):
    """A run trained on houses.csv (its x: area, age, rooms); its folder."""
    path = houses_csv(tmp_path / 'houses.csv')
    with build_solver(regression_cfg(path, tmp_path / 'run')) as session:
        session.fit()
    return tmp_path / 'run'


def test_a_checkpoint_under_columns_listed_in_another_order_is_refused_naming_both(trained, tmp_path):
    """The same columns in another order stacked the features otherwise: test() and predict() measured the model
    on inputs it was not trained on (mse 233 -> 45711) without a word."""
    path = str(tmp_path / 'houses.csv')
    reordered = ['rooms', 'area', 'age']
    cfg = regression_cfg(path, tmp_path / 'again', reordered, TRAIN_DATA=None)
    cfg['SOLVER']['TEST_DATA'] = regression_cfg(path, '', reordered)['SOLVER']['TRAIN_DATA']
    with pytest.raises(ConfigError) as refused:
        build_solver(cfg, [f'SOLVER.RESUME_FROM={trained}'])
    assert str(refused.value) == (
        f"SOLVER.TEST_DATA: its 'x' is read from the columns {reordered}, otherwise than those"
        f' {trained}/checkpoints/checkpoint-epoch-1.pth was trained on {FEATURES} (features are matched by place);'
        f' give it COLUMNS: {{x: {FEATURES}}}'
    )
    cfg = regression_cfg(path, tmp_path / 'again', FEATURES, TRAIN_DATA=None)
    cfg['SOLVER']['TEST_DATA'] = regression_cfg(path, '', FEATURES)['SOLVER']['TRAIN_DATA']
    with build_solver(cfg, [f'SOLVER.RESUME_FROM={trained}']) as session:
        assert session.model.input_columns == {'x': FEATURES, 'y': 'price'}
