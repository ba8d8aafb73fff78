"""Graceful stop on a cluster's signals: SIGTERM, SIGUSR1 and a first SIGINT.

A handler only records the signal.  The training loop asks ``StopSignals.agreed()`` at
each optimizer-step boundary; under DDP that is a MAX all-reduce of the signal number
started at one boundary and read at the next, so it overlaps a whole step, costs no
wait, and every rank gets the same answer at the same step (a signal that reached one
rank stops them all one step later).  The solver then writes a checkpoint, marks it
``latest`` and raises ``errors.Preempted``; the tools exit with ``128 + signal number`` (143 for
SIGTERM, 138 for SIGUSR1, 130 for SIGINT), the shell's convention for a signalled
process.  A second SIGINT stops at once (KeyboardInterrupt).
"""

import signal
import threading

import torch

from scepter_like.utils.distributed import is_dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class StopSignals:
    """Records the stop signals while installed (main thread only; elsewhere it records nothing)."""

    def __init__(self):
        self.received = 0  # the first stop signal's number; 0: none
        self._previous = {}
        self._pending = None  # (work, tensor) of the all-reduce started at the last boundary

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type, exc, tb):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        pending, self._pending = self._pending, None
        if pending is not None and exc_type is None:  # every rank started it; after an error a peer may be gone
            pending[0].wait()
        return False

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.received:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        if not self.received:
            self.received = signum

    def agreed(self, device):
        """The signal every rank acts on at this boundary (0: go on); a collective under DDP on ``device``."""
        if not is_dist():
            return self.received
        import torch.distributed as dist

        decided = 0
        if self._pending is not None:
            work, flag = self._pending
            work.wait()
            decided = int(flag.item())
        if decided:  # the stop: no further boundary to decide
            self._pending = None
            return decided
        flag = torch.tensor([self.received], dtype=torch.int64, device=device)
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True), flag)
        return 0
