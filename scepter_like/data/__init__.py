"""Datasets, the resumable sharded sampler, DataLoader construction and the per-sample TRANSFORMS."""

from scepter_like.data import cifar, collocation, datasets, image_files, tables  # noqa: F401  (registers the datasets)
from scepter_like.data.registry import DATASETS

__all__ = ['DATASETS']
