"""LrHook: linear warmup composed with any LR_SCHEDULER, by epoch or by optimizer step.

The scheduler owns the "scheduled" learning rates; warmup multiplies them by
``r0 + (1 - r0) * progress`` with ``r0 = WARMUP_START_LR / initial lr`` of the first
group, so every parameter group keeps its ratio to the others.  Before each scheduler
step the scheduled rates are put back, so chainable schedulers never see warmed values.
The scheduler steps once per optimizer step (SET_BY_EPOCH false) or once per epoch
(true) — never per micro-batch, never twice: the epoch step happens at the next
``before_epoch`` (after that epoch's evaluation, so ReduceLROnPlateau gets its metric)
and is remembered in the hook's state across a resume.  When the run switches optimizer
(SOLVER.OPTIMIZER_PHASES), the new optimizer's learning rates are the scheduled ones from
then on, under the new phase's scheduler (constant without one); warmup, counted in epochs
or optimizer steps of the whole run, still applies while it lasts.
"""

import math
import warnings

from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    MultiStepLR,
    ReduceLROnPlateau,
    StepLR,
)

from scepter_like.errors import ConfigError
from scepter_like.registry import BUILT_FROM
from scepter_like.solver.hooks.hook import (
    PRIORITY_LR,
    Hook,
    SolverSurface,
    eval_metric,
    greater_is_better,
    unknown_eval_metric,
)
from scepter_like.solver.hooks.registry import HOOKS

# the schedulers whose length a config gives (T_MAX: 3): its key there and the scheduler's attribute
_LENGTH_KEYS = {
    CosineAnnealingLR: ('T_MAX', 'T_max'),
    CosineAnnealingWarmRestarts: ('T_0', 'T_0'),
    StepLR: ('STEP_SIZE', 'step_size'),
    MultiStepLR: ('MILESTONES', 'milestones'),  # a Counter of steps: its last one
}


