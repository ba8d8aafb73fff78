"""Small in-process building blocks for solver tests."""

import logging

import numpy as np
import torch
from conftest import load_tool

from scepter_like.config import Config
from scepter_like.solver import SOLVERS


def load_run_train():
    """``main`` of tools/run_train.py, to run the tool in this process: ``scepter_like.cli.run(main, argv)``."""
    return load_tool('run_train.py').main


def write_blobs(path, n=96, dim=8, classes=3, seed=0):
    """An .npz of ``n`` Gaussian blobs: x float32 [n, dim], y int64 [n]."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(classes, dim))
    y = rng.integers(0, classes, size=n)
    x = centers[y] + rng.normal(0, 1, size=(n, dim))
    np.savez(path, x=x.astype(np.float32), y=y.astype(np.int64))
    return str(path)


def blob_solver_cfg(npz, work_dir, hooks=None, **solver_keys):
    """A TrainValSolver config on the blobs: MLP classifier, SGD, given train hooks."""
    data = {'NAME': 'NpzDataset', 'PATH': npz, 'KEY_MAP': {'x': 'img', 'y': 'label'}, 'BATCH_SIZE': 16}
    solver = {
        'NAME': 'TrainValSolver',
        'WORK_DIR': str(work_dir),
        'MAX_EPOCHS': 2,
        'MODEL': {'NAME': 'Classifier', 'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 8, 'HIDDEN_DIMS': [16], 'OUT_DIM': 3}},
        'OPTIMIZER': {'NAME': 'SGD', 'LEARNING_RATE': 0.1},
        'TRAIN_DATA': dict(data),
        'EVAL_DATA': dict(data, SHUFFLE=False),
        'METRICS': [{'NAME': 'AccuracyMetric'}],
        'TRAIN_HOOKS': hooks if hooks is not None else [{'NAME': 'BackwardHook'}],
    }
    solver.update(solver_keys)
    return {'ENV': {'SEED': 0}, 'SOLVER': solver}


def build_solver(cfg_dict, set_up=True):
    cfg = Config(cfg_dict)
    solver = SOLVERS.build(cfg.SOLVER, logger=logging.getLogger('scepter_like.test'))
    if set_up:
        solver.set_up_pre()
        solver.set_up()
    return solver


def assert_same(a, b, where='checkpoint'):
    """Every tensor equal (torch.equal) and every plain value equal, recursively."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        same = a.dtype == b.dtype and torch.equal(a, b)
        assert same, where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f'{where}.{key}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f'{where}[{i}]')
    else:
        assert a == b, where
