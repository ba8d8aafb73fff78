"""The optimisation step and its one owner, ``WeightUpdater``.

Everything that changes the weights lives here and reads top to bottom in
``WeightUpdater.update``::

    backward of the step's loss / group size      (or the loss aggregator's own backward: PCGrad)
    on the last micro-batch of a group:
        unscale (fp16)  ->  after_backward hooks  ->  clip  ->  unanimous non-finite skip
        ->  optimizer step (a closure step for L-BFGS)  ->  zero_grad

The updater holds what that needs: the optimizer phases (``SOLVER.OPTIMIZER`` and
``OPTIMIZER_PHASES``), the current optimizer and LR scheduler, the loss aggregator, the
GradScaler, and the settings of ``UpdateSettings`` (accumulation, clipping, AMP, the
non-finite policy), which come from ``SOLVER.ACCU_STEP`` and BackwardHook's keys.  The loop
(``BaseSolver.run_train``) calls ``update`` once per train step; hooks only observe what it
did (``after_backward``, ``progress.optimizer_steps``).

Phases: a run starts in phase 0; each later phase starts at a train step (``AT_STEP``:
that many steps done) or at the start of an epoch (``AT_EPOCH``, 0-based), with its own
optimizer over the same parameters and its own scheduler (none when it names none) -- the
Adam then L-BFGS recipe of physics-informed training::

    OPTIMIZER: {NAME: Adam, LEARNING_RATE: 0.001}
    OPTIMIZER_PHASES:
      - AT_STEP: 2000
        OPTIMIZER: {NAME: LBFGS, LEARNING_RATE: 1.0, MAX_ITER: 1, MAX_EVAL: 25, LINE_SEARCH_FN: strong_wolfe}

The checkpoint records the phase (``TrainingProgress.phase``) and holds the optimizer of
that phase, so a resume in either phase, or right at the switch, continues exactly.  A
closure optimizer (one whose ``step`` requires a closure, as L-BFGS's does) re-evaluates
the current batch's loss; it cannot accumulate gradients over micro-batches nor take a
GradScaler, so both are config errors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from scepter_like.config import Config
from scepter_like.errors import CheckpointError, ConfigError, TrainingError
from scepter_like.model.loss_aggregators import LOSS_AGGREGATORS, LossAggregator, aggregate_loss, loss_terms
from scepter_like.opt.lr_schedulers.registry import build_lr_scheduler
from scepter_like.opt.optimizers.registry import build_optimizer
from scepter_like.opt.schedule_resume import saved_optimizer_name
from scepter_like.registry import resolve_params
from scepter_like.solver.loop_state import StepState, TrainingProgress
from scepter_like.solver.parallel import full_tensor, load_optimizer_state, optimizer_state_dict
from scepter_like.utils.distributed import all_reduce_max, all_reduce_sum, get_world_size

PHASE_PARA_DICT = {
    'AT_STEP': {'value': 0, 'description': 'the phase starts once this many train steps are done', 'min': 0},
    'AT_EPOCH': {'value': 0, 'description': 'or: the phase starts with this epoch (0-based)', 'min': 0},
    'OPTIMIZER': {'value': None, 'description': "the phase's OPTIMIZERS config", 'required': True},
    'LR_SCHEDULER': {'value': None, 'description': "the phase's LR_SCHEDULERS config (none: a constant LR)"},
}
AMP_DTYPES = {'bf16': torch.bfloat16, 'fp16': torch.float16}
NONFINITE_POLICIES = ('stop', 'skip', 'off')
_NULL_CONTEXT = contextlib.nullcontext()


# what a loss the update cannot backpropagate says: most often a run_step_train that stepped the optimizer itself
STEPS_ITSELF = (
    'a solver whose run_step_train steps the optimizer itself (zero_grad, backward, step) sets'
    ' STEPS_OPTIMIZER_ITSELF = True on its class, so the built-in update stands aside (docs/training_loop.md)'
)


def takes_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` requires a closure (L-BFGS) rather than merely accepting one."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get('closure')
    except (TypeError, ValueError):
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class UpdateSettings:
    """How the updater runs a step: BackwardHook's keys and SOLVER.ACCU_STEP, settled once."""

    accumulate_steps: int = 1
    gradient_clip: float = -1.0  # <= 0: off
    autocast_dtype: torch.dtype | None = None
    nonfinite_policy: str = 'stop'
    max_nonfinite_steps: int = 10
    empty_cache_step: int = -1  # torch.cuda.empty_cache() every N optimizer steps on CUDA; <= 0: off

    @classmethod
    def from_config(cls, solver_cfg: Config, backward_cfg: Config | None, device_type: str) -> UpdateSettings:
        """From the SOLVER config and the train BackwardHook's config (None: defaults), for a run on ``device_type``.

        ``SOLVER.ACCU_STEP`` and ``BackwardHook.ACCUMULATE_STEP`` are one knob: set either;
        two different values are a ConfigError naming both.
        """
        accumulate = solver_cfg.ACCU_STEP
        if backward_cfg is None:
            return cls(accumulate_steps=accumulate)
        if backward_cfg.ACCUMULATE_STEP != 1:
            if accumulate not in (1, backward_cfg.ACCUMULATE_STEP):
                raise ConfigError(
                    f'{solver_cfg.path_of("ACCU_STEP")} ({accumulate}) and {backward_cfg.path_of("ACCUMULATE_STEP")}'
                    f' ({backward_cfg.ACCUMULATE_STEP}) disagree on accumulate_steps; set one of them'
                )
            accumulate = backward_cfg.ACCUMULATE_STEP
        autocast = AMP_DTYPES[backward_cfg.AMP_DTYPE] if backward_cfg.USE_AMP else None
        if autocast is not None and solver_cfg.DTYPE != 'float32':
            raise ConfigError(
                f'{solver_cfg.path_of("DTYPE")}: {solver_cfg.DTYPE} cannot run under AMP; turn USE_AMP off'
            )
        if autocast is torch.float16 and device_type != 'cuda':
            raise ConfigError(
                f'{backward_cfg.path_of("AMP_DTYPE")}: fp16 needs CUDA (this run is on {device_type}); use bf16'
            )
        return cls(
            accumulate_steps=accumulate,
            gradient_clip=backward_cfg.GRADIENT_CLIP,
            autocast_dtype=autocast,
            nonfinite_policy=backward_cfg.NONFINITE_POLICY,
            max_nonfinite_steps=backward_cfg.MAX_NONFINITE_STEPS,
            empty_cache_step=backward_cfg.EMPTY_CACHE_STEP,
        )


