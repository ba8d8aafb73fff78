"""ArrayDataset batches served without the DataLoader's per-batch machinery are the same batches."""

import numpy as np
import pytest
import torch

from scepter_like.config import Config
from scepter_like.data.loader import build_data
from scepter_like.utils.distributed import DistInfo


def _bundle(tmp_path, mode='train', world=1, rank=0, **loader_keys):
    rng = np.random.default_rng(0)
    path = tmp_path / 'data.npz'
    np.savez(path, x=rng.normal(size=(50, 3)).astype(np.float32), y=np.arange(50))
    cfg = Config({'NAME': 'NpzDataset', 'PATH': str(path), 'KEY_MAP': {'x': 'img', 'y': 'label'}, **loader_keys})
    return build_data(cfg, mode, DistInfo(rank=rank, world_size=world), seed=3)


def _batches(iterator):
    return [{k: v.clone() for k, v in batch.items()} for batch in iterator]


@pytest.mark.parametrize(
    ('mode', 'world', 'rank', 'keys', 'window'),
    [
        ('train', 1, 0, {'BATCH_SIZE': 8}, (0, None)),
        ('train', 1, 0, {'BATCH_SIZE': 8, 'DROP_LAST': True}, (0, None)),
        ('train', 2, 1, {'BATCH_SIZE': 7}, (1, 3)),
        ('eval', 3, 2, {'BATCH_SIZE': 4}, (0, None)),
    ],
)
def test_direct_batches_equal_dataloader_batches(tmp_path, mode, world, rank, keys, window):
    bundle = _bundle(tmp_path, mode, world, rank, **keys)
    assert bundle._direct  # NpzDataset, no workers, no pinning: the fast path is taken
    for epoch in (0, 1):
        bundle.sampler.set_epoch(epoch)
        direct = _batches(bundle.iterate(*window))
        reference = _batches(iter(bundle.loader))  # same window and epoch, through the DataLoader
        assert len(direct) == len(reference) > 0
        for got, want in zip(direct, reference):
            assert got.keys() == want.keys()
            for key in want:
                assert torch.equal(got[key], want[key])
    start, stop = window
    assert len(direct) == (stop if stop is not None else bundle.num_batches()) - start


def test_workers_use_the_dataloader(tmp_path):
    assert not _bundle(tmp_path, NUM_WORKERS=1)._direct
