"""Bad input that used to escape as a traceback (or pass silently) is one error line, exit 2.

Each case is one run of tools/run_train.py: ``--print-config`` where the mistake shows in the
config, else a one-step run of a tiny blob job (no digits download, no sklearn) that fails
while building or at its first step.  A component that raises its own exception keeps its
traceback, after a first line naming the component (exit 1).
"""

import os
import re
import textwrap

import numpy as np
import pytest
import yaml
from conftest import DIGITS_CFG, run_cli
from helpers import blob_solver_cfg, write_blobs


@pytest.fixture(scope='module')
def blob_cfg(tmp_path_factory):
    """A YAML config of the blob job (MLP 8 -> 16 -> 3 classifier, SGD) and its folder."""
    root = tmp_path_factory.mktemp('blobs')
    cfg = blob_solver_cfg(write_blobs(root / 'blobs.npz'), root / 'unused', MAX_STEPS=1)
    cfg['ENV']['NUM_THREADS'] = 1
    path = root / 'blobs.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _negative_labels(tmp_path, blob_cfg):
    """The blob job's config on a copy of its data whose labels are -1 / 1 (an SVM's convention)."""
    cfg = yaml.safe_load(open(blob_cfg))
    with np.load(cfg['SOLVER']['TRAIN_DATA']['PATH']) as data:
        np.savez(tmp_path / 'pm.npz', x=data['x'], y=np.where(data['y'] > 0, 1, -1))
    for key in ('TRAIN_DATA', 'EVAL_DATA'):
        cfg['SOLVER'][key]['PATH'] = str(tmp_path / 'pm.npz')
    path = tmp_path / 'pm.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


PLAIN_METRIC = """
from scepter_like.metric.registry import METRICS


@METRICS.register_class()
class PlainMetric:  # not derived from scepter_like.metric.base.Metric
    def __init__(self, cfg, logger=None):
        self.cfg = cfg
"""


def dataset_module(name, item):
    """The text of a user module registering dataset ``name`` of 16 items, ``__getitem__`` returning ``item``."""
    return f"""
import torch
from scepter_like.data.registry import DATASETS


@DATASETS.register_class()
class {name}:
    def __init__(self, cfg, logger=None):
        self.cfg = cfg

    def __len__(self):
        return 16

    def __getitem__(self, index):
        {item}
"""


TUPLE_DATASET = dataset_module('TupleDataset', 'return torch.zeros(8), index % 3')


def _write(tmp, name, text, mode='w'):
    path = tmp / name
    if mode == 'wb':
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text))
    return str(path)


def _work(tmp):
    return f'SOLVER.WORK_DIR={tmp / "work"}'


def _prepare_work(tmp, make):
    """WORK_DIR with one of its parts of the wrong kind."""
    work = tmp / 'work'
    work.mkdir()
    make(work)
    return [_work(tmp)]


