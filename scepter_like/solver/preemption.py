"""Graceful stop on a cluster's signals: SIGTERM, SIGUSR1 and a first SIGINT.

``tools/run_train.py`` installs the handlers before set-up (``with solver.stop_signals:``);
``solve()`` enters ``training_loop()`` (installing them too when called directly).

- Before training begins (set-up: process group, data, model, resume; then the start of
  ``solve()``) nothing has been trained that a checkpoint could keep: the handler raises
  ``errors.Preempted`` at once, without a checkpoint (``latest`` stays as it was).
- From then on the handler only records the signal.  The training loop asks ``agreed()``
  at each optimizer-step boundary; under DDP that is a MAX all-reduce of the signal number
  started at one boundary and read at the next, so it overlaps a whole step, costs no
  wait, and every rank gets the same answer at the same step (a signal that arrives during
  step N stops every rank after step N + 1; in one process after step N).  It runs on a
  process group of its own (gloo, on the CPU), so it never queues behind the gradients'
  all-reduces, and under nccl it never makes the host wait for the device.  The solver
  then writes a checkpoint, marks it ``latest`` and raises ``errors.Preempted``.
- A second SIGINT stops at once (KeyboardInterrupt).

The tools exit with ``128 + signal number`` (143 for SIGTERM, 138 for SIGUSR1, 130 for
SIGINT), the shell's convention for a signalled process.
"""

import contextlib
import signal
import threading

import torch

from scepter_like.errors import Preempted
from scepter_like.utils.distributed import is_dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class StopSignals:
    """The stop signals' handlers while entered (main thread only; elsewhere nothing is installed).

    Re-entrant: a nested ``with`` keeps the outer handlers, and the outermost exit restores
    the ones from before.
    """

    def __init__(self):
        self.received = 0  # the first stop signal's number; 0: none
        self.training = False  # set for good by training_loop(): signals wait for a step boundary
        self._depth = 0
        self._previous = {}
        self._pending = None  # (work, tensor) of the all-reduce started at the last boundary
        self._group = None  # the CPU process group the agreement runs on (made in training_loop)

    def __enter__(self):
        self._depth += 1
        if self._depth == 1 and threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._depth -= 1
        pending, self._pending = self._pending, None
        if pending is not None and exc_type is None:  # every rank started it; after an error a peer may be gone
            pending[0].wait()
        if self._depth == 0:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
            self._previous = {}
        return False

    def reinstall(self):
        """While entered, put the handlers back over any installed since (Lightning's Trainer installs its own
        at each fit / validate / test and restores these when it ends): one behaviour, this module's."""
        if self._depth and threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._handle)

    @contextlib.contextmanager
    def training_loop(self):
        """Entered around the training loop: from here on a signal is acted on at a step boundary."""
        with self:
            self.training = True
            if is_dist() and self._group is None:  # every rank enters the loop: the group is made together
                import torch.distributed as dist

                self._group = dist.new_group(backend='gloo')
            yield self

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.received:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        if not self.received:
            self.received = signum
        if not self.training:  # set-up: nothing to save, so no reason to wait
            raise Preempted(signum)

    def agreed(self):
        """The signal every rank acts on at this boundary (0: go on); a collective under DDP."""
        if self._group is None:
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
        flag = torch.tensor([self.received], dtype=torch.int64)
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True), flag)
        return 0
