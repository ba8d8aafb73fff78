"""Graceful stop on a cluster's signals: SIGTERM, SIGUSR1 and a first SIGINT.

``tools/run_train.py`` installs the handlers before set-up (``with solver.stop_signals:``);
``solve()`` enters ``training_loop()`` (installing them too when called directly).

- Before training begins (set-up: process group, data, model, resume; then the start of
  ``solve()``) nothing has been trained that a checkpoint could keep: the handler raises
  ``errors.Preempted`` at once, without a checkpoint (``latest`` stays as it was).
- From then on the handler only records the signal.  The training loop asks ``agreed()``
  at each optimizer-step boundary.  In one process the answer is the signal itself: the
  run stops after the step it arrived in.  Under DDP every rank must stop at the same
  boundary, so the ranks agree by a MAX all-reduce of ``[signal, proposed interval]``,
  started at one agreement boundary and read at the next, so it overlaps the steps between
  and costs no wait.  It runs on a process group of its own (gloo, on the CPU), so it never
  queues behind the gradients' all-reduces and under nccl never makes the host wait for the
  device.  Agreement boundaries are ``ENV.STOP_CHECK_SECONDS`` apart (each rank proposes
  the step count that covers that time at its measured step time; the MAX is the next
  interval, the same on every rank): a collective on every step of a millisecond-step
  model cost 10-15 % of DDP throughput.  A signal therefore stops every rank within about
  two intervals plus two steps; ``STOP_CHECK_SECONDS: 0`` agrees at every boundary (a
  signal during step N stops every rank after step N + 1).  The solver then writes a
  checkpoint, marks it ``latest`` and raises ``errors.Preempted``.
- A second SIGINT stops at once (KeyboardInterrupt).

A hook's ``solver.request_stop(reason)`` is agreed the same way under DDP, since a rank that
left the loop alone would leave the others waiting in the gradients' all-reduce: a request
during the train steps travels in the agreement's flags (the requesting rank, in a third
element) and every rank stops at the same agreement boundary, within about two intervals plus
two steps; a request outside the steps (an ``after_epoch`` hook, evaluation) is agreed by one
all-reduce where the loop decides whether to train another epoch (``agreed_between_epochs``).
Every rank then has the reason and who asked (one broadcast from the requesting rank).  In one
process a request stops at the next step boundary, without a collective.

The tools exit with ``128 + signal number`` (143 for SIGTERM, 138 for SIGUSR1, 130 for
SIGINT), the shell's convention for a signalled process.
"""

import contextlib
import logging
import signal
import threading
import time
from typing import NamedTuple

import torch
import torch.distributed as dist

from scepter_like.errors import Preempted
from scepter_like.utils.distributed import is_dist
from scepter_like.utils.launch_env import STOP_SIGNALS


class AgreedStop(NamedTuple):
    """A stop every rank acts on: the signal (0: a hook's request), why, and who asked."""

    signal: int
    reason: str
    asker: str

    def take(self, solver):
        """Training ends at this step boundary: the solver's progress says why, and so does the log, on every rank
        (the other ranks' consoles show warnings only)."""
        solver.progress.stop_reason, solver.progress.stop_signal = self.reason, self.signal
        level = logging.INFO if solver.is_main else logging.WARNING
        solver.logger.log(level, f'training stops at the next step boundary: {self.reason} (asked by {self.asker})')


