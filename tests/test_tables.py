"""A user's CSV tables meeting a trained model again: the columns by name, the file's own mistakes named."""

import numpy as np
import pytest
from newcomer_support import one_error_line, run_cli, tool_main

from scepter_like import build_solver
from scepter_like.errors import ConfigError, DataError

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


def build_table(path, logger=None, **keys):
    from scepter_like.data.registry import DATASETS

    return DATASETS.build({'NAME': 'CsvDataset', 'PATH': str(path), **keys}, logger=logger)


def test_a_column_without_a_name_pandas_row_index_is_refused_and_the_log_names_x(tmp_path, caplog):
    """``df.to_csv('f.csv')`` writes the row index as a first column named '': it trained as a feature (the IN_DIM
    error then advised one input more)."""
    import logging

    lines = [',a,b,label', *(f'{i},{0.5 * i},{-i},{i % 2}' for i in range(8))]
    (tmp_path / 'indexed.csv').write_text('\n'.join(lines) + '\n')
    with pytest.raises(DataError) as refused:
        build_table(tmp_path / 'indexed.csv', LABEL_COLUMN='label')
    assert str(refused.value) == (
        f'PATH: column 1 of {tmp_path}/indexed.csv has no name in the header (as pandas writes its row index): save'
        ' the table with df.to_csv(path, index=False), or name the feature columns in COLUMNS'
    )
    assert build_table(tmp_path / 'indexed.csv', COLUMNS={'x': ['a', 'b']}).arrays['x'].shape == (8, 2)
    (tmp_path / 'plain.csv').write_text('\n'.join(line.split(',', 1)[1] for line in lines) + '\n')
    logger = logging.getLogger('scepter_like.test_tables')
    with caplog.at_level(logging.INFO, logger.name):
        build_table(tmp_path / 'plain.csv', logger, LABEL_COLUMN='label')
    assert caplog.messages == [
        f"{tmp_path}/plain.csv: x is the columns ['a', 'b'] (every column but the label; COLUMNS picks them)"
    ]


def test_a_windows_csv_is_told_its_encoding_and_read_under_encoding(tmp_path):
    """A cp1252 file (Excel on Windows) with 'Surface (m²)' was 'not a CSV text file', no word of its encoding."""
    text = 'Surface (m²),Price\r\n' + ''.join(f'{50 + i},{100 + 2 * i}\r\n' for i in range(6))
    (tmp_path / 'excel.csv').write_bytes(text.encode('cp1252'))
    with pytest.raises(DataError) as refused:
        build_table(tmp_path / 'excel.csv')
    assert str(refused.value) == (
        f'PATH: {tmp_path}/excel.csv is not utf-8 text (byte 0xb2 on line 1); set ENCODING to the encoding it was'
        ' saved in (cp1252 for a CSV Excel saved on Windows)'
    )
    table = build_table(tmp_path / 'excel.csv', ENCODING='cp1252', COLUMNS={'x': ['Surface (m²)'], 'y': 'Price'})
    assert table.arrays['x'][:, 0].tolist() == [50, 51, 52, 53, 54, 55] and table.columns['x'] == ['Surface (m²)']
    (tmp_path / 'bom.csv').write_bytes(b'\xef\xbb\xbf' + text.encode('utf-8'))  # Excel's "CSV UTF-8"
    assert build_table(tmp_path / 'bom.csv').columns == {'x': ['Surface (m²)', 'Price']}
    with pytest.raises(ConfigError, match=r"^ENCODING: unknown text encoding 'utf8x' \(e\.g\. utf-8, cp1252"):
        build_table(tmp_path / 'bom.csv', ENCODING='utf8x')


