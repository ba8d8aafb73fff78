"""OPTIMIZERS and LR_SCHEDULERS: every torch.optim class by name."""

from scepter_like.registry import Registry

OPTIMIZERS = Registry('OPTIMIZERS')
LR_SCHEDULERS = Registry('LR_SCHEDULERS')
