"""One training run at a time in a WORK_DIR: rank 0 holds an exclusive lock on ``WORK_DIR/.run.lock``.

Two jobs in one WORK_DIR (a duplicate submission, a requeue while the old job's workers
still run) would interleave their log lines, metrics.jsonl lines and checkpoints, and both
exit 0.  A solver whose config trains takes the lock in ``set_up_pre``, before it writes
anything there, and gives it back when ``solve`` ends (or at ``close``).  The lock is
``flock``'s: the kernel drops it when its process ends, however it ends, so none is left
stale.  The file holds the holder's host and pid, for the error line.  Evaluation,
inference and export from a folder that is training take no lock.
"""

import fcntl
import os
import socket

from scepter_like.errors import ConfigError
from scepter_like.utils.distributed import broadcast_object

LOCK_FILE = '.run.lock'

# the lock files this process holds -> their descriptors: flock is per open file, so a second solver of this
# process (a notebook's next session, a search's next trial) would otherwise be refused by its own process's lock
_HELD = {}


class WorkDirLock:
    """The lock on ``work_dir``, taken by ``acquire`` (rank 0), given back by ``release`` (or the process's end)."""

    def __init__(self, work_dir):
        self.path = os.path.join(work_dir, LOCK_FILE)
        self._key = None  # set while this solver holds the lock

    def acquire(self):
        """Take the lock; None, or (another process holds it) what its file says of that run.  This process's
        own lock and a filesystem without ``flock`` count as taken."""
        key = os.path.realpath(self.path)
        if key in _HELD:
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # (a folder in its place is check_work_dir's error)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors='replace').strip() or 'another process'
            os.close(fd)
            return holder
        except OSError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f'pid {os.getpid()} on {socket.gethostname()}\n'.encode())
        _HELD[key], self._key = fd, key
        return None

    def release(self):
        if self._key is not None:
            os.close(_HELD.pop(self._key))
            self._key = None


def lock_for_training(solver):
    """Rank 0 takes ``solver.run_lock``; on every rank a ConfigError when another run holds it (a collective)."""
    holder = broadcast_object(solver.run_lock.acquire() if solver.is_main else None)
    if holder is not None:
        raise ConfigError(
            f'{solver.cfg.path_of("WORK_DIR")}: another run is training in {solver.work_dir} ({holder}); wait for it'
            ' to end, or give a new SOLVER.WORK_DIR'
        )
