"""A user's own data and model, the first time: numpy's dtypes, tables without code, and errors that name the part.

Each run goes through tools/run_train.py's ``main`` in this process (``scepter_like.cli.run``),
as the command line runs it.
"""

import csv
import os
import re

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO
from helpers import blob_solver_cfg
from newcomer_support import one_error_line, tool_main

from scepter_like.cli import run

run_train = tool_main('run_train')
run_inference = tool_main('run_inference')


def numpy_blobs(path, n=120, dim=8, classes=3, x_dtype=np.float64, y_dtype=np.int32, seed=0):
    """Gaussian blobs saved as numpy makes them by default: float64 features, int32 labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(classes, dim))
    y = rng.integers(0, classes, size=n)
    x = centers[y] + rng.normal(0, 1, size=(n, dim))
    np.savez(path, x=x.astype(x_dtype), y=y.astype(y_dtype))
    return str(path)


def train(tmp_path, cfg, *words):
    path = tmp_path / 'job.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return run(run_train, ['--cfg', str(path), *words])


def test_numpy_default_dtypes_train_evaluate_infer_and_predict(tmp_path, capsys):
    npz = numpy_blobs(tmp_path / 'blobs.npz')
    cfg = blob_solver_cfg(npz, tmp_path / 'run', hooks=[{'NAME': 'CheckpointHook'}], MAX_EPOCHS=3)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    assert train(tmp_path, cfg) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    accuracy = float(re.search(r'test final \(120 samples\): accuracy: ([0-9.]+)', out).group(1))
    assert accuracy > 0.8
    # inference on the file as numpy wrote it (float64), the model's weights from the run's folder
    res = run(
        run_inference,
        ['--cfg', str(tmp_path / 'job.yaml'), '--checkpoint', str(tmp_path / 'run'), '--input', npz,
         '--output', str(tmp_path / 'out.npz'), 'SOLVER.MODEL.INPUT_KEY=x'],
    )  # fmt: skip
    assert res == 0, capsys.readouterr().err
    logits = np.load(tmp_path / 'out.npz')['logits']
    assert logits.dtype == np.float32 and (logits.argmax(1) == np.load(npz)['y']).mean() > 0.8


def test_predict_takes_float64_arrays(tmp_path):
    from helpers import build_solver

    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run')
    solver = build_solver(cfg)
    out = solver.predict({'img': np.random.default_rng(0).normal(size=(5, 8))})  # float64
    assert out['logits'].shape == (5, 3) and out['logits'].dtype == np.float32
    solver.close()


def test_a_dtype_that_cannot_be_cast_is_one_line_naming_key_dtype_and_dtypes(tmp_path, capsys):
    npz = numpy_blobs(tmp_path / 'blobs.npz', x_dtype=np.int32)  # integer features: no cast is safe to guess
    cfg = blob_solver_cfg(npz, tmp_path / 'run', MAX_STEPS=1)
    assert train(tmp_path, cfg) == 2
    line = one_error_line(capsys)
    assert re.search(r'the model Classifier \(float32\) cannot take the batch key\(s\) img: int32: ', line), line
    assert 'DTYPES (NpzDataset, CsvDataset: DTYPES: {img: float32})' in line


def iris_like_csv(path, n=150, seed=0):
    """A table of 4 numeric columns and a text label, as a user's CSV export looks."""
    rng = np.random.default_rng(seed)
    names = ['setosa', 'versicolor', 'virginica']
    centers = rng.normal(0, 3, size=(3, 4))
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['sepal_length', 'sepal_width', 'petal_length', 'petal_width', 'species'])
        for _ in range(n):
            k = int(rng.integers(0, 3))
            writer.writerow([*(centers[k] + rng.normal(0, 0.7, size=4)).round(3), names[k]])
    return str(path)


CSV_JOB = """
SOLVER:
  NAME: TrainValSolver
  WORK_DIR: {work_dir}
  MAX_EPOCHS: 5
  MODEL:
    NAME: Classifier
    INPUT_KEY: x
    BACKBONE: {{NAME: MLP, IN_DIM: 4, HIDDEN_DIMS: [32], OUT_DIM: 3}}
  OPTIMIZER: {{NAME: Adam, LEARNING_RATE: 0.01}}
  TRAIN_DATA: {{NAME: CsvDataset, PATH: {csv}, LABEL_COLUMN: species, BATCH_SIZE: 16}}
  EVAL_DATA: {{NAME: CsvDataset, PATH: {csv}, LABEL_COLUMN: species, BATCH_SIZE: 64}}
  METRICS: [{{NAME: AccuracyMetric}}]
"""


