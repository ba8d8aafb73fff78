"""scepter's optimizer shape: built from its config, then called with the parameters."""

__all__ = ['BaseOptimize']


class BaseOptimize:
    """Subclass it, declare ``para_dict`` and write ``__call__(parameters) -> torch optimizer``."""

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger

    def __call__(self, parameters):
        raise NotImplementedError(f'{type(self).__name__} must define __call__(parameters) -> an optimizer')
