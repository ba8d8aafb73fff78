"""Batch collation that lets datasets hand over ready-made batches."""

from collections.abc import Mapping

import torch
from torch.utils.data import default_collate

from scepter_like.errors import DataError


class BatchDict(dict):
    """A dict that already is a batch: collate passes it through unchanged."""


class DictCollate:
    """The loaders' collate: a ``BatchDict`` passes through; dict items go through torch's ``default_collate``,
    their floating values cast to ``dtype`` (numpy's float64 items for a float32 model).

    ``source`` names the dataset in the error (``DATASETS.X (module.Class) at SOLVER.TRAIN_DATA``),
    since the model call ``model(**batch)`` needs named fields.  One isinstance per batch.
    """

    def __init__(self, source, dtype=None):
        self.source = source
        self.dtype = dtype  # floating tensors of a batch come out in it (the model's: SOLVER.DTYPE)

    def __call__(self, samples):
        if isinstance(samples, BatchDict):
            return samples
        if samples and not isinstance(samples[0], Mapping):
            raise DataError(
                f'{self.source} returns {type(samples[0]).__name__} items; its __getitem__ must return a dict of'
                " named fields (the model is called as model(**batch)), e.g. {'img': x, 'label': y}"
            )
        batch = default_collate(samples)
        if self.dtype is not None:
            for key, value in batch.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != self.dtype:
                    batch[key] = value.to(self.dtype)
        return batch
