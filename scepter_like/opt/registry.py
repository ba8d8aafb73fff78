"""OPTIMIZERS and LR_SCHEDULERS: every torch.optim class by name, and the builder both registries share."""

import inspect

from scepter_like.registry import Registry

OPTIMIZERS = Registry('OPTIMIZERS')
LR_SCHEDULERS = Registry('LR_SCHEDULERS')


def build_attached(registry, scepter_base, cfg, target, keyword, logger=None, where=None):
    """The entry ``cfg`` names in ``registry``, attached to ``target`` (the parameters, or the optimizer).

    This project's entries take ``target`` as the keyword ``keyword``; scepter's, subclasses
    of ``scepter_base``, are built from the config and then called with ``target``.  ``where``
    names the place of ``cfg`` (``Registry.resolve``).
    """
    entry, cfg = registry.resolve(cfg, where)
    if inspect.isclass(entry) and issubclass(entry, scepter_base):
        return registry.build(cfg, logger=logger)(target)
    return registry.build(cfg, logger=logger, **{keyword: target})
