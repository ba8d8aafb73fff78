"""MODELS (networks, classifiers, ...) and LOSSES."""

from scepter_like.registry import Registry

MODELS = Registry('MODELS')
LOSSES = Registry('LOSSES')