@HOOKS.register_class()
class LrHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_LR, 'description': 'after BackwardHook and LogHook'},
        'WARMUP_FUNC': {
            'value': 'linear',
            'type': (str, type(None)),
            'description': "warmup shape: linear (null: no warmup, scepter's way of turning it off)",
            'choices': ['linear'],
        },
        'WARMUP_EPOCHS': {'value': 1, 'description': 'warmup length in epochs (0: no warmup)', 'min': 0},
        'WARMUP_START_LR': {'value': 0.0001, 'description': 'learning rate at the start of warmup'},
        'SET_BY_EPOCH': {'value': True, 'description': 'set the LR once per epoch (false: every optimizer step)'},
        'PLATEAU_METRIC': {'value': '', 'description': 'eval metric fed to ReduceLROnPlateau'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.warmup_epochs = cfg.WARMUP_EPOCHS if cfg.WARMUP_FUNC is not None else 0
        self.warmup_start_lr = cfg.WARMUP_START_LR
        self.by_epoch = cfg.SET_BY_EPOCH
        self.plateau_metric = cfg.PLATEAU_METRIC
        self.sched_lrs = None
        self.start_ratio = None
        self.last_epoch = 0
        self.seen_steps = 0
        self.phase = 0  # the optimizer phase sched_lrs belong to
        self._warmup_steps = None  # optimizer steps of a per-step warmup: fixed by the run's start, kept on resume
        self._switches = False  # the run has later optimizer phases (before_solve)

    def before_solve(self, solver: SolverSurface):
        self._switches = len(solver.updater.phases) > 1  # a phase may begin inside an epoch (AT_STEP)
        optimizer = solver.optimizer
        if optimizer is None:
            raise ConfigError('LrHook needs SOLVER.OPTIMIZER; add an optimizer config')
        sched = solver.lr_scheduler
        if isinstance(sched, ReduceLROnPlateau):
            if not self.by_epoch:
                raise ConfigError('LrHook: ReduceLROnPlateau steps by epoch; set SET_BY_EPOCH: true')
            if why := unknown_eval_metric(solver, self.plateau_metric):
                raise ConfigError(
                    f'{self.cfg.path_of("PLATEAU_METRIC")}: ReduceLROnPlateau needs an eval metric: {why}'
                )
            self._check_plateau_mode(solver, sched)
        fresh = self.sched_lrs is None  # (a resume restores these)
        if fresh:
            # from the scheduler when there is one: a solver's own load_checkpoint (scepter's) restores it but not
            # this hook, and the optimizer it restores holds warmed-up rates
            self.sched_lrs = _scheduled_lrs(sched, optimizer)
            base = getattr(sched, 'base_lrs', self.sched_lrs)[0]
            self.start_ratio = self.warmup_start_lr / base if base else 1.0
        if 'train' in solver.datas:
            batches = solver.datas['train'].num_batches() / solver.progress.num_folds
            epoch_steps = math.ceil(batches / solver.updater.settings.accumulate_steps)  # optimizer steps
            if fresh:
                self._check_warmup(solver, base)
                self._check_schedule_length(solver, sched, epoch_steps)
            if self._warmup_steps is None:  # (a resume on another world size keeps it)
                self._warmup_steps = round(self.warmup_epochs * epoch_steps)
        self._apply(solver)

    def _check_warmup(self, solver: SolverSurface, base):
        """Warnings for a warmup that would not do what it is for: one that starts above the rate it warms up to
        (the run's first epochs train faster than asked, where a search over the rate sweeps something else), and
        one that lasts the whole run (the rate never reaches the optimizer's)."""
        if not self.warmup_epochs:
            return
        if self.start_ratio > 1:
            solver.logger.warning(
                f'{self.cfg.path_of("WARMUP_START_LR")}: the warmup starts at {self.warmup_start_lr:g}, above the'
                f" optimizer's learning rate {base:g} it warms up to, so it warms down: training starts at"
                f' {self.start_ratio:.3g}x the rate asked for; set WARMUP_START_LR below the learning rate (e.g.'
                f' {base / 10:g}, a tenth of it) or WARMUP_EPOCHS: 0'
            )
        epochs = solver.progress.max_epochs  # a warmup as long: a sweep over the rate would sweep nothing
        if 0 < epochs <= self.warmup_epochs:
            solver.logger.warning(
                f'{self.cfg.path_of("WARMUP_EPOCHS")}: the warmup of {self.warmup_epochs} epoch(s) takes the whole'
                f' run ({epochs} epoch(s)): the learning rate stays in it, from WARMUP_START_LR'
                f" {self.warmup_start_lr:g}, and never reaches the optimizer's {base:g}; lower WARMUP_EPOCHS (0: no"
                ' warmup) or train longer'
            )

    def _check_schedule_length(self, solver: SolverSurface, sched, epoch_steps):
        """A warning when the scheduler steps per optimizer step and its length is shorter than one epoch of a run of
        several: a length written in epochs (T_MAX: 3), read as steps, cycles or decays the rate every few steps."""
        names = next((names for cls, names in _LENGTH_KEYS.items() if isinstance(sched, cls)), None)
        epochs = solver.progress.max_epochs
        if self.by_epoch or names is None or epochs < 2:
            return
        key, attr = names
        length = getattr(sched, attr)
        length = max(length, default=0) if key == 'MILESTONES' else length
        if length >= epoch_steps:
            return
        steps = epochs * epoch_steps
        if solver.progress.max_steps > 0:
            steps = min(steps, math.ceil(solver.progress.max_steps / solver.updater.settings.accumulate_steps))
        solver.logger.warning(
            f'{getattr(sched, BUILT_FROM, "LR_SCHEDULER")}: {key} {length} counts optimizer steps here'
            f' ({self.cfg.path_of("SET_BY_EPOCH")} false), fewer than one epoch of {epoch_steps}: the schedule runs'
            f" its course every {length} step(s) through the run's {steps}; if {key} meant epochs, give it in steps"
            f' ({length} epochs: {length * epoch_steps}) or set SET_BY_EPOCH: true'
        )

    def _check_plateau_mode(self, solver: SolverSurface, sched: ReduceLROnPlateau):
        """A ConfigError when ReduceLROnPlateau's MODE goes against the direction the metric reporting
        PLATEAU_METRIC declares (MODE min on accuracy lowers the rate while accuracy climbs)."""
        if not any(self.plateau_metric in _output_names(m) for m in solver.metrics):  # scepter's: MODE as written
            return
        mode = 'max' if greater_is_better(solver, self.plateau_metric) else 'min'
        if sched.mode != mode:
            metric, trend = self.plateau_metric, 'falling' if sched.mode == 'min' else 'rising'
            raise ConfigError(
                f'{getattr(sched, BUILT_FROM, "LR_SCHEDULER")}: MODE {sched.mode} waits for {metric} to stop {trend},'
                f' and {metric} is better {"lower" if mode == "min" else "greater"}; set MODE: {mode}'
            )

    def _warmup_fraction(self, solver: SolverSurface):
        if self.by_epoch:
            return solver.progress.epoch / self.warmup_epochs if self.warmup_epochs else 1.0
        return solver.progress.optimizer_steps / self._warmup_steps if self._warmup_steps else 1.0

    def _follow_phase(self, solver: SolverSurface):
        """After an optimizer switch, schedule from the new optimizer's learning rates; True on a switch."""
        if solver.progress.phase == self.phase:
            return False
        self.sched_lrs = [g['lr'] for g in solver.optimizer.param_groups]
        self.phase = solver.progress.phase
        return True

    def _apply(self, solver: SolverSurface):
        """Set each group's LR: the scheduled LR times the warmup factor."""
        p = self._warmup_fraction(solver)
        factor = 1.0 if p >= 1.0 else self.start_ratio + (1.0 - self.start_ratio) * p
        for group, lr in zip(solver.optimizer.param_groups, self.sched_lrs):
            group['lr'] = lr * factor

    def _step_scheduler(self, solver: SolverSurface):
        sched = solver.lr_scheduler
        if sched is not None:
            for group, lr in zip(solver.optimizer.param_groups, self.sched_lrs):
                group['lr'] = lr
            if isinstance(sched, ReduceLROnPlateau):
                value = eval_metric(solver, self.plateau_metric, self.cfg.path_of('PLATEAU_METRIC'))
                if (
                    value is not None and solver.progress.last_eval_epoch == solver.progress.epoch - 1
                ):  # a fresh evaluation only
                    sched.step(value)
            elif getattr(sched, '_step_count', 0) == 1 and solver.progress.total_iter:
                # resumed before the schedule's first step: torch's "lr_scheduler.step() before optimizer.step()"
                # warning sees only this process, whose optimizer has not stepped yet; the run's has (the step
                # count, not optimizer_steps, which a scepter-style load_checkpoint leaves at 0)
                with warnings.catch_warnings():
                    warnings.filterwarnings('ignore', 'Detected call of `lr_scheduler')
                    sched.step()
            else:
                sched.step()
            self.sched_lrs = [g['lr'] for g in solver.optimizer.param_groups]

    def before_epoch(self, solver: SolverSurface):
        if not self.by_epoch:
            return
        if self._follow_phase(solver):  # the new scheduler's first epoch runs at its initial rates
            self.last_epoch = solver.progress.epoch
        if solver.progress.epoch > self.last_epoch:
            self._step_scheduler(solver)
            self.last_epoch = solver.progress.epoch
        self._apply(solver)

    def implements(self, stage):
        if stage == 'after_iter':  # per-step scheduling only
            return not self.by_epoch
        if stage == 'before_iter':  # only with later optimizer phases
            return self._switches
        return super().implements(stage)

    def before_iter(self, solver: SolverSurface):
        """A phase that begins with this step (AT_STEP inside an epoch) runs it at its warmed rates (it ran at the
        new optimizer's raw ones until the hook's next turn)."""
        if self._follow_phase(solver):
            if self.by_epoch:  # its scheduler's first whole epoch runs at its initial rates, as at an epoch's start
                self.last_epoch = solver.progress.epoch + 1
            self._apply(solver)

    def after_iter(self, solver: SolverSurface):
        if solver.progress.optimizer_steps == self.seen_steps:
            return
        self.seen_steps = solver.progress.optimizer_steps
        self._follow_phase(solver)
        self._step_scheduler(solver)
        self._apply(solver)

    def state_dict(self):
        return {
            'sched_lrs': self.sched_lrs,
            'start_ratio': self.start_ratio,
            'last_epoch': self.last_epoch,
            'seen_steps': self.seen_steps,
            'phase': self.phase,
            'warmup_steps': self._warmup_steps,
        }

    def load_state_dict(self, state):
        self.sched_lrs = state['sched_lrs']
        self.start_ratio = state['start_ratio']
        self.last_epoch = state['last_epoch']
        self.seen_steps = state['seen_steps']
        self.phase = state.get('phase', 0)
        self._warmup_steps = state.get('warmup_steps')  # (None in checkpoints from before: computed anew)


def _scheduled_lrs(sched, optimizer):
    """The rates the scheduler set last: its ``get_last_lr()``; the optimizer's when it has no scheduler, or one
    that never ran ``_LRScheduler.__init__`` (scepter's AnnealingLR, which sets the groups' rates itself and keeps
    no ``_last_lr``)."""
    if getattr(sched, '_last_lr', None) is not None:
        return sched.get_last_lr()
    return [g['lr'] for g in optimizer.param_groups]


def _output_names(metric):
    """The names a metric of this project reports (``Metric.output_names``); none for others, and none for a
    scepter metric, whose names are known after a pass (its wrapper's ``output_names`` gives None)."""
    names = getattr(metric, 'output_names', None)
    return (names() or ()) if callable(names) else ()
