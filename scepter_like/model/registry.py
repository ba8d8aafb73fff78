"""MODELS (networks, classifiers, ...) and LOSSES.

scepter keeps backbones, necks and heads in registries of their own; here they are all
MODELS, and ``BACKBONES`` / ``NECKS`` / ``HEADS`` are other names for it, so a part
registered the scepter way is found wherever a MODELS config names it.  ``METRICS`` is
re-exported for scepter's ``from ...model.registry import METRICS``.
"""

from scepter_like.metric.registry import METRICS
from scepter_like.registry import Registry

MODELS = Registry('MODELS')
LOSSES = Registry('LOSSES')
BACKBONES = NECKS = HEADS = MODELS

__all__ = ['BACKBONES', 'HEADS', 'LOSSES', 'METRICS', 'MODELS', 'NECKS']
