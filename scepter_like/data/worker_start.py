"""What each DataLoader worker runs first: its seeds, and its answer to the stop signals.

SLURM, ``timeout`` and ``kill -- -PGID`` signal every process of a job step, the loader workers
included.  A worker that died of it ended the run with torch's "DataLoader worker is killed"
error, raised wherever the main process was, before it reached the step boundary where it stops
and checkpoints.  So a worker lets the stop signals pass it by: the main process acts on them.

Except the SIGTERM its own parent sends: torch's shutdown of its workers and multiprocessing's
at the parent's exit both end with it, and torch's workers exit on it quietly.  Only the
sender tells the two apart, and a Python signal handler is not told the sender, so a thread of
the worker takes the signals with ``sigwaitinfo`` (they are blocked in every thread, the ones
started later inherit that) and exits on the parent's SIGTERM.  Where ``sigwaitinfo`` is
missing (macOS) the worker keeps torch's handling.  A parent that dies without a word is noticed
by torch's watchdog in the worker.
"""

import multiprocessing
import os
import random
import signal
import threading

import numpy as np
import torch

from scepter_like.utils.launch_env import STOP_SIGNALS


def start_worker(worker_id):
    """The solver's loaders' ``worker_init_fn``: seed numpy and random from the seed torch gave this worker
    (deterministic per epoch), and let the stop signals pass it by."""
    seed = torch.initial_seed() % (2**32)
    np.random.seed(seed)
    random.seed(seed)
    if hasattr(signal, 'sigwaitinfo'):
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        parent = multiprocessing.parent_process().pid  # the loader's process (os.getppid() is forkserver's there)
        threading.Thread(target=_take_stop_signals, args=(parent,), name='stop-signals', daemon=True).start()


def _take_stop_signals(parent):
    while True:
        info = signal.sigwaitinfo(STOP_SIGNALS)
        if info.si_signo == signal.SIGTERM and info.si_pid == parent:
            os._exit(0)
