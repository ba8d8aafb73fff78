"""Generic networks, a classifier and losses."""

from scepter_like.model import classifier, losses, networks  # noqa: F401  (registrations)
from scepter_like.model.base import BaseModel
from scepter_like.model.registry import LOSSES, MODELS

__all__ = ['BaseModel', 'LOSSES', 'MODELS']
