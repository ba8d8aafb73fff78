"""The benchmark workloads, shared by the hand-written loop and the solver config.

Plain data only (no torch, no scepter_like), so the hand-written script imports nothing
of the toolkit.  Each pass over the data is ``steps_per_epoch`` full batches.
"""

import numpy as np

WORKLOADS = {
    # overhead-dominated: a tiny MLP, where every microsecond of framework shows
    'mlp': {
        'shape': (64,),
        'classes': 10,
        'batch': 64,
        'steps': 3000,
        'steps_per_epoch': 300,
        'hidden': [256, 256],
        'log_interval': 10,
    },
    # compute-dominated: a ConvNet on 32x32 RGB inputs
    'conv': {
        'shape': (3, 32, 32),
        'classes': 10,
        'batch': 64,
        'steps': 200,
        'steps_per_epoch': 20,
        'channels': [32, 64],
        'log_interval': 10,
    },
}

LEARNING_RATE = 1e-3
SEED = 0


def plan(name, steps=None):
    """(workload dict, epochs, total steps): whole epochs only, so both loops end at an epoch end."""
    w = dict(WORKLOADS[name])
    steps = steps or w['steps']
    spe = min(w['steps_per_epoch'], steps)
    epochs = max(1, steps // spe)
    w['steps_per_epoch'] = spe
    return w, epochs, epochs * spe


def write_data(path, w):
    """Random inputs and labels for one pass (``steps_per_epoch * batch`` samples) as an .npz."""
    rng = np.random.default_rng(SEED)
    n = w['steps_per_epoch'] * w['batch']
    x = rng.standard_normal((n, *w['shape']), dtype=np.float32)
    y = rng.integers(0, w['classes'], size=n, dtype=np.int64)
    np.savez(path, x=x, y=y)
    return path