class OptimizerPhases:
    """The phases of a SOLVER config: which one is due, and building each one's optimizer and scheduler."""

    def __init__(self, solver_cfg: Config):
        self.cfg = solver_cfg
        self.optimizers: list[Config | None] = [solver_cfg.OPTIMIZER]
        self.schedulers: list[Config | None] = [solver_cfg.LR_SCHEDULER]
        self.starts: list[tuple[str, int]] = [('step', 0)]  # (kind, value) per phase
        self.owners: list[Config] = [solver_cfg]  # the mapping holding each phase's OPTIMIZER (for errors)
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
            self.owners.append(phase)
            self.optimizers.append(phase.OPTIMIZER)
            self.schedulers.append(phase.LR_SCHEDULER)
        # (first step, end step, OPTIMIZER config) of each phase whose optimizer takes a closure (L-BFGS), as
        # ``check`` finds them: what changes the loss inside one (RARHook's rounds) would mix its curvature pairs
        self.closure_spans: list[tuple[int, int, Config]] = []

    def __len__(self) -> int:
        return len(self.optimizers)

    def build(self, index: int, params: list[torch.nn.Parameter], logger: Any = None) -> tuple[Any, Any]:
        """(optimizer, LR scheduler or None) of phase ``index`` over ``params``."""
        owner, scheduler_cfg = self.owners[index], self.schedulers[index]
        if not params:  # (torch's own word: "optimizer got an empty parameter list")
            raise ConfigError(
                f'{owner.path_of("OPTIMIZER")}: every parameter of the model is frozen (MODEL.FREEZE; true freezes'
                " the whole model; or the model's own freezing), so there is nothing to train; unfreeze a part"
            )
        optimizer = build_optimizer(self.optimizers[index], params, logger, owner.path_of('OPTIMIZER'))
        scheduler = None
        if scheduler_cfg is not None:
            scheduler = build_lr_scheduler(scheduler_cfg, optimizer, logger, owner.path_of('LR_SCHEDULER'))
        return optimizer, scheduler

    def start_step(self, index: int, epoch_steps: int) -> int:
        """The train step phase ``index`` starts at, given ``epoch_steps`` train steps per epoch."""
        kind, value = self.starts[index]
        return value if kind == 'step' else value * epoch_steps

    def check(
        self,
        progress: TrainingProgress,
        settings: UpdateSettings,
        params: list[torch.nn.Parameter],
        logger: Any = None,
        resample_every: int = 0,
    ) -> None:
        """Every phase builds and starts after the one before (one past the run's end is a warning); closure
        optimizers fit the loop and the train data (``resample_every``: the passes the data keeps one draw of
        points for, 0 for all run), and their phases' steps are noted (``closure_spans``).

        Builds each phase's optimizer and scheduler once and drops them, so a bad later phase
        fails before training, not thousands of steps in.
        """
        epoch_steps, last_step = progress.epoch_iters['train'], progress.last_step
        self.closure_spans = []
        previous = 0
        for index in range(len(self)):
            optimizer, _ = self.build(index, params, logger)
            if takes_closure(optimizer):
                opt_cfg = self._check_closure(index, settings)
                end = self.start_step(index + 1, epoch_steps) if index + 1 < len(self) else last_step
                self.closure_spans.append((self.start_step(index, epoch_steps), min(end, last_step), opt_cfg))
                changes = {}  # what makes the loss differ from step to step: the key that does it -> how
                if epoch_steps > 1:
                    changes['BATCH_SIZE'] = f'an epoch here is {epoch_steps} mini-batches'
                if resample_every > 0:
                    changes['RESAMPLE_EVERY'] = f'the points are drawn anew every {resample_every} pass(es)'
                if changes:
                    (logger or logging.getLogger(__name__)).warning(
                        f'{opt_cfg.path}: {opt_cfg.NAME} keeps curvature pairs from step to step, and'
                        f' {" and ".join(changes.values())}, each a different loss: the pairs mix them and the steps'
                        f' can diverge; train it on the full batch of one draw (no {" or ".join(changes)} on the'
                        " point sets), as DeepXDE's L-BFGS does"
                    )
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

    def _check_closure(self, index: int, settings: UpdateSettings) -> Any:
        """A ConfigError when a closure optimizer cannot fit the loop's settings; else its config."""
        opt_cfg = self.optimizers[index]
        assert opt_cfg is not None
        where, name = opt_cfg.path, opt_cfg.NAME
        if settings.accumulate_steps > 1:
            raise ConfigError(
                f'{where}: {name} re-evaluates the loss in its step and cannot accumulate'
                f' gradients over micro-batches; set SOLVER.ACCU_STEP (BackwardHook.ACCUMULATE_STEP) to 1'
            )
        if settings.autocast_dtype is torch.float16:
            raise ConfigError(
                f'{where}: {name} cannot step through a GradScaler (fp16); use BackwardHook AMP_DTYPE: bf16 or no AMP'
            )
        max_iter = opt_cfg.get('MAX_ITER', 20)
        if opt_cfg.get('LINE_SEARCH_FN') == 'strong_wolfe' and opt_cfg.get('MAX_EVAL') is None and max_iter < 4:
            raise ConfigError(
                f"{where}: {name} with LINE_SEARCH_FN strong_wolfe needs MAX_EVAL (e.g. 25): torch's default,"
                f' MAX_ITER * 5 // 4 = {max_iter * 5 // 4}, leaves the line search no evaluation and the weights stay'
            )
        return opt_cfg

    def due(self, progress: TrainingProgress) -> int:
        """The phase the run should be in at ``progress``: the last one whose start it has reached."""
        index = progress.phase
        while index + 1 < len(self):
            kind, value = self.starts[index + 1]
            reached = progress.total_iter >= value if kind == 'step' else progress.epoch >= value
            if not reached:
                break
            index += 1
        return index

    def next_step(self, index: int) -> float:
        """The train step at which the phase after ``index`` starts, when it starts at a step (else inf: an
        epoch-started phase begins with its epoch)."""
        if index + 1 >= len(self) or self.starts[index + 1][0] != 'step':
            return math.inf
        return self.starts[index + 1][1]