def test_an_empty_cell_is_a_missing_value_and_a_text_feature_is_told_to_be_encoded(tmp_path):
    """Both were "'' is not a number; give numeric features (a column of text labels is the LABEL_COLUMN)"."""
    lines = ['area,Neighborhood,price', '80.5,NAmes,170', ',Gilbert,150', '95,NAmes,190']
    (tmp_path / 'holed.csv').write_text('\n'.join(lines) + '\n')
    where = f'{tmp_path}/holed.csv line 3'
    with pytest.raises(DataError) as refused:
        build_table(tmp_path / 'holed.csv', COLUMNS={'x': ['area'], 'y': 'price'})
    assert str(refused.value) == (
        f"{where}, column 'area': '' is a missing value; drop or fill the rows missing it (pandas: df.dropna() or"
        ' df.fillna(...))'
    )
    text = "column 'Neighborhood' holds the text 'NAmes': features are numbers; encode the column as numbers (one"
    text += ' 0/1 column per category: pandas get_dummies) or '
    with pytest.raises(DataError) as refused:
        build_table(tmp_path / 'holed.csv', COLUMNS={'x': ['Neighborhood', 'price']})
    assert str(refused.value) == f'{tmp_path}/holed.csv line 2, {text}leave it out of COLUMNS.x'
    with pytest.raises(DataError) as refused:
        build_table(tmp_path / 'holed.csv', LABEL_COLUMN='price')
    assert str(refused.value).endswith(f'{text}name the features to read in COLUMNS')
    with pytest.raises(DataError) as refused:
        build_table(tmp_path / 'holed.csv')  # no LABEL_COLUMN: a text column may be the labels
    assert str(refused.value).endswith('COLUMNS (if it holds the class labels, name it LABEL_COLUMN)')


def test_run_inference_reads_a_csv_input_by_the_training_columns_names(trained, tmp_path, capsys):
    """--input x.csv was a numpy pickle error advising np.loadtxt, which takes the columns by place (mse 3937 for a
    header in another order, 1199 by name)."""
    houses_csv(tmp_path / 'new.csv', seed=1, order=('price', 'rooms', 'area', 'age'))  # another order, the target too
    houses_csv(tmp_path / 'same.csv', seed=1)
    with build_solver(
        regression_cfg(str(tmp_path / 'houses.csv'), tmp_path / 'x'), [f'SOLVER.RESUME_FROM={trained}']
    ) as s:
        table = np.loadtxt(tmp_path / 'same.csv', delimiter=',', skiprows=1)
        expected = s.predict({'x': table[:, :3]})['logits']
    out = tmp_path / 'out.npz'
    assert run_cli(run_inference, '--checkpoint', trained, '--input', tmp_path / 'new.csv', '--output', out) == 0
    outputs = np.load(out)
    np.testing.assert_allclose(outputs['logits'], expected, rtol=1e-5)
    np.testing.assert_allclose(outputs['label'], table[:, 3], rtol=1e-5)  # the target column, where the file has it
    (tmp_path / 'partial.csv').write_text('rooms,area\n3,80\n')
    assert run_cli(run_inference, '--checkpoint', trained, '--input', tmp_path / 'partial.csv', '--output', out) == 2
    assert one_error_line(capsys) == (
        f"error: {tmp_path}/partial.csv lacks the column(s) ['age'] of 'x', which the model reads from {FEATURES} (in"
        " any order; its columns: ['rooms', 'area'])"
    )
    from scepter_like.data.tables import CsvInput

    with pytest.raises(DataError, match=r'partial\.csv is a CSV table, and the model records no table columns .*'):
        CsvInput(str(tmp_path / 'partial.csv')).arrays(None)  # a model trained on arrays, or an older checkpoint


def test_one_column_named_alone_is_told_to_be_a_list_not_another_in_dim(tmp_path):
    """COLUMNS {x: area} makes x [rows]; the error said to set IN_DIM (now 1), which is right already."""
    cfg = regression_cfg(houses_csv(tmp_path / 'houses.csv'), tmp_path / 'run', TRAIN_HOOKS=[])
    cfg['SOLVER']['TRAIN_DATA']['COLUMNS']['x'] = 'area'
    cfg['SOLVER']['MODEL']['BACKBONE']['IN_DIM'] = 1
    with pytest.raises(DataError) as refused, build_solver(cfg) as session:
        session.fit()
    assert str(refused.value).endswith(
        "'x' is read from the one column 'area' as [rows] (COLUMNS names it alone, not in a list): write it as a"
        ' list, x: [area], for a [rows, 1] feature'
    )
    assert 'IN_DIM' not in str(refused.value)
    cfg['SOLVER']['TRAIN_DATA']['COLUMNS']['x'] = ['area']
    with build_solver(cfg, [f'SOLVER.WORK_DIR={tmp_path / "listed"}']) as session:
        session.fit()


