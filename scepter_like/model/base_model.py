"""``scepter.modules.model.base_model`` maps here: ``BaseModel`` is :class:`scepter_like.model.base.BaseModel`."""

from scepter_like.model.base import BaseModel

__all__ = ['BaseModel']