def loss_weights(solver_cfg: Config) -> dict[str, float]:
    """``SOLVER.LOSS_WEIGHTS`` as ``{term: weight}``, each a number >= 0 (0 switches its term off): checked when the
    aggregator is built, before training, not at the first step's product; a negative weight would maximise its
    term."""
    weights = {}
    for term, weight in solver_cfg.LOSS_WEIGHTS.items():
        where = solver_cfg.LOSS_WEIGHTS.path_of(term)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            got = 'null' if weight is None else repr(weight)
            raise ConfigError(f'{where}: a loss weight is a number >= 0 (0 switches the term off), got {got}')
        if weight < 0:
            raise ConfigError(
                f'{where}: the weight {weight} is negative: the loss would grow {term} instead of shrinking it;'
                ' give a number >= 0 (0 switches the term off)'
            )
        weights[term] = float(weight)
    return weights


class WeightUpdater:
    """Owns the optimisation step: optimizer phases, optimizer, scheduler, loss aggregator, GradScaler, settings.

    The solver builds it from its config, gives it the settings (``UpdateSettings``) once the
    hooks are built and the parameters in ``set_up``; then the loop calls ``update`` once per
    train step.  ``active`` is False when something else steps the optimizer (a BackwardHook
    that is not this project's, or a solver whose ``run_step_train`` steps itself): the
    updater then only holds the optimizer and scheduler, as scepter's solver does.
    """

    def __init__(self, solver_cfg: Config, logger: Any):
        self.cfg = solver_cfg
        self.logger = logger
        self.seed = 0
        self.phases = OptimizerPhases(solver_cfg)
        self.settings = UpdateSettings(accumulate_steps=solver_cfg.ACCU_STEP)
        self.active = True
        self._trainable: list[torch.nn.Parameter] = []  # what set_up gave: the phases' optimizers are built over it
        self.optimizer = None  # (sets _params and takes_closure)
        self.lr_scheduler: Any = None
        self.scaler: torch.amp.GradScaler | None = None
        # how a (scaled) loss becomes gradients: Tensor.backward; under ENV.USE_PL Lightning's manual_backward,
        # through which its strategy all-reduces them (solver/lightning/module.py)
        self.backward_fn: Callable[[torch.Tensor], Any] = torch.Tensor.backward
        self.next_phase_step: float = math.inf  # the train step at which the next step-started phase is due
        self.nonfinite_in_a_row = 0
        self.nonfinite_total = 0
        self._device_type = 'cpu'
        self._bad: torch.Tensor | None = None  # non-finite losses seen in the open accumulation group
        self._aggregator: LossAggregator | None = None
        # the loss keys the user set, which a model's own 'loss' would leave unused (aggregate_loss)
        self._loss_keys_set = tuple(
            solver_cfg.path_of(key) for key in ('LOSS_AGGREGATOR', 'LOSS_WEIGHTS') if solver_cfg[key]
        )

    # -- set-up ---------------------------------------------------------------------------------
    @property
    def loss_aggregator(self) -> LossAggregator:
        """The LOSS_AGGREGATORS entry that turns the model's ``loss_*`` terms into the loss (Sum by default)."""
        if self._aggregator is None:
            agg_cfg = self.cfg.LOSS_AGGREGATOR or {'NAME': 'Sum'}
            weights = loss_weights(self.cfg)
            self._aggregator = LOSS_AGGREGATORS.build(agg_cfg, logger=self.logger, weights=weights, seed=self.seed)
        return self._aggregator

    def configure(self, settings: UpdateSettings, active: bool, seed: int) -> None:
        """The step's settings; ``active`` False: something else steps the optimizer; ``seed``: the aggregator's."""
        self.settings, self.active, self.seed = settings, active, seed

    @property
    def optimizer(self) -> Any:
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Any) -> None:
        """Whoever built it (a phase, or a solver's own ``init_opti``, as scepter's solvers write one), the update
        clips and checks the parameters it trains, and calls it as it must be called (a closure for L-BFGS)."""
        self._optimizer = optimizer
        self._params = [p for group in optimizer.param_groups for p in group['params']] if optimizer else []
        self.takes_closure = optimizer is not None and takes_closure(optimizer)

    def set_up(
        self,
        params: list[torch.nn.Parameter],
        device: torch.device,
        progress: TrainingProgress | None,
        train_data: Any = None,
    ) -> None:
        """Phase 0's optimizer and scheduler over ``params`` (every phase checked against ``progress``, the train
        data's, and ``train_data``, a DataBundle, when there is train data), the GradScaler under fp16 and the loss
        aggregator."""
        self._trainable = params
        self._device_type = device.type
        autocast = self.settings.autocast_dtype
        if self.cfg.OPTIMIZER is not None:
            if progress is not None:
                resample_every = getattr(getattr(train_data, 'dataset', None), 'resample_every', 0)
                self.phases.check(progress, self.settings, params, self.logger, resample_every)
            self.use_phase(0, progress)
            if progress is not None and self.active:
                self._warn_max_steps_cuts_a_group(progress)
            if autocast is torch.float16:
                self.scaler = torch.amp.GradScaler('cuda')
        _ = self.loss_aggregator  # built now, so that a bad LOSS_AGGREGATOR fails before training

    def _warn_max_steps_cuts_a_group(self, progress: TrainingProgress) -> None:
        """MAX_STEPS counts train steps (micro-batches), as scepter's does; a stop inside an accumulation group steps
        the optimizer on that group's first micro-batches, so a run resumed from it differs from one that went on
        (Lightning's max_steps counts optimizer steps and never stops inside a group): say so, and what ends one."""
        n = self.settings.accumulate_steps
        cut = progress.group_max_steps_cuts(n)
        if cut is None:
            return
        epoch, first, last = cut
        steps = progress.max_steps
        at = steps - (epoch - 1) * progress.epoch_iters['train']  # the stop's iteration in its epoch
        before, after = steps - (at - first + 1), steps + last - at
        self.logger.warning(
            f'{self.cfg.path_of("MAX_STEPS")}: {steps} stops inside a gradient accumulation group (accumulation of'
            f' {n}: iterations {first}-{last} of epoch {epoch}, counted from the epoch start); the stop steps the'
            f' optimizer on part of that group, so a run resumed from there (RESUME_FROM) does not continue the'
            f' run it stopped exactly. MAX_STEPS {before} or {after} ends a group'
        )

    def use_phase(self, index: int, progress: TrainingProgress | None = None) -> None:
        """Optimize with phase ``index``'s optimizer and scheduler from here on (fresh state; a resume loads it)."""
        self.optimizer, self.lr_scheduler = self.phases.build(index, self._trainable, self.logger)
        self.next_phase_step = self.phases.next_step(index)
        if progress is not None:
            progress.phase = index

    def enter_due_phase(self, progress: TrainingProgress) -> None:
        """At a step boundary: switch to the phase due now, if it is not the current one."""
        due = self.phases.due(progress)
        if due == progress.phase:
            return
        self.use_phase(due, progress)
        name, scheduler = type(self.optimizer).__name__, self.lr_scheduler
        self.logger.info(
            f'optimizer phase {due} of {len(self.phases) - 1} from step {progress.total_iter}: {name}'
            + (f' with {type(scheduler).__name__}' if scheduler is not None else '')
        )

    def describe(self) -> str:
        """One line for the run's start: who steps the optimizer, and how."""
        if not self.active:
            return f'update: by the solver or its BackwardHook ({type(self.optimizer).__name__})'
        s = self.settings
        amp = f'autocast to {s.autocast_dtype} on {self._device_type}' if s.autocast_dtype is not None else 'off'
        clip = f'global norm {s.gradient_clip:g}' if s.gradient_clip > 0 else 'off'
        phases = f' ({len(self.phases)} optimizer phases)' if len(self.phases) > 1 else ''
        return (
            f'update: {type(self.optimizer).__name__}{phases}, accumulate {s.accumulate_steps}, clip {clip},'
            f' mixed precision {amp}, non-finite losses: {s.nonfinite_policy}'
        )

    # -- the forward -----------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` to the AMP dtype, or a null context without AMP."""
        dtype = self.settings.autocast_dtype
        return _NULL_CONTEXT if dtype is None else torch.autocast(device_type=self._device_type, dtype=dtype)

    def forward_context(self, model: torch.nn.Module, sync_grads: bool) -> contextlib.AbstractContextManager[Any]:
        """What a train forward runs under: DDP's ``no_sync`` on accumulation micro-steps, autocast under AMP.

        ``no_sync`` only needs the forward: it decides whether the backward that follows
        all-reduces the gradients.  An aggregator that does its own backward (PCGrad)
        reduces the gradients itself: no_sync always.
        """
        # the wrapper question last: hasattr on a plain module fails through nn.Module.__getattr__ (~2 µs a step)
        no_sync = (not sync_grads or self.loss_aggregator.performs_backward) and hasattr(model, 'no_sync')
        if not no_sync and self.settings.autocast_dtype is None:
            return _NULL_CONTEXT
        return self._forward_stack(model, no_sync)

    @contextlib.contextmanager
    def _forward_stack(self, model: Any, no_sync: bool) -> Iterator[None]:
        with model.no_sync() if no_sync else _NULL_CONTEXT, self.autocast():
            yield

    def loss_of(self, results: dict[str, Any], step: StepState) -> torch.Tensor:
        """The loss to minimise from a train forward's ``results``: ``results['loss']``, else the ``loss_*`` terms
        through the aggregator (put back as ``results['loss']``; the terms stay in ``step.terms``)."""
        if 'loss' not in results:
            step.terms = loss_terms(results)
        return aggregate_loss(self.loss_aggregator, results, step.index, self._loss_keys_set)

    # -- the update -----------------------------------------------------------------------------
    def update(
        self, step: StepState, recompute: Callable[[], torch.Tensor], after_backward: Callable[[], None]
    ) -> bool:
        """Backward of ``step``'s loss and, on the last micro-batch of its group, the optimizer step.

        ``recompute`` evaluates the step's loss again (a closure optimizer's later
        evaluations); ``after_backward`` calls the hooks of that stage.  Returns whether the
        optimizer stepped: a micro-step, a skipped non-finite step and a step without a
        loss do not.
        """
        loss = step.take_loss()
        if loss is None:
            return False
        if not loss.requires_grad and any(p.requires_grad for p in self._params):
            raise TrainingError(f'the train step returned a loss that does not require grad (detached); {STEPS_ITSELF}')
        if self.settings.nonfinite_policy == 'skip':
            bad = ~torch.isfinite(loss.detach())
            self._bad = bad if self._bad is None else self._bad | bad
        try:
            self._backward(loss, step, step.group_size)
        except RuntimeError as e:
            if 'backward through the graph a second time' not in str(e):
                raise
            raise TrainingError(
                f"the update's backward met a graph backpropagated already (torch: {str(e).split(' (')[0]}); "
                f'{STEPS_ITSELF}; else detach what a step keeps from an earlier one'
            ) from e
        if not step.steps_optimizer:
            return False
        optimizer, scaler = self.optimizer, self.scaler
        if scaler is not None:
            scaler.unscale_(optimizer)  # after_backward hooks and clipping see the true gradients
        after_backward()
        self._clip(step)
        if self.settings.nonfinite_policy == 'skip' and self._skip_agreed(step.index):
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.update()  # unscale_ ran; update() closes that step for the scaler
            return False
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        elif self.takes_closure:
            optimizer.step(self._closure(loss, step, recompute))
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        every = self.settings.empty_cache_step
        if every > 0 and self._device_type == 'cuda' and (step.index + 1) % every == 0:
            torch.cuda.empty_cache()
        return True

    def _backward(self, loss: torch.Tensor, step: StepState, group_size: int) -> None:
        """Add the gradients of ``loss / group_size`` (scaled under fp16) to ``.grad``."""
        aggregator = self.loss_aggregator
        if step.terms and aggregator.performs_backward:  # PCGrad: each term's gradient, projected
            terms = {k: self._prepared(v, group_size) for k, v in step.terms.items()}
            aggregator.backward(terms, step.index, self._params)
        else:
            self.backward_fn(self._prepared(loss, group_size))

    def _prepared(self, value: torch.Tensor, group_size: int) -> torch.Tensor:
        """``value`` as the backward takes it: its share of the accumulation group, scaled under fp16."""
        value = value / group_size if group_size > 1 else value
        return self.scaler.scale(value) if self.scaler is not None else value

    def _clip(self, step: StepState) -> None:
        if self.settings.gradient_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self._params, self.settings.gradient_clip)
            step.outputs['grad_norm'] = full_tensor(norm).detach()  # a DTensor under FSDP

    def _closure(self, loss: torch.Tensor, step: StepState, recompute: Callable[[], torch.Tensor]) -> Callable:
        """The closure a closure optimizer calls: first the step's own loss, then fresh evaluations of its batch."""
        pending = [loss]

        def closure() -> torch.Tensor:
            if pending:
                return _agreed(pending.pop().detach())
            self.optimizer.zero_grad(set_to_none=True)
            again = recompute()
            self._backward(again, step, 1)
            self._clip(step)
            return _agreed(again.detach())

        return closure

    def _skip_agreed(self, index: int) -> bool:
        """One decision for all ranks: skip when any rank saw a non-finite loss in this group."""
        assert self._bad is not None
        flag = self._bad.to(torch.int32).reshape(1)
        self._bad = None
        if not all_reduce_max(flag).item():
            self.nonfinite_in_a_row = 0
            return False
        self.nonfinite_in_a_row += 1
        self.nonfinite_total += 1
        self.logger.warning(
            f'non-finite loss at step {index + 1}: optimizer step skipped'
            f' ({self.nonfinite_in_a_row} in a row, {self.nonfinite_total} in all)'
        )
        if self.nonfinite_in_a_row >= self.settings.max_nonfinite_steps:
            raise TrainingError(
                f'{self.nonfinite_in_a_row} non-finite losses in a row (BackwardHook MAX_NONFINITE_STEPS);'
                ' lower the learning rate, clip gradients or check the data'
            )
        return True

    # -- checkpoint -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The checkpoint entries: ``optimizer`` and ``lr_scheduler`` (full tensors), ``loss_aggregator`` and
        ``update`` (GradScaler, non-finite counts); the phase is in the progress state."""
        update: dict[str, Any] = {
            'nonfinite_in_a_row': self.nonfinite_in_a_row,
            'nonfinite_total': self.nonfinite_total,
        }
        if self.scaler is not None:
            update['scaler'] = self.scaler.state_dict()
        return {
            'optimizer': optimizer_state_dict(self.optimizer) if self.optimizer is not None else None,
            'lr_scheduler': self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
            'loss_aggregator': self.loss_aggregator.state_dict(),
            'update': update,
        }

    def load_state_dict(self, ckpt: dict[str, Any], phase: int, progress: TrainingProgress, source: str) -> None:
        """Restore from a checkpoint's entries (``state_dict``'s keys), saved in optimizer phase ``phase``.

        Checkpoints written before the updater kept the GradScaler and the non-finite counts
        in BackwardHook's hook state; those load too.
        """
        if self.optimizer is not None and phase != progress.phase:
            if phase >= len(self.phases):
                raise CheckpointError(
                    f'{source} was saved in optimizer phase {phase}; this config has {len(self.phases)} phase(s)'
                    ' (SOLVER.OPTIMIZER_PHASES)'
                )
            self.use_phase(phase, progress)  # the optimizer (and scheduler) whose state the checkpoint holds
        if self.optimizer is not None:
            self._check_optimizer_class(ckpt, phase, source)
        for name, obj, load in (
            ('optimizer', self.optimizer, load_optimizer_state),
            ('lr_scheduler', self.lr_scheduler, lambda o, s: o.load_state_dict(s)),
            ('loss_aggregator', self.loss_aggregator, lambda o, s: o.load_state_dict(s)),
        ):
            if obj is not None and ckpt.get(name) is not None:
                try:
                    load(obj, ckpt[name])
                except (ValueError, KeyError, RuntimeError, IndexError) as e:
                    raise CheckpointError(f'{source}: the {name} state does not fit this config ({e})') from None
        update: dict[str, Any] | None = ckpt.get('update')
        if update is None:  # written before the updater: BackwardHook's hook state held it
            update = next((s for k, s in ckpt.get('hooks', {}).items() if k.endswith('.BackwardHook')), {})
        self.nonfinite_in_a_row = update.get('nonfinite_in_a_row', 0)
        self.nonfinite_total = update.get('nonfinite_total', 0)
        if self.scaler is not None and 'scaler' in update:
            self.scaler.load_state_dict(update['scaler'])

    def _check_optimizer_class(self, ckpt: dict[str, Any], phase: int, source: str) -> None:
        """An optimizer's state fits only its own class (SGD would read 'momentum' from AdamW's param groups at its
        first step): another class than the checkpoint's is a ConfigError naming both and the ways out."""
        saved, own_cfg = saved_optimizer_name(ckpt, phase), self.phases.optimizers[phase]
        if saved is None or own_cfg is None or saved == own_cfg.NAME:
            return
        where, own = self.phases.owners[phase].path_of('OPTIMIZER'), own_cfg.NAME
        raise ConfigError(
            f'{where}.NAME: {own}, and {source} holds the state of optimizer {saved}, which {own} cannot resume from;'
            f' resume with NAME: {saved}, or start a new run from its weights (SOLVER.MODEL.PRETRAINED_MODEL:'
            f' {source}) with {own}'
        )


def _agreed(loss: torch.Tensor) -> torch.Tensor:
    """``loss``, averaged over ranks under DDP (a closure optimizer decides from it on every rank alike)."""
    world = get_world_size()
    return all_reduce_sum(loss.clone()) / world if world > 1 else loss
