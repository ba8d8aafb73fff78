"""A deterministic, resumable sampler that shards data across ranks.

Train mode (``pad=True``): each pass is a permutation seeded by ``seed + pass``; it is
padded with its own first indices to a multiple of the world size, so every rank gets
the same number of samples and hence of batches (no rank waits on a collective another
never reaches).  Eval mode (``pad=False``): rank ``r`` takes indices ``r, r + W, ...``
with no duplicate, so metrics reduced from sums and counts count each sample once.

``set_window(start, stop)`` restricts one iteration to a slice of this rank's list: the
solver uses it for NUM_FOLDS and to resume mid-epoch without loading skipped batches.
"""

import torch
from torch.utils.data import Sampler


class ShardedSampler(Sampler):
    def __init__(self, num_samples, num_replicas=1, rank=0, shuffle=True, seed=0, pad=True, drop_last=False):
        self.num_samples = num_samples
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.pad = pad
        self.drop_last = drop_last
        self.epoch = 0
        self._window = (0, None)
        self._rank_indices = None  # (the pass's order key, this rank's indices)

    def set_epoch(self, epoch):
        """Pick the permutation of pass ``epoch`` (DistSamplerHook calls this)."""
        self.epoch = epoch

    def set_window(self, start, stop=None):
        self._window = (start, stop)

    def rank_length(self):
        """How many indices this rank gets in a whole pass."""
        n, w = self.num_samples, self.num_replicas
        if not self.pad:
            return len(range(self.rank, n, w))
        return n // w if self.drop_last else -(-n // w)

    def rank_indices(self):
        """This rank's indices for the current pass (no window); kept while the pass's order stays the same."""
        key = (self.seed, self.epoch) if self.shuffle else None  # without shuffling every pass has one order
        if self._rank_indices is None or self._rank_indices[0] != key:
            self._rank_indices = (key, self._indices())
        return self._rank_indices[1]

    def _indices(self):
        n, w = self.num_samples, self.num_replicas
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        if self.pad:
            total = self.rank_length() * w
            if total > n:
                reps = -(-total // n)
                order = order.repeat(reps)
            order = order[:total]
        return order[self.rank :: w]

    def window_indices(self):
        """This rank's indices for the current pass within the window, as one tensor."""
        start, stop = self._window
        return self.rank_indices()[start:stop]

    def __iter__(self):
        return iter(self.window_indices().tolist())

    def __len__(self):
        start, stop = self._window
        return len(range(self.rank_length())[start:stop])
