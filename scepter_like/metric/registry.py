"""METRICS: metrics reduced exactly over all ranks from sums and counts."""

from scepter_like.registry import Registry

METRICS = Registry('METRICS')