class StopSignals:
    """The stop signals' handlers while entered (main thread only; elsewhere nothing is installed).

    Re-entrant: a nested ``with`` keeps the outer handlers, and the outermost exit restores
    the ones from before.
    """

    def __init__(self):
        self.received = 0  # the first stop signal's number; 0: none
        self.requested = None  # (reason, asker) of a stop a hook requested on this rank, still to be agreed
        self.training = False  # set for good by training_loop(): signals wait for a step boundary
        self._depth = 0
        self._previous = {}
        self._pending = None  # (work, tensor) of the all-reduce started at the last boundary
        self._group = None  # the CPU process group the agreement runs on (made in training_loop)
        self._check_seconds = 0.0  # the time between agreement boundaries (ENV.STOP_CHECK_SECONDS)
        self._interval = 1  # optimizer steps between the last agreement boundary and the next
        self._steps_to_check = 1  # optimizer-step boundaries until the next agreement
        self._checked_at = 0.0  # time.monotonic() at the last agreement boundary

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
    def training_loop(self, check_seconds=0.0):
        """Entered around the training loop: from here on a signal is acted on at a step boundary
        (under DDP at agreement boundaries ``check_seconds`` apart)."""
        with self:
            self.training = True
            self._check_seconds = check_seconds
            self._checked_at = time.monotonic()
            if is_dist() and self._group is None:  # every rank enters the loop: the group is made together
                self._group = dist.new_group(backend='gloo')
            yield self
            self.requested = None  # a request after training (the final test) has no loop left to stop

    def close(self):
        """Release the agreement's process group (its gloo threads and sockets), so a process that runs one
        solver after another (a sweep, a notebook) does not gather a group per run.  Every rank calls it."""
        group, self._group = self._group, None
        if group is not None and dist.is_initialized():
            dist.destroy_process_group(group)

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.received:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        if not self.received:
            self.received = signum
        if not self.training:  # set-up: nothing to save, so no reason to wait
            raise Preempted(signum)

    def defer(self, reason, asker):
        """Keep a hook's stop request for the ranks to agree on (True) under DDP; in one process False: the
        solver stops at the next step boundary itself."""
        if not is_dist():
            return False
        self.requested = self.requested or (reason, asker)
        return True

    def agreed(self):
        """The stop every rank acts on at this optimizer-step boundary (None: go on); under DDP a collective at
        agreement boundaries, which every rank reaches at the same optimizer step."""
        if self._group is None:
            return AgreedStop(self.received, f'signal {self.received}', 'a stop signal') if self.received else None
        self._steps_to_check -= 1
        if self._steps_to_check > 0:
            return None
        interval = 1
        if self._pending is not None:
            work, flags = self._pending
            work.wait()
            signum, interval, by = flags.tolist()
            if signum or by:  # the stop: no further boundary to decide
                self._pending = None
                return self._decided(signum, by)
        flags = torch.tensor([self.received, self._proposed_interval(), self._request_flag()], dtype=torch.int64)
        self._pending = (dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._group, async_op=True), flags)
        self._interval = self._steps_to_check = interval
        return None

    def agreed_between_epochs(self):
        """A stop requested outside the train steps (or after the epoch's last agreement), agreed where the loop
        decides whether to train another epoch: one all-reduce an epoch under DDP, none in one process."""
        if self._group is None:
            return None
        if self._pending is not None:  # one collective at a time on the group (the next step boundary still reads it)
            self._pending[0].wait()
        flags = torch.tensor([self._request_flag()], dtype=torch.int64)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._group)
        return self._decided(0, flags.item()) if flags.item() else None

    def _request_flag(self):
        """This rank's part of the agreement on requests: its rank + 1 when it has one (the MAX names one asker)."""
        return dist.get_rank() + 1 if self.requested else 0

    def _decided(self, signum, by):
        """The agreed stop: a signal, else a request: this rank's own, or rank ``by - 1``'s, its reason sent to
        every rank (EarlyStoppingHook asks on every rank: each then logs its own request, as in one process)."""
        if signum:
            return AgreedStop(signum, f'signal {signum}', 'a stop signal')
        asked = [self.requested]
        dist.broadcast_object_list(asked, src=by - 1, group=self._group)
        own, self.requested = self.requested, None
        if own is not None:
            return AgreedStop(0, *own)
        reason, asker = asked[0]
        return AgreedStop(0, reason, f'{asker} on rank {by - 1}')

    def _proposed_interval(self):
        """The optimizer steps that take ``check_seconds`` at the step time measured since the last boundary."""
        now = time.monotonic()
        step_seconds = max(now - self._checked_at, 1e-9) / self._interval
        self._checked_at = now
        return max(1, int(self._check_seconds / step_seconds))