def test_a_csv_table_trains_without_code(tmp_path, capsys):
    from scepter_like.data.registry import DATASETS

    csv_path = iris_like_csv(tmp_path / 'iris.csv')
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=csv_path))
    assert run(run_train, ['--cfg', str(job)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert float(re.search(r'eval epoch 5/5 \(150 samples\): accuracy: ([0-9.]+)', out).group(1)) > 0.8
    # the columns: every one but the label stacked as x; text labels by their sorted order, or CLASSES
    data = DATASETS.build({'NAME': 'CsvDataset', 'PATH': csv_path, 'LABEL_COLUMN': 'species'})
    assert data.arrays['x'].shape == (150, 4) and data.arrays['label'].dtype.is_floating_point is False
    with open(csv_path) as f:
        first = next(r for i, r in enumerate(csv.reader(f)) if i == 1)
    assert data[0]['label'] == ['setosa', 'versicolor', 'virginica'].index(first[-1])
    classes = ['virginica', 'setosa', 'versicolor']
    columns = {'petal': ['petal_length', 'petal_width'], 'sepal_length': 'sepal_length'}
    ordered = DATASETS.build(
        {'NAME': 'CsvDataset', 'PATH': csv_path, 'LABEL_COLUMN': 'species', 'CLASSES': classes, 'COLUMNS': columns}
    )
    assert ordered[0]['label'] == classes.index(first[-1])
    assert ordered.arrays['petal'].shape == (150, 2) and ordered.arrays['sepal_length'].shape == (150,)


def test_a_csv_split_lacking_a_class_is_refused_unless_both_give_classes(tmp_path, capsys):
    csv_path = iris_like_csv(tmp_path / 'iris.csv')
    rows = open(csv_path).read().splitlines()
    val = tmp_path / 'val.csv'
    val.write_text('\n'.join([rows[0]] + [r for r in rows[1:] if not r.endswith('setosa')]) + '\n')
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=csv_path))
    assert run(run_train, ['--cfg', str(job), f'SOLVER.EVAL_DATA.PATH={val}']) == 2
    line = one_error_line(capsys)
    assert "SOLVER.EVAL_DATA: its classes ['versicolor', 'virginica'] are numbered otherwise than the train" in line
    classes = 'SOLVER.{}.CLASSES=[setosa, versicolor, virginica]'
    words = [f'SOLVER.EVAL_DATA.PATH={val}', classes.format('TRAIN_DATA'), classes.format('EVAL_DATA')]
    assert run(run_train, ['--cfg', str(job), *words]) == 0, capsys.readouterr().err
    accuracy = float(
        re.search(r'eval epoch 5/5 \(\d+ samples\): accuracy: ([0-9.]+)', capsys.readouterr().out).group(1)
    )
    assert accuracy > 0.8  # measured against the train data's class numbers


def test_a_csv_split_whose_header_orders_the_features_otherwise_is_refused_until_columns_name_them(tmp_path, capsys):
    csv_path = iris_like_csv(tmp_path / 'iris.csv')
    with open(csv_path) as f:
        table = list(csv.reader(f))
    swapped = tmp_path / 'swapped.csv'  # the same rows, the first two feature columns the other way round
    with open(swapped, 'w', newline='') as f:
        csv.writer(f).writerows([[r[1], r[0], *r[2:]] for r in table])
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=csv_path))
    assert run(run_train, ['--cfg', str(job), f'SOLVER.EVAL_DATA.PATH={swapped}']) == 2
    features = table[0][:4]
    line = one_error_line(capsys)
    assert line == (
        f"error: SOLVER.EVAL_DATA: its 'x' is read from the columns {[features[1], features[0], *features[2:]]},"
        f" otherwise than the train data's {features} (features are matched by place); give both data configs"
        f' COLUMNS: {{x: {features}}}'
    )
    columns = f'SOLVER.{{}}.COLUMNS={{{{x: [{", ".join(features)}]}}}}'
    words = [f'SOLVER.EVAL_DATA.PATH={swapped}', columns.format('TRAIN_DATA'), columns.format('EVAL_DATA')]
    assert run(run_train, ['--cfg', str(job), *words]) == 0, capsys.readouterr().err
    accuracy = float(re.search(r'eval epoch 5/5 \(150 samples\): accuracy: ([0-9.]+)', capsys.readouterr().out)[1])
    assert accuracy > 0.8  # the named columns: the features in the train data's order


def test_csv_mistakes_are_one_line(tmp_path, capsys):
    csv_path = iris_like_csv(tmp_path / 'iris.csv')
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=csv_path))
    assert run(run_train, ['--cfg', str(job), 'SOLVER.TRAIN_DATA.LABEL_COLUMN=specie']) == 2
    line = one_error_line(capsys)
    assert 'SOLVER.TRAIN_DATA.LABEL_COLUMN: ' in line and "has no column 'specie'; did you mean species?" in line
    assert run(run_train, ['--cfg', str(job), 'SOLVER.TRAIN_DATA.CLASSES=[setosa, virginica]']) == 2
    assert "label(s) ['versicolor'] are not in SOLVER.TRAIN_DATA.CLASSES" in one_error_line(capsys)


