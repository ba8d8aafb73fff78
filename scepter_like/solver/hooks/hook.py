"""Hook base class, the named priority levels, and the solver surface a hook sees.

The solver's loop, with the stage each hook may implement::

    before_solve
    for epoch:      before_epoch, before_all_iter
        for batch:  before_iter
                    run_step_train (forward, loss)
                    the update (backward; after_backward; clip; optimizer step)
                    count the step; after_iter
                    after_all_iter, after_epoch
    after_solve

Hooks run in ascending PRIORITY (ties keep config order).  A hook implements only the
stages it needs: the solver calls a stage only on hooks that override it (and that, asked
through ``implements`` after ``before_solve``, have work there), so an unused stage costs
nothing per step.  ``before_save_checkpoint`` / ``after_load_checkpoint`` let a hook add to
and read back the checkpoint; ``state_dict`` / ``load_state_dict`` carry its own state
across a resume.  ``after_backward`` runs inside the update, between the backward pass and
the optimizer step, on optimizer steps only: gradients are present (all-reduced under DDP,
unscaled under fp16) and not yet clipped; the step is not counted yet there
(``solver.step.index`` is its 0-based number).

Hooks observe: none performs a part of the optimisation step (``WeightUpdater``,
solver/optimization.py, does).  What a hook may read and call is ``SolverSurface``; it
changes the solver's state only through the requests there (``request_stop``,
``log_scalar``, ``request_probes``), so PRIORITY orders work, never data flow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from scepter_like.data.loader import DataBundle
    from scepter_like.solver.epoch_scalars import EpochScalars
    from scepter_like.solver.loop_state import StepState, TrainingProgress
    from scepter_like.solver.optimization import WeightUpdater
    from scepter_like.utils.metrics_log import MetricsLog


class SolverSurface(Protocol):
    """What a hook may read and call on the solver; everything else is the solver's own.

    Read-only unless a request.  scepter's names (``solver.epoch``, ``solver.iter``,
    ``solver.total_iter``, ``solver.iter_outputs``, ...) stay on the solver for scepter's
    code, with scepter's offsets (solver/scepter_protocol.py); this project's hooks use
    ``progress`` and ``step`` instead.
    """

    # -- the loop's state
    @property
    def mode(self) -> str: ...  # 'train' | 'eval' | 'test': the pass running now

    progress: TrainingProgress  # epochs, iterations per mode, steps and optimizer steps done, what is finished
    step: StepState  # the current step: its index, loss, outputs (detached), accumulation, data time
    epoch_outputs: dict[str, dict[str, Any]]  # mode -> {metric: float} of the last eval / test pass
    epoch_scalars: EpochScalars  # scalars logged outside a step; a hook that writes them subscribes
    failed: BaseException | None  # in after_solve: the error that ended training, else None

    # -- the model and its optimisation
    model: torch.nn.Module  # as trained (wrapped by DDP / FSDP, compiled)

    @property
    def unwrapped_model(self) -> torch.nn.Module: ...  # the plain module

    @property
    def optimizer(self) -> Any: ...  # the current phase's optimizer, or None

    @property
    def lr_scheduler(self) -> Any: ...  # the current phase's LR scheduler, or None

    updater: WeightUpdater  # the update's settings and phases (read only)
    model_flops: float | None  # forward FLOPs per sample when measured (register_flops)

    # -- the data
    datas: dict[str, DataBundle]  # mode -> the dataset, sampler and loader of that mode

    def metric_names(self, mode: str = 'eval') -> list[str] | None: ...  # None: known after a first pass

    metrics: list[Any]  # the eval / test metrics (Metric objects; scepter's {'fn', 'keys'} entries)

    def transfer_data_to_device(self, batch: dict[str, Any]) -> dict[str, Any]: ...

    # -- the run
    work_dir: str
    logger: logging.Logger
    metrics_log: MetricsLog | None  # rank 0: WORK_DIR/metrics.jsonl
    resumed_from: str | None  # the checkpoint the run resumed from
    hooks_dict: dict[str, list[Any]]  # mode -> that mode's hooks, in PRIORITY order

    @property
    def is_main(self) -> bool: ...  # rank 0: the rank that writes files

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    # -- requests
    def request_stop(
        self, reason: str
    ) -> None: ...  # training ends at the next step boundary (under DDP: the one agreed)

    def log_scalar(self, name: str, value: Any) -> None: ...  # a scalar in this step's outputs (log, TensorBoard)

    def request_probes(self) -> None: ...  # keep what the step registers as probes

    def pop_probes(self) -> dict[str, Any]: ...  # the step's probes, handed over once

    def register_stage_callback(self, stage: str, fn: Callable[[Any], Any], mode: str = 'train') -> None: ...

    def training_state(self) -> dict[str, Any]: ...  # what a checkpoint holds (a collective: every rank calls it)

    def save_safetensors(self) -> tuple[dict[str, Any], dict[str, str]]: ...  # weights and metadata for export


PRIORITY_BACKWARD = 0
PRIORITY_LOG = 100
PRIORITY_LR = 200
PRIORITY_PROBE = 200
PRIORITY_SAFETENSORS = 200
PRIORITY_CHECKPOINT = 300
PRIORITY_SAMPLER = 400
PRIORITY_NORMAL = 500

STAGES = (
    'before_solve',
    'after_solve',
    'before_epoch',
    'after_epoch',
    'before_all_iter',
    'after_all_iter',
    'before_iter',
    'after_iter',
    'after_backward',
    'before_save_checkpoint',
    'after_load_checkpoint',
)


class Hook:
    para_dict: dict[str, Any] = {
        # left out when not written: a scepter hook declaring no PRIORITY reads its own, cfg.get('PRIORITY', 50)
        'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'lower runs first; ties keep config order', 'fill': False}
    }

    def __init__(self, cfg: Any, logger: logging.Logger | None = None):
        self.cfg = cfg
        self.logger = logger
        self.priority = cfg.get('PRIORITY', PRIORITY_NORMAL) if cfg is not None else PRIORITY_NORMAL

    def before_solve(self, solver: SolverSurface) -> None:
        pass

    def after_solve(self, solver: SolverSurface) -> None:
        pass

    def before_epoch(self, solver: SolverSurface) -> None:
        pass

    def after_epoch(self, solver: SolverSurface) -> None:
        pass

    def before_all_iter(self, solver: SolverSurface) -> None:
        pass

    def after_all_iter(self, solver: SolverSurface) -> None:
        pass

    def before_iter(self, solver: SolverSurface) -> None:
        pass

    def after_iter(self, solver: SolverSurface) -> None:
        pass

    def after_backward(self, solver: SolverSurface) -> None:
        pass

    def before_save_checkpoint(self, solver: SolverSurface, checkpoint: dict[str, Any]) -> None:
        pass

    def after_load_checkpoint(self, solver: SolverSurface, checkpoint: dict[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        """State to carry across a resume (plain values and tensors only)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    @classmethod
    def implements(cls, stage: str) -> bool:
        """Whether the solver should call this hook at ``stage``: the class overrides it.

        A hook may narrow this per instance; the solver asks again after ``before_solve``,
        once every hook has settled its configuration.
        """
        return getattr(cls, stage) is not getattr(Hook, stage)


