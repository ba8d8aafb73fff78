"""The loop's state: where training stands (``TrainingProgress``) and what one step decides (``StepState``).

One home per fact.  The solver owns both objects and exposes scepter's names
(``solver.epoch``, ``solver.iter``, ``solver.total_iter``, ``solver.loss``, ...) as views
of them; hooks read them and change them only through named solver methods, so a hook's
PRIORITY orders its work, never what it sees.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from scepter_like.errors import ConfigError

MODES = ('train', 'eval', 'test')


class TrainingProgress:
    """Counters of the run and the questions asked of them, answered once here.

    ``epoch`` is 0-based and current; ``iters[mode]`` counts the steps done in this
    mode's epoch; ``total_iter`` and ``optimizer_steps`` count train steps and optimizer
    steps done (a step's own count is in by the time its ``after_iter`` hooks run).
    """

    def __init__(self, max_epochs: int, max_steps: int = 0, num_folds: int = 1, eval_interval: int = 1):
        if max_epochs == 0 or (max_epochs == -1 and max_steps <= 0):
            raise ConfigError(
                f'SOLVER.MAX_EPOCHS: {max_epochs} would never end training; give a number of epochs, or -1 (as many'
                ' as MAX_STEPS needs) with MAX_STEPS'
            )
        self.max_epochs = max_epochs  # -1 until plan_folds knows an epoch's length
        self.max_steps = max_steps  # 0: no limit
        self.num_folds = num_folds
        self.eval_interval = eval_interval
        self.epoch = 0
        self.iters = dict.fromkeys(MODES, 0)
        self.epoch_iters = dict.fromkeys(MODES, 0)  # batches in this mode's epoch (a fold of a train pass)
        self.train_stop = 0  # the train iteration this epoch stops at: its end, or earlier by MAX_STEPS
        self.train_start = 0  # the train iteration this epoch (re)started at: 0, or where a resume placed it
        self.total_iter = 0
        self.optimizer_steps = 0
        self.epoch_finished = False  # the current train epoch ran to its end
        self.last_eval_epoch = -1  # the epoch whose evaluation epoch_outputs['eval'] holds
        self.stop_reason: str | None = None  # set by request_stop: training ends at the next step boundary
        self.stop_signal = 0  # the signal every rank agreed to stop on (preemption.StopSignals)
        self.phase = 0  # the optimizer phase in use (SOLVER.OPTIMIZER_PHASES; the updater sets it)
        self.in_run_train = False  # inside a subclass's run_train (scepter_protocol.ends_at_stop)

    # -- the data of an epoch ---------------------------------------------------------------
    @property
    def pass_index(self) -> int:
        """Which pass over the train data the current epoch belongs to (NUM_FOLDS epochs a pass)."""
        return self.epoch // self.num_folds

    def fold_window(self, pass_batches: int) -> tuple[int, int]:
        """Batches ``[start, stop)`` of a pass of ``pass_batches`` that the current epoch covers."""
        fold = self.epoch % self.num_folds
        return fold * pass_batches // self.num_folds, (fold + 1) * pass_batches // self.num_folds

    def plan_folds(self, pass_batches: int, where: str = 'NUM_FOLDS', world_size: int = 1) -> None:
        """The current epoch's share of a train pass of ``pass_batches``; a ConfigError when a fold would be empty.

        Folds apply only with several processes, as in scepter (its BaseSolver reads NUM_FOLDS when world_size > 1):
        one process trains whole passes.
        """
        if world_size == 1:
            self.num_folds = 1
        if pass_batches < self.num_folds:
            raise ConfigError(
                f'{where}: {self.num_folds} folds of a pass of {pass_batches} batches would leave epochs'
                ' without a batch; use fewer folds'
            )
        start, stop = self.fold_window(pass_batches)
        self.epoch_iters['train'] = stop - start
        if self.max_epochs == -1:  # no epoch limit (scepter's and Lightning's -1): the epochs MAX_STEPS needs
            self.max_epochs = math.ceil(self.max_steps / (pass_batches // self.num_folds))

    def start_train_epoch(self, pass_batches: int) -> tuple[int, int]:
        """Plan this train epoch; returns the pass's batch range ``[first, stop)`` still to run."""
        start, stop = self.fold_window(pass_batches)
        self.epoch_iters['train'] = stop - start
        self.train_stop = self.epoch_iters['train']
        if self.max_steps > 0:
            self.train_stop = min(self.train_stop, self.iters['train'] + self.max_steps - self.total_iter)
        self.train_stop = max(self.train_stop, self.iters['train'])
        self.train_start = self.iters['train']
        return start + self.iters['train'], start + self.train_stop

    def log_interval_ends(self, interval: int) -> bool:
        """Whether the train step just done ends a LOG_INTERVAL: counted within the epoch when the epoch has at
        least that many steps, across epochs otherwise (full-batch training: one step an epoch).  LogHook's lines
        and TensorboardLogHook's points both end here, so the same interval gives them the same steps."""
        long_epoch = self.epoch_iters['train'] >= interval
        return interval > 0 and (self.iters['train'] if long_epoch else self.total_iter) % interval == 0

    @property
    def last_step(self) -> int:
        """The train step the run ends at as planned: MAX_EPOCHS epochs of this length, or MAX_STEPS if sooner."""
        last = self.max_epochs * self.epoch_iters['train']
        return min(last, self.max_steps) if self.max_steps > 0 else last

    def steps_left(self) -> int:
        """Train steps left in the run, from the current step on (for ETAs)."""
        left = self.epoch_iters['train'] - self.iters['train']
        left += (self.max_epochs - self.epoch - 1) * self.epoch_iters['train']
        if self.max_steps > 0:
            left = min(left, self.max_steps - self.total_iter)
        return max(left, 0)

    def count_step(self, mode: str, optimizer_step: bool) -> None:
        """A step of ``mode`` is done: a train step also counts in ``total_iter`` and, when it stepped the
        optimizer, in ``optimizer_steps``."""
        self.iters[mode] += 1
        if mode == 'train':
            self.total_iter += 1
            self.optimizer_steps += optimizer_step

    # -- gradient accumulation --------------------------------------------------------------
    def accumulation_group(self, n: int) -> tuple[int, bool]:
        """``(size, closes)`` of the group of ``n`` micro-batches the next train step belongs to.

        Groups count from the epoch's start; the last group of an epoch (or before
        MAX_STEPS) may be shorter and is averaged over its own length, and so is the rest of
        a group a resume lands in (on another number of processes, the checkpoint's group end
        maps inside one).
        """
        if n == 1:  # no accumulation: every step closes its own group
            return 1, True
        it = self.iters['train']
        group_start = max(it - it % n, self.train_start)
        size = max(min(n - group_start % n, self.train_stop - group_start), 1)  # (an own loop may run past the plan)
        return size, it + 1 >= group_start + size

    def group_max_steps_cuts(self, n: int) -> tuple[int, int, int] | None:
        """``(epoch, first, last)`` (1-based, iterations counted from the epoch's start) of the accumulation group of
        ``n`` that MAX_STEPS stops inside, in a run from the start; None when the stop ends a group or an epoch (or
        MAX_EPOCHS ends training first).  The stop steps the optimizer on the part of the group done, which a run
        that goes on past it does not: a resume from there does not continue that run exactly."""
        per_epoch = self.epoch_iters['train']
        if n == 1 or self.max_steps <= 0 or per_epoch <= 0 or self.max_steps >= self.max_epochs * per_epoch:
            return None
        epoch, at = divmod(self.max_steps, per_epoch)
        if at % n == 0:  # (at 0: the end of an epoch, whose last group may be short)
            return None
        first = at - at % n + 1
        return epoch + 1, first, min(first + n - 1, per_epoch)

    # -- the end of things ------------------------------------------------------------------
    def train_finished(self) -> bool:
        return (
            self.stop_reason is not None
            or self.epoch >= self.max_epochs
            or (self.max_steps > 0 and self.total_iter >= self.max_steps)
        )

    @property
    def epoch_cut(self) -> bool:
        """The current train epoch stopped short of its end (MAX_STEPS, a stop): an evaluation now is of its weights
        at iteration ``iters['train']``, not the epoch's evaluation, which a resumed run does when the epoch ends."""
        return 0 < self.iters['train'] < self.epoch_iters['train'] and not self.epoch_finished

    def record_eval(self) -> None:
        """An evaluation is done: it is the current epoch's, unless the epoch was cut short (``epoch_cut``)."""
        if not self.epoch_cut:
            self.last_eval_epoch = self.epoch

    def eval_due(self) -> bool:
        """Whether the evaluation after the current epoch is still to run (given eval data)."""
        if self.last_eval_epoch == self.epoch:
            return False
        return (self.epoch + 1) % self.eval_interval == 0 or self.epoch + 1 >= self.max_epochs or self.train_finished()

    def finish_train_epoch(self) -> None:
        self.epoch_finished = self.iters['train'] >= self.epoch_iters['train']

    def next_epoch(self) -> None:
        self.epoch += 1
        self.iters['train'] = 0
        self.epoch_finished = False

    def epochs_completed(self) -> int:
        """Train epochs completed (the current one counts once it ran to its end)."""
        return self.epoch + 1 if self.epoch_finished else self.epoch

    # -- checkpoint -------------------------------------------------------------------------
    def state_dict(self, eval_pending: bool) -> dict[str, Any]:
        """The position of the next train batch; ``eval_pending``: the finished epoch's evaluation is due."""
        finished = self.epoch_finished
        return {
            'epoch': self.epochs_completed(),
            'iter': 0 if finished else self.iters['train'],
            'total_iter': self.total_iter,
            'optimizer_steps': self.optimizer_steps,
            'eval_pending': finished and eval_pending,
            'last_eval_epoch': self.last_eval_epoch,
            'phase': self.phase,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = state['epoch']
        self.iters['train'] = state['iter']
        self.total_iter = state['total_iter']
        self.optimizer_steps = state['optimizer_steps']
        self.last_eval_epoch = state.get('last_eval_epoch', -1)
        self.phase = state.get('phase', 0)
        self.epoch_finished = False
        if state['eval_pending']:
            # the evaluation after the last finished epoch was cut off: solve() runs it first
            self.epoch -= 1
            self.epoch_finished = True


class StepState:
    """What one train step produces and decides; ``begin`` resets it before each step.

    ``index``: the step's 0-based number among all train steps; ``batch``: its batch (a
    closure optimizer evaluates it again); ``sync_grads``: this step's backward all-reduces
    the gradients (the last micro-batch of an accumulation group); ``group_size``:
    micro-batches averaged into the optimizer step; ``steps_optimizer``: the optimizer steps
    after this step's backward; ``loss``: the training loss the step left for the updater;
    ``terms``: the ``loss_*`` terms it was aggregated from (PCGrad differentiates each);
    ``outputs``: the step's outputs, detached; ``data_time``: seconds spent waiting for
    the batch.  ``running``: a step is between ``begin``
    and ``end``; ``counted``: its counts are in (``TrainingProgress``), i.e. its
    ``after_iter`` hooks are running.  scepter's counter views (``solver.iter``,
    ``solver.total_iter``, ``solver.epoch``) read these two.
    """

    __slots__ = (
        'index',
        'batch',
        'loss',
        'terms',
        'outputs',
        'sync_grads',
        'group_size',
        'steps_optimizer',
        'probe_wanted',
        'probes',
        'data_time',
        'running',
        'counted',
    )

    def __init__(self) -> None:
        self.index = 0
        self.batch: dict[str, Any] | None = None
        self.loss: torch.Tensor | None = None
        self.terms: dict[str, torch.Tensor] | None = None
        self.outputs: dict[str, torch.Tensor] = {}
        self.sync_grads = True
        self.group_size = 1
        self.steps_optimizer = True
        self.probe_wanted = False
        self.probes: dict[str, Any] = {}  # register_probe's in this step (the solver keeps them or drops them)
        self.data_time = 0.0
        self.running = False
        self.counted = False

    def begin(
        self,
        index: int = 0,
        batch: Any = None,
        group_size: int = 1,
        steps_optimizer: bool = True,
        data_time: float = 0.0,
    ) -> None:
        self.index = index
        self.batch = batch
        self.loss = None
        self.terms = None
        self.sync_grads = steps_optimizer
        self.group_size = group_size
        self.steps_optimizer = steps_optimizer
        self.probe_wanted = False
        self.data_time = data_time
        self.running = True
        self.counted = False

    def end(self) -> None:
        """The step's ``after_iter`` hooks are done."""
        self.running = self.counted = False

    def take_loss(self) -> torch.Tensor | None:
        """The loss, handed over once (the updater's backward consumes it)."""
        loss, self.loss = self.loss, None
        return loss

    @property
    def in_accumulation(self) -> bool:
        """An accumulation group is open: gradients of earlier micro-batches wait for the optimizer step."""
        return not self.steps_optimizer


def detached_outputs(results: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors of a step's ``results`` outside autograd, their scalars fixed at this step's values; plain
    numbers become 0-dim tensors (scepter's ``_reduce_scalar`` keeps them too), anything else is left out.

    A scalar this step's graph computed (not a view) is only detached: nothing changes it
    later.  Any other scalar (a parameter, a buffer, a view of one, a value made outside
    autograd) may change in place later, so it is copied.  Hooks can then keep a step's
    scalars without copying them (LogHook's running means).
    """
    out = {}
    for k, v in results.items():
        if isinstance(v, torch.Tensor):
            if v.requires_grad and not v.is_leaf and v._base is None:
                out[k] = v.detach()
            elif v.dim() == 0:
                out[k] = v.detach().clone()
            else:  # a tensor outside autograd (every eval / test output) is already detached
                out[k] = v.detach() if v.requires_grad else v
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = torch.tensor(float(v))
    return out