# case -> (args from (tmp_path, blob config path), pattern of the one error line)
CASES = {
    'config not UTF-8': (
        lambda t, b: ['--cfg', _write(t, 'latin1.yaml', b'SOLVER:\n  NAME: TrainValSolver  # caf\xe9\n', 'wb')],
        r'latin1\.yaml is not UTF-8 text \(byte 0xe9 at line 2\); save the file as UTF-8',
    ),
    'duplicate key': (
        lambda t, b: [
            '--cfg',
            _write(t, 'dup.yaml', f'_BASE_: {DIGITS_CFG}\nSOLVER:\n  MAX_EPOCHS: 2\n  MAX_EPOCHS: 3\n'),
            '--print-config',
        ],
        r"invalid YAML in .*dup\.yaml at line 4, column 3: key 'MAX_EPOCHS' is written twice .*first at line 3",
    ),
    'betas too long': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.OPTIMIZER={NAME: AdamW, BETAS: [0.9, 0.99, 0.1]}'],
        r'SOLVER\.OPTIMIZER\.BETAS: AdamW takes 2 values here \(like \[0\.9, 0\.999\]\), got 3',
    ),
    'betas too short': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.OPTIMIZER={NAME: AdamW, BETAS: [0.9]}'],
        r'SOLVER\.OPTIMIZER\.BETAS: AdamW takes 2 values here .*got 1',
    ),
    'milestones as a string': (  # YAML reads 1,2 as the string '1,2': torch took its characters, the LR never fell
        lambda t, b: [
            '--cfg',
            _write(
                t,
                'ms.yaml',
                f'_BASE_: {b}\nSOLVER:\n  LR_SCHEDULER:\n    NAME: MultiStepLR\n    MILESTONES: 1,2\n',
            ),
            '--print-config',
        ],
        r"SOLVER\.LR_SCHEDULER\.MILESTONES: expected a list, got '1,2'; write a YAML list: \[1, 2\]$",
    ),
    'milestones as a number': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'SOLVER.LR_SCHEDULER={NAME: MultiStepLR, MILESTONES: 3}'],
        r'SOLVER\.LR_SCHEDULER\.MILESTONES: expected a list, got 3; write a YAML list: \[3\]$',
    ),
    'betas as a string': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'SOLVER.OPTIMIZER.BETAS=0.9 0.99'],
        r"SOLVER\.OPTIMIZER\.BETAS: expected a list \(like \[0\.9, 0\.999\]\), got '0\.9 0\.99'; write a YAML list:"
        r' \[0\.9, 0\.99\]$',
    ),
    'two BackwardHooks': (  # the second's GRADIENT_CLIP was dropped without a word
        lambda t, b: [
            '--cfg',
            b,
            _work(t),
            'SOLVER.TRAIN_HOOKS=[{NAME: BackwardHook}, {NAME: LogHook}, {NAME: BackwardHook, GRADIENT_CLIP: 1.0}]',
        ],
        r'^error: SOLVER\.TRAIN_HOOKS\[2\]: a second BackwardHook after SOLVER\.TRAIN_HOOKS\[0\]; .* merge their keys'
        r' into one$',
    ),
    'two LogHooks': (  # every line printed twice
        lambda t, b: [
            '--cfg',
            b,
            _work(t),
            'SOLVER.TRAIN_HOOKS=[{NAME: BackwardHook}, {NAME: LogHook}, {NAME: LogHook}]',
        ],
        r'^error: SOLVER\.TRAIN_HOOKS\[2\]: a second LogHook after SOLVER\.TRAIN_HOOKS\[1\]',
    ),
    'a CheckpointHook in EVAL_HOOKS': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.EVAL_HOOKS=[{NAME: CheckpointHook}]'],
        r'^error: SOLVER\.EVAL_HOOKS\[0\]: a CheckpointHook saves the training state, from TRAIN_HOOKS only',
    ),
    'a remote file system': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.FILE_SYSTEM={NAME: AliyunOssFs, BUCKET: b}'],
        r"^error: SOLVER\.FILE_SYSTEM: 'AliyunOssFs' is not supported; scepter_like uses local files only",
    ),
    'device gpu7': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'ENV.DEVICE=gpu7'],
        r"ENV\.DEVICE: 'gpu7' is not a device; write cpu, cuda, cuda:N",
    ),
    'device cuda:x': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'ENV.DEVICE=cuda:x'],
        r"ENV\.DEVICE: 'cuda:x' is not a device",
    ),
    'checkpoints is a file': (
        lambda t, b: ['--cfg', b, *_prepare_work(t, lambda w: (w / 'checkpoints').write_text(''))],
        r'SOLVER\.WORK_DIR: .*work/checkpoints is a file where the run keeps a folder',
    ),
    'log file is a folder': (
        lambda t, b: ['--cfg', b, *_prepare_work(t, lambda w: (w / 'std_log.txt').mkdir())],
        r'SOLVER\.LOG_FILE: .*work/std_log\.txt is a folder where the run writes a file; move it away or use'
        r' another SOLVER\.LOG_FILE$',
    ),
    'log file is the work dir': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.LOG_FILE=.'],
        r'^error: SOLVER\.LOG_FILE: .*work/\. is a folder where the run writes a file',
    ),
    'metrics.jsonl is a folder': (
        lambda t, b: ['--cfg', b, *_prepare_work(t, lambda w: (w / 'metrics.jsonl').mkdir())],
        r'SOLVER\.WORK_DIR: .*work/metrics\.jsonl is a folder where the run writes a file',
    ),
    'infinite learning rate': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'SOLVER.OPTIMIZER.LEARNING_RATE=.inf'],
        r'SOLVER\.OPTIMIZER\.LEARNING_RATE: must be a finite number at least 0\.0, got inf',
    ),
    'nan learning rate': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'SOLVER.OPTIMIZER.LEARNING_RATE=.nan'],
        r'SOLVER\.OPTIMIZER\.LEARNING_RATE: must be a finite number at least 0\.0, got nan',
    ),
    'negative learning rate': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', 'SOLVER.OPTIMIZER.LEARNING_RATE=-0.1'],
        r'SOLVER\.OPTIMIZER\.LEARNING_RATE: must be at least 0\.0, got -0\.1',
    ),
    'model input size': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.MODEL.BACKBONE.IN_DIM=4'],
        r'the model Classifier \(SOLVER\.MODEL\) does not fit the batch \(img: \[16, 8\] float32, label: \[16\] int64\)'
        r' at its input: mat1 and mat2 shapes cannot be multiplied .*; set SOLVER\.MODEL\.BACKBONE\.IN_DIM \(now 4\)',
    ),
    'model output size': (
        # the train step's loss (the sanity pass's AccuracyMetric would say it first, without the config keys)
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.MODEL.BACKBONE.OUT_DIM=2', 'SOLVER.SANITY_EVAL_BATCHES=0'],
        r'the model Classifier \(SOLVER\.MODEL\) does not fit the batch \(img: \[16, 8\] float32, .*\) at its output:'
        r' Target 2 is out of bounds; set SOLVER\.MODEL\.BACKBONE\.OUT_DIM \(now 2\) to fit the data \(class'
        r' labels are indices 0 \.\. classes - 1: labels counted from 1 take label - 1\)',
    ),
    'top-k past the classes': (
        lambda t, b: ['--cfg', b, _work(t), 'SOLVER.METRICS.0.TOPK=[1, 5]'],
        r'SOLVER\.METRICS\[0\]\.TOPK: top-5 accuracy of 3 classes is 1 by definition; give TOPK values up to 3$',
    ),
    'lr for learning_rate': (
        lambda t, b: ['--cfg', b, '--print-config', 'SOLVER.OPTIMIZER.LR=0.1'],
        r'SOLVER\.OPTIMIZER\.LR: unknown key for OPTIMIZERS\.SGD; did you mean LEARNING_RATE\?',
    ),
    'a missing base file': (
        lambda t, b: ['--cfg', _write(t, 'child.yaml', '_BASE_: nothere.yaml\n'), '--print-config'],
        r"child\.yaml: its _BASE_ 'nothere\.yaml' is not a file \(.*nothere\.yaml\); a base path is relative to",
    ),
    'negative class labels': (
        lambda t, b: ['--cfg', _negative_labels(t, b), _work(t), 'SOLVER.SANITY_EVAL_BATCHES=0'],  # the loss's line
        r'at its output: Target -1 is out of bounds; class labels are indices 0, 1, \.\.\., classes - 1: remap the'
        r' labels \(e\.g\. -1 / 1 to 0 / 1\)$',
    ),
    'import with a syntax error': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', '--import', _write(t, 'broken.py', 'x = 1\ndef f(:\n')],
        r"IMPORTS: '.*broken\.py' does not compile: invalid syntax at line 2 of .*broken\.py",
    ),
    'import not UTF-8': (
        lambda t, b: ['--cfg', DIGITS_CFG, '--print-config', '--import', _write(t, 'l1.py', b'x = "caf\xe9"\n', 'wb')],
        r"IMPORTS: '.*l1\.py' is not UTF-8 text \(byte \d+\); save it as UTF-8",
    ),
    'metric not derived from Metric': (
        lambda t, b: [
            '--cfg',
            b,
            _work(t),
            '--import',
            _write(t, 'plain_metric.py', PLAIN_METRIC),
            'SOLVER.METRICS=[{NAME: PlainMetric}]',
        ],  # fmt: skip
        r'SOLVER\.METRICS\[0\]: METRICS\.PlainMetric \(class PlainMetric, .*plain_metric\.py\) does not derive from'
        r' scepter_like\.metric\.base\.Metric; a metric names its sums in state_names, .* output_names\(\)',
    ),
    'dataset returning tuples': (
        lambda t, b: [
            '--cfg',
            b,
            _work(t),
            '--import',
            _write(t, 'tuple_ds.py', TUPLE_DATASET),
            'SOLVER.TRAIN_DATA={NAME: TupleDataset, BATCH_SIZE: 4}',
            'SOLVER.EVAL_DATA=null',
        ],  # fmt: skip
        r'SOLVER\.TRAIN_DATA: DATASETS\.TupleDataset \(class TupleDataset, .*tuple_ds\.py\) returns tuple items;'
        r' its __getitem__ must return a dict of named fields',
    ),
    'dataset returning tuples, in a worker': (
        lambda t, b: [
            '--cfg',
            b,
            _work(t),
            '--import',
            _write(t, 'tuple_ds.py', TUPLE_DATASET),
            'SOLVER.TRAIN_DATA={NAME: TupleDataset, BATCH_SIZE: 4, NUM_WORKERS: 1}',
            'SOLVER.EVAL_DATA=null',
        ],  # fmt: skip
        r'^error: SOLVER\.TRAIN_DATA: DATASETS\.TupleDataset \(class TupleDataset, .*tuple_ds\.py\) returns tuple',
    ),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_bad_input_is_one_error_line(case, tmp_path, blob_cfg):
    make_args, pattern = CASES[case]
    res = run_cli('run_train.py', *make_args(tmp_path, blob_cfg), cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-3000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), res.stderr[-3000:]
    assert re.search(pattern, lines[0]), lines[0]
    assert ' step 1 ' not in res.stdout and not (tmp_path / 'work' / 'checkpoints' / 'latest').exists()
    log = tmp_path / 'work' / 'std_log.txt'
    if log.is_file():  # the run's log file says why it ended, as the console does
        assert log.read_text().splitlines()[-1].endswith(' ERROR ' + lines[0])


