"""Optimizers and LR schedulers from torch.optim, configured with upper-case keys."""

from scepter_like.opt import torch_builders  # noqa: F401  (registrations)
from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS

__all__ = ['LR_SCHEDULERS', 'OPTIMIZERS']