def check_eval_metric(hook: Hook, solver: SolverSurface, key: str, job: str) -> None:
    """For a hook that reads an eval metric: it is in EVAL_HOOKS, and the metric ``cfg[key]`` names exists.

    ``job`` says what the hook does with evaluations (for the error).  Metric names not known
    before a first pass (scepter's metrics) are checked when read (``eval_metric``).
    """
    from scepter_like.errors import ConfigError

    if hook not in solver.hooks_dict['eval']:
        raise ConfigError(f'{hook.cfg.path}: {type(hook).__name__} {job}; list it in SOLVER.EVAL_HOOKS')
    if why := unknown_eval_metric(solver, hook.cfg[key]):
        raise ConfigError(f'{hook.cfg.path_of(key)}: {why}')


def unknown_eval_metric(solver: SolverSurface, name: str) -> str | None:
    """Why ``name`` is no metric the evaluation gives (for the error of a hook reading it), or None when it is one,
    or when the names are known only after a first pass (scepter's metrics)."""
    names = solver.metric_names('eval')
    if names is None or name in names:
        return None
    if 'eval' not in solver.datas:
        return f'no eval metric is called {name!r}: there is no evaluation; give the config EVAL_DATA (and METRICS)'
    return f'no eval metric is called {name!r}; the metrics give {names}' + ('' if names else ' (give METRICS)')


class StepInterval:
    """Every ``interval`` train steps, at the end of the accumulation group a due step falls inside, so what is
    saved then holds the weights of a whole optimizer step (CheckpointHook, SafetensorsHook).  ``due`` is the
    state to carry across a resume."""

    def __init__(self, interval: int):
        self.interval = interval
        self.due = False

    def reached(self, solver: SolverSurface) -> bool:
        """Called in each train step's after_iter: whether to save now."""
        self.due = self.due or solver.progress.total_iter % self.interval == 0
        if self.due and not solver.step.in_accumulation:
            self.due = False
            return True
        return False


def model_state(solver: SolverSurface) -> dict[str, float]:
    """The model's ``logged_state()`` (values a log line shows as they are now, e.g. a PINN's PDE parameters);
    none for a model without it."""
    state = getattr(solver.unwrapped_model, 'logged_state', None)
    return state() if callable(state) else {}


def greater_is_better(solver: SolverSurface, name: str) -> bool:
    """Whether a greater eval metric ``name`` is better: not when the metric reporting it says less is
    (``Metric.lower_is_better``: MSE, errors; a loss the model's eval step returns, ``val_loss``), else yes
    (scepter's default for an unsigned SAVE_BEST_BY)."""
    reporters = [*solver.metrics, getattr(solver, 'output_means', None)]
    return not any(name in getattr(metric, 'lower_is_better', ()) for metric in reporters)


def eval_metric(solver: SolverSurface, name: str, where: str) -> Any:
    """The latest evaluation's ``name``, or None before any; a ConfigError naming ``where`` (a config path)
    when an evaluation ran without it (metric names a first pass makes known: scepter's metrics)."""
    outputs = solver.epoch_outputs.get('eval') or {}
    if name in outputs:
        return outputs[name]
    if outputs:
        from scepter_like.errors import ConfigError

        raise ConfigError(f'{where}: no eval metric is called {name!r}; the evaluation gave {sorted(outputs)}')
    return None
