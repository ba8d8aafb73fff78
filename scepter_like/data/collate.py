"""Batch collation that lets datasets hand over ready-made batches."""

from torch.utils.data import default_collate


class BatchDict(dict):
    """A dict that already is a batch: collate passes it through unchanged."""


def collate(samples):
    """Pass a ``BatchDict`` through; otherwise torch's ``default_collate``."""
    if isinstance(samples, BatchDict):
        return samples
    return default_collate(samples)