def test_csv_labels_written_as_floats_are_classes_and_fractions_are_refused(tmp_path, capsys):
    """pandas writes an int column holding a NaN as floats (``2.0``): the classes are still 0..11 by value."""
    from scepter_like.data.registry import DATASETS
    from scepter_like.errors import DataError

    path = tmp_path / 'floats.csv'
    path.write_text('a,b,y\n' + ''.join(f'{i}.5,1.0,{i % 12}.0\n' for i in range(24)))
    data = DATASETS.build({'NAME': 'CsvDataset', 'PATH': str(path), 'LABEL_COLUMN': 'y'})
    assert data.arrays['label'].tolist() == [i % 12 for i in range(24)]  # '10.0' is class 10, not 2 by string order
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=path).replace('species', 'a'))
    assert run(run_train, ['--cfg', str(job)]) == 2
    line = one_error_line(capsys)
    assert "the LABEL_COLUMN 'a' holds 0.5, not a class (a whole number or a text)" in line, line
    assert 'COLUMNS: {x: [b, y], y: a} (COLUMNS replaces the default x, so it names the features too)' in line
    holed = tmp_path / 'holed.csv'
    holed.write_text(path.read_text().replace('\n5.5,1.0,5.0\n', '\n5.5,1.0,\n'))  # pandas writes NaN as ''
    with pytest.raises(DataError, match=r"'y' is empty or NaN in 1 row\(s\), the first at row 5 \(0-based, line 7 of"):
        DATASETS.build({'NAME': 'CsvDataset', 'PATH': str(holed), 'LABEL_COLUMN': 'y'})


def test_targets_of_another_shape_are_aligned_or_refused_never_broadcast():
    """[N] against [N, 1] holds the same values: aligned; torch alone broadcasts it to [N, N]."""
    import torch

    from scepter_like.config import Config
    from scepter_like.errors import DataError
    from scepter_like.metric.regression import MSEMetric
    from scepter_like.model.losses import MSELoss
    from scepter_like.model.registry import LOSSES

    pred, target = torch.tensor([[1.0], [2.0], [4.0]]), torch.tensor([1.0, 2.0, 3.0])
    assert MSELoss(Config({}))(pred, target).item() == pytest.approx(1 / 3)  # broadcast: 14/9
    metric = MSEMetric(Config({'KEYS': ['pred', 'target']}))
    assert metric(pred, target)['mse'] == pytest.approx(1 / 3)
    for fn in (lambda: MSELoss(Config({}))(pred, torch.zeros(6)), lambda: metric(pred, torch.zeros(6))):
        with pytest.raises(DataError, match=r'the prediction is \[3, 1\] and the target \[6\]: they hold different'):
            fn()
    loss = LOSSES.build({'NAME': 'CrossEntropyLoss'})
    logits, labels = torch.randn(4, 3), torch.tensor([0, 2, 1, 2])
    expected = torch.nn.functional.cross_entropy(logits, labels)
    assert loss(logits, labels[:, None].int()) == expected  # a column of int32 class indices
    with pytest.raises(DataError, match=r'the labels are torch.float32 \[4\] for logits \[4, 3\]; class indices'):
        loss(logits, labels.float())
    probabilities = torch.softmax(torch.randn(4, 3), 1)  # soft targets keep working
    assert loss(logits, probabilities) == torch.nn.functional.cross_entropy(logits, probabilities)


def test_float_class_labels_in_a_users_arrays_are_one_line_with_the_fix(tmp_path, capsys):
    npz = numpy_blobs(tmp_path / 'blobs.npz', y_dtype=np.float64)  # labels from pandas, floats
    assert train(tmp_path, blob_solver_cfg(npz, tmp_path / 'run', MAX_STEPS=1)) == 2
    assert "set the dataset's DTYPES: {label: int64}" in one_error_line(capsys)


def test_nan_in_a_users_table_or_arrays_is_one_line_naming_the_row(tmp_path, capsys):
    """A NaN feature would give a NaN loss steps later; the data is refused where it is read instead."""
    csv_path = iris_like_csv(tmp_path / 'iris.csv')
    lines = open(csv_path).read().splitlines()
    lines[8] = 'nan,' + lines[8].split(',', 1)[1]  # the 8th data row (row 7), as pandas' to_csv(na_rep='nan') writes it
    open(csv_path, 'w').write('\n'.join(lines) + '\n')
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=csv_path))
    assert run(run_train, ['--cfg', str(job)]) == 2
    line = one_error_line(capsys)
    assert f"{csv_path}: array 'x': NaN or inf in 1 row(s), the first at row 7 (0-based, line 9 of the file);" in line
    assert not os.path.exists(tmp_path / 'run' / 'checkpoints')

    npz = numpy_blobs(tmp_path / 'blobs.npz')
    with np.load(npz) as data:
        x, y = data['x'].copy(), data['y']
    x[[5, 9], 2], x[40, 0] = np.nan, np.inf
    np.savez(npz, x=x, y=y)
    assert train(tmp_path, blob_solver_cfg(npz, tmp_path / 'run2', MAX_STEPS=1)) == 2
    assert f"{npz}: array 'img': NaN or inf in 3 row(s), the first at row 5" in one_error_line(capsys)


def test_arrays_of_different_lengths_name_the_dataset_the_file_and_its_arrays(tmp_path, capsys):
    """The line was "dataset arrays differ in length: {'img': 200, 'label': 150}": no config key, no file, and the
    batch keys where the file says x and y."""
    npz = numpy_blobs(tmp_path / 'blobs.npz')
    with np.load(npz) as data:
        x, y = data['x'].copy(), data['y'][:-10]
    np.savez(npz, x=x, y=y)
    assert train(tmp_path, blob_solver_cfg(npz, tmp_path / 'run', MAX_STEPS=1)) == 2
    assert one_error_line(capsys) == (
        f"error: SOLVER.TRAIN_DATA: the arrays of {npz} differ in length ('x' (batch key 'img'): {len(x)},"
        f" 'y' (batch key 'label'): {len(y)}); every array holds one entry per sample"
    )