@pytest.mark.skipif(not os.path.isdir('/sys/kernel'), reason='needs a folder no one may write to (sysfs)')
def test_a_work_dir_that_cannot_be_written_is_one_error_line(blob_cfg):
    # the tests run as root, for whom permission bits do not stop a write: sysfs refuses new files to anyone
    res = run_cli('run_train.py', '--cfg', blob_cfg, 'SOLVER.WORK_DIR=/sys/kernel')
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stderr.startswith('error: SOLVER.WORK_DIR: cannot write into /sys/kernel (')
    assert len(res.stderr.splitlines()) == 1


RAISING_DATASET = dataset_module('RaisingDataset', "raise RuntimeError('disk on fire')")

RAISING = {
    'IMPORTS module': (
        lambda t: ['--import', _write(t, 'raising_mod.py', "raise RuntimeError('my module is broken')\n")],
        r"error: IMPORTS entry '.*raising_mod\.py' raised RuntimeError: my module is broken",
        'raising_mod.py", line 1',
    ),
    'dataset': (
        lambda t: [
            '--import',
            _write(t, 'raising_ds.py', RAISING_DATASET),
            'SOLVER.TRAIN_DATA={NAME: RaisingDataset}',
        ],  # fmt: skip
        r'error: RaisingDataset \(SOLVER\.TRAIN_DATA\) raised RuntimeError: disk on fire',
        'raising_ds.py", line 15, in __getitem__',
    ),
    'dataset in a worker': (
        lambda t: [
            '--import',
            _write(t, 'raising_ds.py', RAISING_DATASET),
            'SOLVER.TRAIN_DATA={NAME: RaisingDataset, NUM_WORKERS: 1}',
        ],  # fmt: skip
        r'error: RaisingDataset \(SOLVER\.TRAIN_DATA\) raised RuntimeError: Caught RuntimeError in DataLoader worker',
        'raising_ds.py", line 15, in __getitem__',
    ),
}


