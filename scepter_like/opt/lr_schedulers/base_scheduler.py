"""scepter's scheduler shape: built from its config, then called with the optimizer."""

__all__ = ['BaseScheduler']


class BaseScheduler:
    """Subclass it, declare ``para_dict`` and write ``__call__(optimizer) -> torch LR scheduler``."""

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger

    def __call__(self, optimizer):
        raise NotImplementedError(f'{type(self).__name__} must define __call__(optimizer) -> an LR scheduler')
