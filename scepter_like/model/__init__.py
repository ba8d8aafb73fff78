"""Generic networks, scepter's ResNet and classifier parts, a classifier, losses and loss aggregators."""

from scepter_like.model import classifier, loss_aggregators, losses, networks, resnet  # noqa: F401  (registrations)
from scepter_like.model.base import BaseModel
from scepter_like.model.registry import LOSSES, MODELS

__all__ = ['BaseModel', 'LOSSES', 'MODELS']
