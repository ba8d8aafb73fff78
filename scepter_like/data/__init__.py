"""Datasets, the resumable sharded sampler and DataLoader construction."""

from scepter_like.data import collocation, datasets, tables  # noqa: F401  (registers the generic datasets)
from scepter_like.data.registry import DATASETS

__all__ = ['DATASETS']
