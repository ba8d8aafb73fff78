"""A dataset whose items go through a data config's TRANSFORMS, each sample with its own generator.

The random transforms of sample ``index`` in pass ``p`` draw from ``sample_random(seed, p,
index)``: a pure function of the data seed, the pass and the index, never of the worker
process, the batch or the order the sampler gives.  So a run's augmentations are the same
with 0 or 8 workers, and a run resumed mid-epoch sees exactly the samples the interrupted
one would have seen.  The pipeline runs where the item is loaded, i.e. in the DataLoader's
workers.
"""

import random
from collections.abc import Mapping

import torch

from scepter_like.data.collate import not_a_dict
from scepter_like.errors import DataError

_SEED_MASK = (1 << 64) - 1  # ENV.SEED as 64 bits (a negative seed too), above 32 bits of pass and 32 of index


def sample_random(seed, pass_index, index):
    """The generator of sample ``index`` in pass ``pass_index`` of a run seeded ``seed`` (one integer key each)."""
    return random.Random(((seed & _SEED_MASK) << 64) | (pass_index << 32) | index)


class TransformedDataset(torch.utils.data.Dataset):
    """``pipeline(dataset[index], sample_random(seed, pass, index))``; ``set_epoch`` picks the pass.

    A pipeline without random transforms (``RANDOM`` false) is called with the item alone.
    """

    def __init__(self, dataset, pipeline, seed, source):
        self.dataset = dataset
        self.pipeline = pipeline
        self.random = getattr(pipeline, 'RANDOM', False)
        self.seed = seed
        self.source = source  # names the data config in errors
        self.pass_index = 0

    def set_epoch(self, pass_index):
        self.pass_index = pass_index
        if hasattr(self.dataset, 'set_epoch'):
            self.dataset.set_epoch(pass_index)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        item = self.dataset[index]
        if not isinstance(item, Mapping):
            raise not_a_dict(self.source, item)
        try:
            if not self.random:  # no transform draws: no generator to make
                return self.pipeline(item)
            return self.pipeline(item, sample_random(self.seed, self.pass_index, index))
        except DataError as e:
            raise DataError(f'{e} (item {index})') from e
