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

Under the ``spawn`` and ``forkserver`` start methods (macOS' and Windows' default) a worker is a
fresh interpreter that unpickles the dataset, its transforms and the collate function before it
runs anything of ours (``worker_init_fn`` comes after).  A class of an IMPORTS ``.py`` file
pickles as ``_scepter_user_<stem>.Class``, a module only the loader's process has, so every
worker died of ModuleNotFoundError.  ``worker_context`` gives the loader a context whose worker
process carries those files ahead of torch's arguments: unpickling it imports them, under the
same names, before the dataset is unpickled.
"""

import multiprocessing
import multiprocessing.context as mp_context
import os
import random
import signal
import threading

import numpy as np
import torch

from scepter_like.utils.imports import import_user_modules, imported_files
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


def worker_context(num_workers):
    """The ``multiprocessing_context`` of a loader with ``num_workers``: None (torch's) where workers fork or no
    IMPORTS file was imported by path, else one whose workers import those files first."""
    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if num_workers == 0 or method not in _CONTEXTS or not imported_files():
        return None
    return _CONTEXTS[method]


class _UserFiles:
    """Pickles as the call that imports this process's IMPORTS files (taken when the worker starts)."""

    def __reduce__(self):
        return import_user_modules, (imported_files(),)


class _UserFilesFirst:
    def __init__(self, *args, **kwargs):
        self._user_files = _UserFiles()  # the first attribute: unpickled before torch's arguments
        super().__init__(*args, **kwargs)


class _SpawnProcess(_UserFilesFirst, mp_context.SpawnProcess):
    pass


class _SpawnContext(mp_context.SpawnContext):
    Process = _SpawnProcess


_CONTEXTS = {'spawn': _SpawnContext()}
if hasattr(mp_context, 'ForkServerProcess'):  # not on Windows

    class _ForkServerProcess(_UserFilesFirst, mp_context.ForkServerProcess):
        pass

    class _ForkServerContext(mp_context.ForkServerContext):
        Process = _ForkServerProcess

    _CONTEXTS['forkserver'] = _ForkServerContext()