def test_a_key_map_naming_an_array_the_file_lacks_is_one_line(tmp_path, capsys):
    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run', MAX_STEPS=1)
    cfg['SOLVER']['TRAIN_DATA']['KEY_MAP'] = {'x': 'img', 'labels': 'label'}
    assert train(tmp_path, cfg) == 2
    line = one_error_line(capsys)
    assert 'SOLVER.TRAIN_DATA.KEY_MAP: ' in line and "has no array 'labels' (its arrays: ['x', 'y'])" in line, line
    np.savez(tmp_path / 'both.npz', x=np.ones((4, 8), np.float32), img=np.zeros((4, 8), np.float32), y=np.zeros(4))
    cfg['SOLVER']['TRAIN_DATA'].update(PATH=str(tmp_path / 'both.npz'), KEY_MAP={'x': 'img', 'y': 'label'})
    assert train(tmp_path, cfg) == 2  # which 'img' would win depended on the order the file holds them
    assert "arrays ['x', 'img'] of " in one_error_line(capsys)


def test_weights_that_turned_nan_are_never_saved_as_latest_or_best(tmp_path, capsys):
    """A learning rate that blows the weights up between two log lines: the epoch checkpoint is refused."""
    import torch

    from scepter_like.utils.checkpoint import resolve_checkpoint

    npz = numpy_blobs(tmp_path / 'blobs.npz')
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LogHook', 'LOG_INTERVAL': 1000},
        {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'SAVE_BEST_BY': '+accuracy'},
    ]
    cfg = blob_solver_cfg(npz, tmp_path / 'run', hooks, MAX_EPOCHS=3)
    assert train(tmp_path, cfg) == 0, capsys.readouterr().err  # a sane run, epochs 1-3
    capsys.readouterr()
    cfg['SOLVER']['WORK_DIR'] = str(tmp_path / 'run2')
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'SGD', 'LEARNING_RATE': 1e30}
    assert train(tmp_path, cfg) == 2
    line = one_error_line(capsys)
    assert 'the model weights hold NaN or inf after step 8; checkpoint-epoch-1.pth is not written' in line, line
    folder = tmp_path / 'run2' / 'checkpoints'
    assert not folder.exists() or not [name for name in os.listdir(folder) if name.endswith('.pth')]
    state = torch.load(resolve_checkpoint(str(tmp_path / 'run')), weights_only=True)['model']
    assert all(torch.isfinite(v).all() for v in state.values())


@pytest.fixture(scope='module')
def user_parts(tmp_path_factory):
    """The user modules of these tests, in one folder (each is imported once)."""
    folder = tmp_path_factory.mktemp('user_parts')
    (folder / 'raising_parts.py').write_text(RAISING_PARTS)
    (folder / 'plain_user_dataset.py').write_text(PLAIN_DATASET)
    return folder


@pytest.mark.parametrize('dataset', ['NpzDataset', 'PlainUserDataset'])
def test_a_misspelled_loader_key_gets_did_you_mean(dataset, user_parts, tmp_path, capsys):
    module = user_parts / 'plain_user_dataset.py'
    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run', MAX_STEPS=1)
    cfg['SOLVER']['TRAIN_DATA'] = {**cfg['SOLVER']['TRAIN_DATA'], 'NAME': dataset, 'BATCH_SZE': 8}
    cfg['IMPORTS'] = [str(module)]
    for extra in ([], ['--print-config']):
        assert train(tmp_path, cfg, *extra) == 2
        line = one_error_line(capsys)
        assert f'SOLVER.TRAIN_DATA.BATCH_SZE: unknown key for DATASETS.{dataset} and the data loader' in line
        assert 'did you mean BATCH_SIZE?' in line
    cfg['SOLVER']['TRAIN_DATA'] = {k: v for k, v in cfg['SOLVER']['TRAIN_DATA'].items() if k != 'BATCH_SZE'}
    cfg['SOLVER']['TRAIN_DATA']['batch_size'] = 8  # the key in the case a DataLoader user writes it
    assert train(tmp_path, cfg) == 2
    assert 'did you mean BATCH_SIZE?' in one_error_line(capsys)


PLAIN_DATASET = """
import torch
from scepter_like.data.registry import DATASETS


@DATASETS.register_class()
class PlainUserDataset:  # no para_dict: scepter's way, any key accepted
    def __init__(self, cfg, logger=None):
        self.x = torch.randn(32, 8)

    def __len__(self):
        return 32

    def __getitem__(self, i):
        return {'img': self.x[i], 'label': i % 3}
"""