@pytest.mark.parametrize('case', sorted(RAISING))
def test_a_component_that_raises_keeps_its_traceback_after_a_line_naming_it(case, tmp_path, blob_cfg):
    make_args, first_line, frame = RAISING[case]
    res = run_cli('run_train.py', '--cfg', blob_cfg, _work(tmp_path), *make_args(tmp_path), cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-3000:]
    first, rest = res.stderr.split('\n', 1)
    assert re.match(first_line, first), first
    assert rest.startswith('Traceback (most recent call last):') and frame in rest, rest[-3000:]
    log = tmp_path / 'work' / 'std_log.txt'
    if log.is_file():  # the run's log file ends with the same line and traceback (an IMPORTS module raises earlier)
        text = log.read_text()
        said = text[text.rindex(' ERROR ') + len(' ERROR ') :]
        assert said.startswith(f'{first}\nTraceback (most recent call last):') and frame in said, said[-3000:]


PEER_LOST_HOOK = """
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS


@HOOKS.register_class()
class PeerLostHook(Hook):  # what a gradient all-reduce raises on rank 0 when rank 1 crashed
    def after_iter(self, solver):
        raise RuntimeError('[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:5678')
"""


def test_the_log_file_ends_with_the_consoles_line_when_another_process_stopped(tmp_path, blob_cfg):
    """The console said another process stopped; the log file said 'the run ended with RuntimeError: ... (see its
    traceback)', a traceback printed nowhere."""
    hook = ['--import', _write(tmp_path, 'peer.py', PEER_LOST_HOOK), 'SOLVER.TRAIN_HOOKS+=[{NAME: PeerLostHook}]']
    res = run_cli('run_train.py', '--cfg', blob_cfg, _work(tmp_path), *hook, cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-3000:]
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: another process of the job stopped'), res.stderr[-3000:]
    logged = (tmp_path / 'work' / 'std_log.txt').read_text().splitlines()
    assert logged[-1].endswith(' ERROR ' + lines[0]), logged[-3:]
