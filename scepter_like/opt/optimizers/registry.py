"""The one OPTIMIZERS registry, and the builder that takes both shapes of entry.

This project's entries are built with the parameters (``entry(cfg, logger=..., params=...)``);
scepter's are :class:`BaseOptimize` subclasses, built from the config and then called
with the parameters.
"""

from scepter_like.opt.optimizers.base_optimizer import BaseOptimize
from scepter_like.opt.registry import OPTIMIZERS, build_attached

__all__ = ['OPTIMIZERS', 'build_optimizer']


def build_optimizer(cfg, parameters, logger=None, where=None):
    """The optimizer ``cfg`` (at ``where``) names over ``parameters``, whichever shape its entry has."""
    return build_attached(OPTIMIZERS, BaseOptimize, cfg, parameters, 'params', logger, where)