def test_resuming_on_train_data_of_another_epoch_length_is_a_warning_naming_both_counts(tmp_path, caplog):
    """The file shrank from 64 rows to 32 (4 batches to 2): the resume 'went on at epoch 1, iter 4' of an epoch of
    2, which then 'trained' in no time, without a word."""
    path = houses_csv(tmp_path / 'houses.csv')
    hooks = [{'NAME': 'CheckpointHook', 'STEP_INTERVAL': 3}]
    with build_solver(regression_cfg(path, tmp_path / 'run', TRAIN_HOOKS=hooks, MAX_STEPS=3)) as session:
        session.fit()
    houses_csv(tmp_path / 'houses.csv', n=32)
    with (
        caplog.at_level('WARNING', 'scepter_like'),
        build_solver(regression_cfg(path, tmp_path / 'run', TRAIN_HOOKS=hooks), ['SOLVER.RESUME_FROM=auto']),
    ):
        pass
    warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
    notes = [message for message in warnings if 'batches per epoch' in message]
    assert notes == [
        f'{tmp_path}/run/checkpoints/checkpoint-step-3.pth was saved with 4 train batches per epoch and the train'
        ' data now makes 2 (its file, BATCH_SIZE or DROP_LAST changed): the epoch goes on at batch 4; batch 4 is'
        ' past the end of an epoch of 2, so the resumed epoch ends without training'
    ]


def test_pretrained_weights_refuse_their_columns_or_classes_in_another_order(trained, tmp_path, caplog):
    """PRETRAINED_MODEL loaded a head trained on other class numbers (a renamed folder: accuracy 0.96 -> 0.27)
    or features in another order without a word; the same names in another order are now refused, other class
    names are a warning."""
    path, weights = str(tmp_path / 'houses.csv'), f'{trained}/checkpoints/checkpoint-epoch-1.pth'
    cfg = regression_cfg(path, tmp_path / 'tuned', ['rooms', 'area', 'age'])
    cfg['SOLVER']['MODEL']['PRETRAINED_MODEL'] = weights
    with pytest.raises(ConfigError, match=r"^SOLVER\.TRAIN_DATA: its 'x' is read from the columns \['rooms'"):
        build_solver(cfg)
    rng = np.random.default_rng(1)
    rows = [(a, b, 'cat' if a > b else 'dog' if a > 0 else 'eel') for a, b in rng.normal(size=(60, 2))]
    (tmp_path / 'pets.csv').write_text('a,b,kind\n' + ''.join(f'{a:.3f},{b:.3f},{k}\n' for a, b, k in rows))

    def classify(work_dir, **data_keys):
        cfg = regression_cfg(str(tmp_path / 'pets.csv'), tmp_path / work_dir, ['a', 'b'])
        cfg['SOLVER']['TRAIN_DATA'] = {'NAME': 'CsvDataset', 'PATH': str(tmp_path / 'pets.csv'), 'BATCH_SIZE': 16}
        cfg['SOLVER']['TRAIN_DATA'].update(LABEL_COLUMN='kind', **data_keys)
        model = cfg['SOLVER']['MODEL']
        model.update(LABEL_KEY='label', LOSS={'NAME': 'CrossEntropyLoss'})
        model['BACKBONE'].update(IN_DIM=2, OUT_DIM=3)
        return cfg

    with build_solver(classify('pets')) as session:
        session.fit()
    cfg = classify('reordered', CLASSES=['dog', 'cat', 'eel'])
    cfg['SOLVER']['MODEL']['PRETRAINED_MODEL'] = f'{tmp_path}/pets/checkpoints/checkpoint-epoch-1.pth'
    with pytest.raises(ConfigError) as refused:
        build_solver(cfg)
    assert str(refused.value) == (
        "SOLVER.TRAIN_DATA: its classes ['dog', 'cat', 'eel'] are numbered otherwise than those"
        f" {tmp_path}/pets/checkpoints/checkpoint-epoch-1.pth (PRETRAINED_MODEL) was trained on ['cat', 'dog', 'eel']"
        ' (a split lacking a class, or another order);'
        " give it CLASSES: ['cat', 'dog', 'eel']"
    )
    cfg = classify('renamed', CLASSES=['cat', 'dog', 'fish'])
    cfg['SOLVER']['MODEL']['PRETRAINED_MODEL'] = f'{tmp_path}/pets/checkpoints/checkpoint-epoch-1.pth'
    (tmp_path / 'pets.csv').write_text((tmp_path / 'pets.csv').read_text().replace('eel', 'fish'))
    with build_solver(cfg) as session:
        assert session.model.class_names == ['cat', 'dog', 'fish']
    assert "was trained on the classes ['cat', 'dog', 'eel'] and SOLVER.TRAIN_DATA has ['cat', 'dog', 'fish']" in (
        caplog.text
    )