RAISING_PARTS = """
import torch
from scepter_like.data.registry import DATASETS
from scepter_like.model.registry import MODELS


@MODELS.register_class()
class LookupModel(torch.nn.Module):  # keeps no cfg; its own dict lookup fails
    def __init__(self, cfg, logger=None):
        super().__init__()
        self.fc = torch.nn.Linear(8, 3)
        self.names = {'a': 0}

    def forward(self, img, label=None):
        _ = self.names['missing_name']
        return {'loss': self.fc(img).mean()}


@DATASETS.register_class()
class ShortDataset:  # keeps no cfg, as docs/extending.md's example
    def __init__(self, cfg, logger=None):
        self.x = torch.randn(16, 8)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i >= 4:
            raise RuntimeError('disk on fire')
        return {'img': self.x[i], 'label': 0}
"""


@pytest.mark.parametrize('debug', [False, True])
def test_a_key_error_inside_the_users_model_keeps_its_traceback(debug, user_parts, tmp_path, capsys):
    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run', MAX_STEPS=1, EVAL_DATA=None)
    cfg['SOLVER']['MODEL'] = {'NAME': 'LookupModel'}
    cfg['IMPORTS'] = [str(user_parts / 'raising_parts.py')]
    assert train(tmp_path, cfg, *(['--debug'] if debug else [])) == 1
    err = capsys.readouterr().err
    first = err.strip().splitlines()[0]
    assert first == "error: LookupModel (SOLVER.MODEL) raised KeyError: 'missing_name' (its traceback follows)", err
    assert 'Traceback (most recent call last)' in err and "self.names['missing_name']" in err
    assert 'needs input' not in err


def test_an_error_of_a_dataset_without_cfg_names_it(user_parts, tmp_path, capsys):
    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run', MAX_STEPS=2, EVAL_DATA=None)
    cfg['SOLVER']['TRAIN_DATA'] = {'NAME': 'ShortDataset', 'BATCH_SIZE': 4, 'SHUFFLE': False}
    cfg['IMPORTS'] = [str(user_parts / 'raising_parts.py')]
    assert train(tmp_path, cfg) == 1
    err = capsys.readouterr().err
    first = err.strip().splitlines()[0]
    assert first == 'error: ShortDataset (SOLVER.TRAIN_DATA) raised RuntimeError: disk on fire (its traceback follows)'
    assert "raise RuntimeError('disk on fire')" in err


def test_missing_classifier_input_is_still_one_line(tmp_path, capsys):
    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run', MAX_STEPS=1)
    assert train(tmp_path, cfg, 'SOLVER.MODEL.INPUT_KEY=image') == 2
    line = one_error_line(capsys)
    assert "the model needs input 'image', which the inputs lack; they have ['img', 'label']" in line
    assert 'SOLVER.MODEL.INPUT_KEY' in line
    assert os.path.isdir(tmp_path / 'run')


