"""``scepter.modules.utils.registry`` maps here: ``Registry`` is :class:`scepter_like.registry.Registry`
(a name only: scepter's ``build_func`` / ``common_para`` / ``allow_types`` arguments do not exist)."""

from scepter_like.registry import Registry

__all__ = ['Registry']
