"""Datasets, the resumable sharded sampler and DataLoader construction."""

from scepter_like.data import conditions, datasets, geometry, point_sets  # noqa: F401  (registers the built-ins)
from scepter_like.data.registry import DATASETS

__all__ = ['DATASETS']