def test_train_batches_without_the_labels_are_one_line_saying_how_the_data_gives_them(tmp_path, capsys):
    """The loss failed on None deep inside (an AttributeError, 49 lines); first, the label column read as a feature
    made the model's IN_DIM look wrong."""
    table = numbers_csv(tmp_path / 'table.csv', [*FEATURES, 'label'], ['0', '1', '2'] * 8)
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=table).replace(', LABEL_COLUMN: species', ''))
    assert run(run_train, ['--cfg', str(job), 'SOLVER.MODEL.BACKBONE.IN_DIM=8']) == 2  # with EVAL_DATA: sizes first
    line = one_error_line(capsys)
    assert "set SOLVER.MODEL.BACKBONE.IN_DIM (now 8) to fit the data; but the batches have no 'label' either: a" in line
    assert 'CsvDataset without LABEL_COLUMN reads the label column as a feature (set LABEL_COLUMN)' in line, line
    words = ['SOLVER.MODEL.BACKBONE.IN_DIM=9', 'SOLVER.EVAL_DATA=null', 'SOLVER.METRICS=[]']
    assert run(run_train, ['--cfg', str(job), *words, f'SOLVER.WORK_DIR={tmp_path / "run2"}']) == 2
    line = one_error_line(capsys)
    assert "the train batches have no 'label', the class labels the model learns from (they have ['x'])" in line
    assert 'a CsvDataset reads them from its LABEL_COLUMN (set it;' in line and 'SOLVER.MODEL.LABEL_KEY' in line
    cfg = blob_solver_cfg(numpy_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run3', MAX_STEPS=1)
    cfg['SOLVER']['TRAIN_DATA']['KEY_MAP'] = {'x': 'img'}  # the labels stay 'y'
    del cfg['SOLVER']['EVAL_DATA']
    assert train(tmp_path, cfg) == 2
    assert "an NpzDataset from its array 'label' (or KEY_MAP: {y: label})" in one_error_line(capsys)


def test_the_documented_table_job_runs(tmp_path, capsys, monkeypatch):
    with open(os.path.join(REPO, 'docs', 'extending.md'), encoding='utf-8') as f:
        blocks = re.findall(r'```yaml\n(.*?)```', f.read(), flags=re.S)
    (job,) = [block for block in blocks if 'CsvDataset' in block and 'SOLVER:' in block]
    monkeypatch.chdir(tmp_path)
    iris_like_csv(tmp_path / 'iris_train.csv')
    iris_like_csv(tmp_path / 'iris_val.csv', n=60)
    (tmp_path / 'iris.yaml').write_text(job)
    assert run(run_train, ['--cfg', 'iris.yaml', 'SOLVER.MAX_EPOCHS=5']) == 0, capsys.readouterr().err
    accuracy = float(re.search(r'eval epoch 5/5 \(60 samples\): accuracy: ([0-9.]+)', capsys.readouterr().out).group(1))
    assert accuracy > 0.8
    assert os.path.isfile(tmp_path / 'work_dir' / 'iris' / 'checkpoints' / 'checkpoint-best.pth')


@pytest.mark.parametrize('split', ['TRAIN_DATA', 'EVAL_DATA', 'TEST_DATA'])
def test_an_empty_split_is_one_line_naming_it_never_a_score_of_0(split, tmp_path, capsys):
    """An empty eval pass used to report accuracy 0 (mse 0: a "new best"); an empty train split blamed the
    number of processes."""
    npz = numpy_blobs(tmp_path / 'blobs.npz')
    np.savez(tmp_path / 'empty.npz', x=np.zeros((0, 8)), y=np.zeros(0, np.int64))
    cfg = blob_solver_cfg(npz, tmp_path / 'run', MAX_STEPS=1)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    cfg['SOLVER'][split]['PATH'] = str(tmp_path / 'empty.npz')
    assert train(tmp_path, cfg) == 2
    mode = split.split('_')[0].lower()
    line = one_error_line(capsys)
    assert re.search(rf'^error: SOLVER\.{split}: .*empty\.npz\): the {mode} split has no samples;', line), line


def test_accuracy_takes_only_integer_class_indices_within_the_logits():
    """Labels that do not fit the logits used to score a number (0 for a regression model, near 0 for labels
    counted from 1) or crash inside torch (one-hot labels)."""
    from scepter_like.errors import DataError
    from scepter_like.metric.registry import METRICS

    accuracy = METRICS.build({'NAME': 'AccuracyMetric'})
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0], [2.0, 0.0, 0.0]])
    labels = torch.tensor([0, 1, 2, 1], dtype=torch.int32)
    assert accuracy(logits, labels) == {'accuracy': 0.75} == accuracy(logits, labels[:, None])
    mistakes = [
        (logits[:, :1], labels.float(), r'the logits are \[4, 1\] .*a model of one output is a regression'),
        (logits, labels + 1, r'of 4 labels, 0 are below 0 and 1 at or above 3, .* labels counted from 1 take label'),
        (logits, labels - 1, r'1 are below 0 .*remap the labels \(e\.g\. -1 / 1 to 0 / 1\)'),
        (logits, torch.eye(3)[labels], r'the labels float32 \[4, 3\], one-hot .*save labels\.argmax\(1\) instead'),
        (logits, labels.double(), r'labels float64 \[4\]; class indices are integers .*DTYPES: \{label: int64\}'),
        (logits, labels[:2], r'the labels int32 \[2\]; it takes one class index per row of logits'),
    ]
    for bad_logits, bad_labels, pattern in mistakes:
        with pytest.raises(DataError, match=pattern):
            accuracy(bad_logits, bad_labels)
    # in a pass the range is checked once, when the sums are read (no wait for the device on each batch)
    accuracy.update({'logits': logits, 'label': labels + 1})
    with pytest.raises(DataError, match='at or above 3'):
        accuracy.compute()


def test_eval_labels_counted_from_1_and_one_hot_labels_end_the_run_with_one_line(tmp_path, capsys):
    npz = numpy_blobs(tmp_path / 'blobs.npz')
    with np.load(npz) as data:
        np.savez(tmp_path / 'from1.npz', x=data['x'], y=data['y'] + 1)
        np.savez(tmp_path / 'onehot.npz', x=data['x'], y=np.eye(3)[data['y']])
    for name, pattern in (('from1', 'labels counted from 1 take label - 1'), ('onehot', r'one-hot .*argmax')):
        cfg = blob_solver_cfg(npz, tmp_path / name, MAX_STEPS=1)
        for split in ('EVAL_DATA',) + (('TRAIN_DATA',) if name == 'onehot' else ()):  # CrossEntropy takes one-hot
            cfg['SOLVER'][split]['PATH'] = str(tmp_path / f'{name}.npz')
        assert train(tmp_path, cfg) == 2
        assert re.search(f'^error: AccuracyMetric: .*{pattern}', one_error_line(capsys))


def test_text_labels_in_arrays_are_one_line_naming_the_array_and_the_fix(tmp_path, capsys):
    npz = numpy_blobs(tmp_path / 'blobs.npz')
    with np.load(npz) as data:
        np.savez(tmp_path / 'text.npz', x=data['x'], y=np.array(['barolo', 'grignolino', 'barbera'])[data['y']])
    cfg = blob_solver_cfg(str(tmp_path / 'text.npz'), tmp_path / 'run', MAX_STEPS=1)
    assert train(tmp_path, cfg) == 2
    line = one_error_line(capsys)
    assert re.search(r"text\.npz: array 'label' holds <U10 values, not numbers; .*np\.unique.*CsvDataset", line), line


