"""The optimizer and LR scheduler of each optimisation phase, and closure optimizers.

A run starts in phase 0 (``SOLVER.OPTIMIZER`` / ``LR_SCHEDULER``); ``SOLVER.OPTIMIZER_PHASES``
lists later phases, each starting at a train step (``AT_STEP``: that many steps done) or at
the start of an epoch (``AT_EPOCH``, 0-based), with its own optimizer over the same
parameters and its own scheduler (none when it names none) -- the Adam then L-BFGS recipe
of physics-informed training::

    OPTIMIZER: {NAME: Adam, LEARNING_RATE: 0.001}
    OPTIMIZER_PHASES:
      - AT_STEP: 2000
        OPTIMIZER: {NAME: LBFGS, LEARNING_RATE: 1.0, MAX_ITER: 1, MAX_EVAL: 25, LINE_SEARCH_FN: strong_wolfe}

The checkpoint records the phase (``TrainingProgress.phase``) and holds the optimizer of
that phase, so a resume in either phase, or right at the switch, continues exactly.

A closure optimizer (one whose ``step`` requires a closure, as L-BFGS's does) is stepped by
BackwardHook with a closure that re-evaluates the current batch's loss; it cannot
accumulate gradients over micro-batches nor take a GradScaler, so both are config errors.
"""

import inspect
import logging
import math

import torch

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.opt.lr_schedulers.registry import build_lr_scheduler
from scepter_like.opt.optimizers.registry import build_optimizer
from scepter_like.registry import resolve_params

PHASE_PARA_DICT = {
    'AT_STEP': {'value': 0, 'description': 'the phase starts once this many train steps are done', 'min': 0},
    'AT_EPOCH': {'value': 0, 'description': 'or: the phase starts with this epoch (0-based)', 'min': 0},
    'OPTIMIZER': {'value': None, 'description': "the phase's OPTIMIZERS config", 'required': True},
    'LR_SCHEDULER': {'value': None, 'description': "the phase's LR_SCHEDULERS config (none: a constant LR)"},
}


