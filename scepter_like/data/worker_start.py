"""What each DataLoader worker runs first: its seeds, and its answer to the stop signals.

SLURM, ``timeout`` and ``kill -- -PGID`` signal every process of a job step, the loader workers
included.  A worker that died of it ended the run with torch's "DataLoader worker is killed"
error, raised wherever the main process was, before it reached the step boundary where it stops
and checkpoints.  So a worker ignores the stop signals while its parent runs: the parent acts on
them and, when it is done, stops its workers.

Except at the parent's exit: multiprocessing ends the daemonic children still alive then with
SIGTERM and waits for them, so a worker that ignored it would hang the exit.  The parent raises a
flag in shared memory first (an ``atexit`` function registered after multiprocessing's own, so it
runs before it), and a worker that sees the flag exits as torch's own workers do on their
parent's SIGTERM.  A parent that dies without exiting is noticed by torch's watchdog in the worker.
"""

import atexit
import ctypes
import functools
import os
import random
import signal
import weakref

import numpy as np
import torch

from scepter_like.utils.launch_env import STOP_SIGNALS


class WorkerStart:
    """The ``worker_init_fn`` of the solver's loaders; ``context``: the loader's multiprocessing context."""

    def __init__(self, context):
        self._parent_exiting = context.RawValue(ctypes.c_bool, False)  # lock-free: read in a signal handler
        raise_flag = functools.partial(setattr, self._parent_exiting, 'value', True)
        atexit.register(raise_flag)
        weakref.finalize(self, atexit.unregister, raise_flag).atexit = False  # loader and iterators gone

    def __call__(self, worker_id):
        """Seed numpy and random from the seed torch gave this worker (deterministic per epoch)."""
        seed = torch.initial_seed() % (2**32)
        np.random.seed(seed)
        random.seed(seed)
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_stop_signal)

    def _on_stop_signal(self, signum, frame):
        if self._parent_exiting.value:
            os._exit(0)