def test_the_runs_config_records_the_class_names_of_text_labels_in_index_order(tmp_path, capsys):
    """CLASSES: [] numbers text labels by sorted name; the run's config.yaml says which name is which index, so
    predictions map back to names and ``--cfg WORK_DIR/config.yaml`` numbers them alike."""
    job = tmp_path / 'csv.yaml'
    job.write_text(CSV_JOB.format(work_dir=tmp_path / 'run', csv=iris_like_csv(tmp_path / 'iris.csv')))
    assert run(run_train, ['--cfg', str(job), 'SOLVER.MAX_EPOCHS=1']) == 0, capsys.readouterr().err
    recorded = yaml.safe_load(open(tmp_path / 'run' / 'config.yaml'))['SOLVER']
    for split in ('TRAIN_DATA', 'EVAL_DATA'):
        assert recorded[split]['CLASSES'] == ['setosa', 'versicolor', 'virginica']


def test_cross_entropy_weighs_classes_and_refuses_weights_of_another_count():
    """WEIGHT is torch's per-class weight; a list of another length than the logits is one line naming the key."""
    import torch

    from scepter_like.errors import ConfigError
    from scepter_like.model.registry import LOSSES

    logits, labels = torch.randn(4, 3), torch.tensor([0, 2, 1, 2])
    loss = LOSSES.build({'NAME': 'CrossEntropy', 'WEIGHT': [1, 0.5, 2.0], 'LABEL_SMOOTHING': 0.1})
    weight = torch.tensor([1, 0.5, 2.0])
    expected = torch.nn.functional.cross_entropy(logits, labels, weight=weight, label_smoothing=0.1)
    assert torch.allclose(loss(logits, labels), expected)
    assert loss.state_dict() == {}  # checkpoints keep their keys
    with pytest.raises(ConfigError, match=r'^WEIGHT: 2 class weights for logits of 3 classes; give one weight per'):
        LOSSES.build({'NAME': 'CrossEntropyLoss', 'WEIGHT': [1, 2]})(logits, labels)
    with pytest.raises(ConfigError, match=r'^WEIGHT: \[1, -2\] must be numbers >= 0'):
        LOSSES.build({'NAME': 'CrossEntropyLoss', 'WEIGHT': [1, -2]})


def numbers_csv(path, header, labels, delimiter=','):
    """A table of 8 numeric features under ``header`` and the given ``labels`` (texts) as its last column."""
    rng = np.random.default_rng(0)
    rows = [[*map(str, rng.normal(size=8).round(3)), label] for label in labels]
    path.write_text('\n'.join(delimiter.join(row) for row in [header, *rows]) + '\n')
    return str(path)


FEATURES = [f'f{i}' for i in range(8)]


def test_a_header_naming_a_column_twice_is_refused_naming_the_file_and_name(tmp_path):
    """By name, the first 'f1' was dropped and the second read twice, without a word."""
    from scepter_like.data.registry import DATASETS
    from scepter_like.errors import DataError

    path = numbers_csv(tmp_path / 'dup.csv', ['f0', 'f1', 'f1', *FEATURES[3:], 'label'], ['0', '1'] * 4)
    with pytest.raises(DataError, match=r"dup\.csv: the header names column\(s\) \['f1'\] more than once"):
        DATASETS.build({'NAME': 'CsvDataset', 'PATH': path, 'LABEL_COLUMN': 'label'})


def test_one_text_cell_among_numeric_labels_is_refused_not_made_text_classes(tmp_path):
    """Text classes sort as strings ('10' before '2'): one stray cell would renumber most rows' classes."""
    from scepter_like.data.registry import DATASETS
    from scepter_like.errors import DataError

    labels = [str(i % 12) for i in range(24)]
    for stray in ('unknown', '?', 'True'):
        path = numbers_csv(tmp_path / 'stray.csv', [*FEATURES, 'label'], labels[:6] + [stray] + labels[7:])
        with pytest.raises(DataError, match=rf"stray\.csv line 8: the LABEL_COLUMN 'label' holds '{re.escape(stray)}'"
                           r" among numbers \(1 such cell\(s\)\); .*text labels must all be text"):  # fmt: skip
            DATASETS.build({'NAME': 'CsvDataset', 'PATH': path, 'LABEL_COLUMN': 'label'})
    texts = ['cat', 'dog', '3', 'cat']  # a text-class column holding a number-like name keeps working
    data = DATASETS.build({'NAME': 'CsvDataset', 'PATH': numbers_csv(tmp_path / 't.csv', [*FEATURES, 'y'], texts),
                           'LABEL_COLUMN': 'y'})  # fmt: skip
    assert data.classes == ['3', 'cat', 'dog'] and data.arrays['label'].tolist() == [1, 2, 0, 1]


def test_columns_reading_the_label_column_are_refused(tmp_path):
    from scepter_like.data.registry import DATASETS
    from scepter_like.errors import DataError

    path = numbers_csv(tmp_path / 'leak.csv', [*FEATURES, 'label'], ['0', '1'] * 4)
    cfg = {'NAME': 'CsvDataset', 'PATH': path, 'LABEL_COLUMN': 'label', 'COLUMNS': {'x': [*FEATURES, 'label']}}
    with pytest.raises(DataError, match=r"^COLUMNS\.x: reads the LABEL_COLUMN 'label', so the model would be given"):
        DATASETS.build(cfg)


