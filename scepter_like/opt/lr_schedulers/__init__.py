"""``scepter.modules.opt.lr_schedulers`` maps here: LR_SCHEDULERS and scepter's ``BaseScheduler``."""

from scepter_like.opt.lr_schedulers.base_scheduler import BaseScheduler
from scepter_like.opt.lr_schedulers.registry import LR_SCHEDULERS, build_lr_scheduler

__all__ = ['LR_SCHEDULERS', 'BaseScheduler', 'build_lr_scheduler']
