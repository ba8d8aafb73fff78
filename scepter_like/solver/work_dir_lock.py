"""One training run at a time in a WORK_DIR: rank 0 holds an exclusive lock on ``WORK_DIR/.run.lock`` during ``solve``.

Two jobs in one WORK_DIR (a duplicate submission, a requeue while the old job's workers
still run) would interleave their metrics.jsonl lines, log lines and checkpoints, and both
exit 0.  The lock is ``flock``'s: the kernel drops it when its process ends, however it
ends, so no stale lock is left behind.  The file holds the holder's host and pid, for the
error line.  Evaluation, inference and export from a folder that is training take no lock.
"""

import fcntl
import os
import socket

from scepter_like.errors import ConfigError
from scepter_like.utils.distributed import broadcast_object

LOCK_FILE = '.run.lock'


class WorkDirLock:
    """The lock on ``work_dir``, taken by ``acquire`` (rank 0), given back by ``release`` (or the process's end)."""

    def __init__(self, work_dir):
        self.work_dir = work_dir
        self._fd = None

    def acquire(self):
        """Take the lock; None, or (when another run holds it) what its file says of that run."""
        if self._fd is not None:
            return None
        fd = os.open(os.path.join(self.work_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors='replace').strip() or 'another process'
            os.close(fd)
            return None if holder == _this_process() else holder  # an earlier solver of this process holds it
        except OSError:  # a filesystem without flock: no lock, as before
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f'{_this_process()}\n'.encode())
        self._fd = fd
        return None

    def release(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _this_process():
    return f'pid {os.getpid()} on {socket.gethostname()}'


def lock_for_training(solver):
    """Rank 0 takes ``solver.run_lock``; on every rank a ConfigError when another run holds it (a collective)."""
    holder = broadcast_object(solver.run_lock.acquire() if solver.is_main else None)
    if holder is not None:
        raise ConfigError(
            f'{solver.cfg.path_of("WORK_DIR")}: another run is training in {solver.work_dir} ({holder}); wait for it'
            ' to end, or give a new SOLVER.WORK_DIR'
        )