@pytest.mark.parametrize('delimiter, written', [(';', "';'"), ('\t', '"\\t"')])
def test_a_table_of_another_delimiter_is_told_to_set_delimiter(delimiter, written, tmp_path):
    from scepter_like.data.registry import DATASETS
    from scepter_like.errors import DataError

    path = numbers_csv(tmp_path / 'semi.csv', [*FEATURES, 'label'], ['0', '1'] * 4, delimiter)
    hint = re.escape(f'; its values look separated by {written}: set DELIMITER: {written}')
    with pytest.raises(DataError, match=rf"has no column 'label' \(.*\){hint}$"):
        DATASETS.build({'NAME': 'CsvDataset', 'PATH': path, 'LABEL_COLUMN': 'label'})
    data = DATASETS.build({'NAME': 'CsvDataset', 'PATH': path, 'LABEL_COLUMN': 'label', 'DELIMITER': delimiter})
    assert data.arrays['x'].shape == (8, 8)


def test_a_file_of_the_other_kind_is_one_line_saying_what_it_is(tmp_path, capsys):
    """numpy and the csv module fail on these with a TypeError, a ValueError about pickles or a UnicodeDecodeError."""
    npz = numpy_blobs(tmp_path / 'blobs.npz')
    table = numbers_csv(tmp_path / 'table.csv', [*FEATURES, 'label'], ['0', '1'] * 4)
    np.save(tmp_path / 'x.npy', np.zeros((4, 8)))
    np.savez(tmp_path / 'objects.npz', x=np.array([{'a': 1}] * 4, dtype=object))
    cases = [
        ('NpzDataset', str(tmp_path / 'x.npy'), r'x\.npy is a single \.npy array \(np\.save\); NpzDataset reads named'
         r' arrays saved with np\.savez\(path, x=features, label=labels\)'),
        ('NpzDataset', table, r'table\.csv is not an \.npz archive \(a CSV table is read by CsvDataset\); NpzDataset'),
        ('CsvDataset', npz, r'blobs\.npz is not a CSV text file but an \.npz archive \(np\.savez\): NpzDataset reads'),
        ('NpzDataset', str(tmp_path / 'objects.npz'), r"objects\.npz: array 'x' holds Python objects \(dtype object\)"),
    ]  # fmt: skip
    for name, path, pattern in cases:
        cfg = blob_solver_cfg(path, tmp_path / 'run', MAX_STEPS=1)
        cfg['SOLVER']['TRAIN_DATA'] = {'NAME': name, 'PATH': path, 'LABEL_COLUMN': 'label', 'BATCH_SIZE': 4}
        if name == 'NpzDataset':
            del cfg['SOLVER']['TRAIN_DATA']['LABEL_COLUMN']
        assert train(tmp_path, cfg) == 2
        line = one_error_line(capsys)
        assert re.search(pattern, line), line
        assert 'PATH: ' in line or 'objects' in line, line


def test_the_documented_regression_on_a_table_reports_the_mse_its_predictions_give(tmp_path):
    """docs/extending.md, "A regression on a table": Classifier with MSELoss and one output reads the target
    column through LABEL_KEY; MSEMetric on [logits, label] reports the mean squared error of predict()'s outputs."""
    from scepter_like import build_solver

    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, 3))
    target = features @ np.array([1.5, -2.0, 0.5]) + 0.1 * rng.normal(size=200)
    path = tmp_path / 'houses.csv'
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['id', 'rooms', 'age', 'distance', 'price'])
        writer.writerows([[f'h{i}', *row, y] for i, (row, y) in enumerate(zip(features, target))])
    data = {'NAME': 'CsvDataset', 'PATH': str(path), 'COLUMNS': {'x': ['rooms', 'age', 'distance'], 'y': 'price'}}
    cfg = {
        'SOLVER': {
            'NAME': 'TrainValSolver',
            'MAX_EPOCHS': 20,
            'MODEL': {
                'NAME': 'Classifier',
                'INPUT_KEY': 'x',
                'LABEL_KEY': 'y',
                'LOSS': {'NAME': 'MSELoss'},
                'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 3, 'HIDDEN_DIMS': [32], 'OUT_DIM': 1},
            },
            'OPTIMIZER': {'NAME': 'Adam', 'LEARNING_RATE': 0.01},
            'TRAIN_DATA': dict(data, BATCH_SIZE=32),
            'EVAL_DATA': dict(data, BATCH_SIZE=64),
            'METRICS': [{'NAME': 'MSEMetric', 'KEYS': ['logits', 'label']}],  # eval outputs: logits, label
        }
    }
    with build_solver(cfg, [f'SOLVER.WORK_DIR={tmp_path / "run"}']) as session:
        reported = session.fit()[-1]['mse']  # the last evaluation's
        predicted = session.predict({'x': features})['logits']
    assert predicted.shape == (200, 1)
    mse = float(((predicted[:, 0].astype(np.float64) - target) ** 2).mean())
    assert reported == pytest.approx(mse, rel=1e-4) and mse < 0.1  # trained, and scored as documented
