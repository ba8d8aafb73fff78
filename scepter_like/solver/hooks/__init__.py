"""The solver's hooks; importing this package registers the built-in ones in HOOKS."""

from scepter_like.solver.hooks import (  # noqa: F401  (each module registers its hooks)
    backward,
    checkpoint,
    early_stopping,
    ema,
    field_plot,
    grad_norm,
    log,
    lr,
    lr_range,
    probe,
    profiler,
    pruning,
    rar,
    safetensors,
    sampler,
    swa,
    tensorboard,
    tracking,
)
from scepter_like.solver.hooks.backward import BackwardHook
from scepter_like.solver.hooks.checkpoint import CheckpointHook
from scepter_like.solver.hooks.early_stopping import EarlyStoppingHook
from scepter_like.solver.hooks.ema import EMAHook
from scepter_like.solver.hooks.field_plot import FieldPlotHook
from scepter_like.solver.hooks.grad_norm import GradNormHook
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.log import LogHook
from scepter_like.solver.hooks.lr import LrHook
from scepter_like.solver.hooks.lr_range import LrRangeHook
from scepter_like.solver.hooks.probe import ProbeDataHook
from scepter_like.solver.hooks.profiler import ProfilerHook
from scepter_like.solver.hooks.pruning import PruningHook
from scepter_like.solver.hooks.rar import RARHook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.hooks.safetensors import SafetensorsHook
from scepter_like.solver.hooks.sampler import DistSamplerHook
from scepter_like.solver.hooks.swa import SWAHook
from scepter_like.solver.hooks.tensorboard import TensorboardLogHook
from scepter_like.solver.hooks.tracking import MLflowLogHook, WandbLogHook

__all__ = [
    'HOOKS',
    'BackwardHook',
    'CheckpointHook',
    'DistSamplerHook',
    'EarlyStoppingHook',
    'EMAHook',
    'FieldPlotHook',
    'GradNormHook',
    'Hook',
    'LogHook',
    'LrHook',
    'LrRangeHook',
    'MLflowLogHook',
    'ProbeDataHook',
    'ProfilerHook',
    'PruningHook',
    'RARHook',
    'SafetensorsHook',
    'SWAHook',
    'TensorboardLogHook',
    'WandbLogHook',
]