def takes_closure(optimizer):
    """Whether ``optimizer.step`` requires a closure (L-BFGS) rather than merely accepting one."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get('closure')
    except (TypeError, ValueError):
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


class OptimizerPhases:
    """The phases of a SOLVER config: which one is due, and building each one's optimizer and scheduler."""

    def __init__(self, solver_cfg):
        self.cfg = solver_cfg
        self.optimizers = [solver_cfg.OPTIMIZER]
        self.schedulers = [solver_cfg.LR_SCHEDULER]
        self.starts = [('step', 0)]  # (kind, value) per phase
        entries = solver_cfg.OPTIMIZER_PHASES or []
        if entries and solver_cfg.OPTIMIZER is None:
            raise ConfigError(f'{solver_cfg.path_of("OPTIMIZER_PHASES")}: later phases need a first SOLVER.OPTIMIZER')
        if not isinstance(entries, list):
            raise ConfigError(f'{solver_cfg.path_of("OPTIMIZER_PHASES")}: expected a list of phases')
        for i, phase in enumerate(entries):
            if not isinstance(phase, Config):
                raise ConfigError(
                    f'{solver_cfg.path_of("OPTIMIZER_PHASES")}[{i}]: expected a mapping with AT_STEP or AT_EPOCH'
                    ' and OPTIMIZER'
                )
            resolve_params(phase, PHASE_PARA_DICT, 'an optimizer phase')  # defaults land in the run's config
            if (phase.AT_STEP > 0) == (phase.AT_EPOCH > 0):
                raise ConfigError(f'{phase.path}: give exactly one of AT_STEP and AT_EPOCH (a positive number)')
            self.starts.append(('step', phase.AT_STEP) if phase.AT_STEP else ('epoch', phase.AT_EPOCH))
            self.optimizers.append(phase.OPTIMIZER)
            self.schedulers.append(phase.LR_SCHEDULER)
        self.next_step = math.inf  # the train step at which the next step-started phase is due

    def __len__(self):
        return len(self.optimizers)

    def build(self, index, params, logger=None):
        """(optimizer, LR scheduler or None) of phase ``index`` over ``params``."""
        optimizer = build_optimizer(self.optimizers[index], params, logger)
        scheduler_cfg = self.schedulers[index]
        scheduler = build_lr_scheduler(scheduler_cfg, optimizer, logger) if scheduler_cfg is not None else None
        return optimizer, scheduler

    def start_step(self, index, epoch_steps):
        """The train step phase ``index`` starts at, given ``epoch_steps`` train steps per epoch."""
        kind, value = self.starts[index]
        return value if kind == 'step' else value * epoch_steps

    def check(self, progress, autocast_dtype, params, logger=None):
        """Every phase builds and starts after the one before (one past the run's end is a warning); closure
        optimizers fit the loop.

        Builds each phase's optimizer and scheduler once and drops them, so a bad later phase
        fails before training, not thousands of steps in.
        """
        epoch_steps = progress.epoch_iters['train']
        last_step = progress.max_epochs * epoch_steps
        if progress.max_steps > 0:
            last_step = min(last_step, progress.max_steps)
        previous = 0
        for index in range(len(self)):
            optimizer, _ = self.build(index, params, logger)
            if takes_closure(optimizer):
                self._check_closure(index, progress.accumulate_steps, autocast_dtype)
            if index == 0:
                continue
            start = self.start_step(index, epoch_steps)
            key = 'AT_STEP' if self.starts[index][0] == 'step' else 'AT_EPOCH'
            where = self.cfg.OPTIMIZER_PHASES[index - 1].path_of(key)
            if start >= last_step:  # a short run (a smoke test with MAX_STEPS=2) is fine
                (logger or logging.getLogger(__name__)).warning(
                    f'{where}: phase {index} would start at step {start}, but the run ends at step {last_step}'
                    ' (SOLVER.MAX_EPOCHS / MAX_STEPS), so it does not run'
                )
            if start <= previous:
                raise ConfigError(f'{where}: phases must start in order, each after the one before')
            previous = start

    def _check_closure(self, index, accumulate_steps, autocast_dtype):
        where, name = self.optimizers[index].path, self.optimizers[index].NAME
        if accumulate_steps > 1:
            raise ConfigError(
                f'{where}: {name} re-evaluates the loss in its step and cannot accumulate'
                f' gradients over micro-batches; set SOLVER.ACCU_STEP (BackwardHook.ACCUMULATE_STEP) to 1'
            )
        if autocast_dtype is torch.float16:
            raise ConfigError(
                f'{where}: {name} cannot step through a GradScaler (fp16); use BackwardHook AMP_DTYPE: bf16 or no AMP'
            )

    def enter_due(self, solver):
        """At a step boundary: switch ``solver`` to the phase due now, if it is not the current one."""
        due = self.due(solver.progress)
        if due != solver.progress.phase:
            solver.use_optimizer_phase(due)
            scheduler = solver.lr_scheduler
            solver.logger.info(
                f'optimizer phase {due} of {len(self) - 1} from step {solver.progress.total_iter}:'
                f' {self.optimizers[due].NAME}' + (f' with {type(scheduler).__name__}' if scheduler is not None else '')
            )

    def due(self, progress):
        """The phase the run should be in at ``progress`` (the last one whose start it has reached)."""
        index = progress.phase
        while index + 1 < len(self):
            kind, value = self.starts[index + 1]
            reached = progress.total_iter >= value if kind == 'step' else progress.epoch >= value
            if not reached:
                break
            index += 1
        # the loop looks for step-started phases only; an epoch-started one begins with its epoch
        upcoming = self.starts[index + 1] if index + 1 < len(self) else ('epoch', 0)
        self.next_step = upcoming[1] if upcoming[0] == 'step' else math.inf
        return index
