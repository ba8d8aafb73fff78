"""Datasets, the resumable sharded sampler, DataLoader construction and the per-sample TRANSFORMS."""

from scepter_like.data import cifar, conditions, datasets, geometry, image_files, loader, point_sets, tables  # noqa: F401
from scepter_like.data.registry import DATASETS

__all__ = ['DATASETS']
