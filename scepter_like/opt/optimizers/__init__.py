"""``scepter.modules.opt.optimizers`` maps here: OPTIMIZERS and scepter's ``BaseOptimize``."""

from scepter_like.opt.optimizers.base_optimizer import BaseOptimize
from scepter_like.opt.optimizers.registry import OPTIMIZERS, build_optimizer

__all__ = ['OPTIMIZERS', 'BaseOptimize', 'build_optimizer']
