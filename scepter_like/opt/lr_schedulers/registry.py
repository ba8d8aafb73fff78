"""The one LR_SCHEDULERS registry, and the builder that takes both shapes of entry.

This project's entries are built with the optimizer (``entry(cfg, logger=..., optimizer=...)``);
scepter's are :class:`BaseScheduler` subclasses, built from the config and then called
with the optimizer.
"""

from scepter_like.opt.lr_schedulers.base_scheduler import BaseScheduler
from scepter_like.opt.registry import LR_SCHEDULERS, build_attached

__all__ = ['LR_SCHEDULERS', 'build_lr_scheduler']


def build_lr_scheduler(cfg, optimizer, logger=None, where=None):
    """The LR scheduler ``cfg`` (at ``where``) names, attached to ``optimizer``, whichever shape its entry has."""
    return build_attached(LR_SCHEDULERS, BaseScheduler, cfg, optimizer, 'optimizer', logger, where)
