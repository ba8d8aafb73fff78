"""Seeding and capture / restore of every RNG a training step can touch."""

import random

import numpy as np
import torch

_RUN = {}  # the seed of this process's run, for what is built away from the solver (``run_seed``)


def seed_everything(seed):
    _RUN['seed'] = seed
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def run_seed():
    """The run's seed (ENV.SEED, the same on every rank; the solver reseeds each rank's torch stream after set-up),
    or torch's initial seed where nothing seeded a run."""
    return _RUN.get('seed', torch.initial_seed())


def get_rng_state():
    """RNG states as tensors and plain values, loadable with ``weights_only=True``."""
    np_state = np.random.get_state()
    state = {
        'python': random.getstate(),
        'numpy': {
            'kind': np_state[0],
            'keys': torch.from_numpy(np_state[1].astype(np.int64)),
            'pos': int(np_state[2]),
            'has_gauss': int(np_state[3]),
            'cached_gaussian': float(np_state[4]),
        },
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state):
    py = state['python']
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state['numpy']
    np.random.set_state(
        (n['kind'], n['keys'].numpy().astype(np.uint32), n['pos'], n['has_gauss'], n['cached_gaussian'])
    )
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])
