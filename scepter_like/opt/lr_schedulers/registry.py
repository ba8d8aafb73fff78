"""The one LR_SCHEDULERS registry, and the builder that takes both shapes of entry.

This project's entries are built with the optimizer (``entry(cfg, logger=..., optimizer=...)``);
scepter's are :class:`BaseScheduler` subclasses, built from the config and then called
with the optimizer.
"""

import inspect

from scepter_like.opt.lr_schedulers.base_scheduler import BaseScheduler
from scepter_like.opt.registry import LR_SCHEDULERS

__all__ = ['LR_SCHEDULERS', 'build_lr_scheduler']


def build_lr_scheduler(cfg, optimizer, logger=None):
    """The LR scheduler ``cfg`` names, attached to ``optimizer``, whichever shape its entry has."""
    entry, cfg = LR_SCHEDULERS.resolve(cfg)
    if inspect.isclass(entry) and issubclass(entry, BaseScheduler):
        return LR_SCHEDULERS.build(cfg, logger=logger)(optimizer)
    return LR_SCHEDULERS.build(cfg, logger=logger, optimizer=optimizer)
