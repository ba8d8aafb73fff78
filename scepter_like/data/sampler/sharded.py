"""A deterministic, resumable sampler that shards data across ranks, and scepter's LoopSampler.

Train mode (``pad=True``): each pass is a permutation seeded by ``seed + pass``; it is
padded with its own first indices to a multiple of the world size, so every rank gets
the same number of samples and hence of batches (no rank waits on a collective another
never reaches).  Eval mode (``pad=False``): rank ``r`` takes indices ``r, r + W, ...``
with no duplicate, so metrics reduced from sums and counts count each sample once.

It is iterated one of two ways.  The solver's loop sets a window first (``set_window(start,
stop)``): an iteration covers that slice of this rank's pass, for NUM_FOLDS, MAX_STEPS and a
mid-epoch resume without loading skipped batches.  scepter's loops iterate
``DataBundle.dataloader``, which opens the pass whole (``open_pass``): an iteration yields
the rest of the current pass from where a resumed epoch goes on (``resume_at``, the first
iteration only), and a LoopSampler's goes on through the passes after it, without end.
"""

import sys

import torch
from torch.utils.data import Sampler

from scepter_like.data.sampler.registry import SAMPLERS


class ShardedSampler(Sampler):
    loops = False  # opened whole, the passes after the current one follow it (LoopSampler)

    def __init__(self, num_samples, num_replicas=1, rank=0, shuffle=True, seed=0, pad=True, drop_last=False):
        self.num_samples = num_samples
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.pad = pad
        self.drop_last = drop_last
        self.epoch = 0
        self._window = (0, None)  # None: the pass opened whole (open_pass)
        self._resume = 0  # where the next whole-pass iteration starts in this rank's indices
        self._rank_indices = None  # (the pass's order key, this rank's indices)

    def set_epoch(self, epoch):
        """Pick the permutation of pass ``epoch`` (DistSamplerHook calls this)."""
        self.epoch = epoch

    def set_window(self, start, stop=None):
        """The next iterations cover this rank's indices ``[start, stop)`` of the current pass (the solver's loop)."""
        self._window, self._resume = (start, stop), 0

    def open_pass(self):
        """The next iterations cover the current pass whole, the first from where ``resume_at`` placed it."""
        self._window = None

    def resume_at(self, start):
        """The next whole-pass iteration starts at this rank's index ``start`` of the current pass (where a resumed
        epoch goes on; a LoopSampler's may lie in a later pass); the ones after it start at 0."""
        self._resume = start

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
            self._rank_indices = (key, self._indices(self.epoch))
        return self._rank_indices[1]

    def _indices(self, epoch):
        """This rank's indices for pass ``epoch``."""
        return self._pass_order(epoch)[self.rank :: self.num_replicas]

    def rows_of_ranks(self):
        """The dataset index of each row of the current pass gathered in rank order (rank 0's rows, then rank 1's,
        ...): unshuffled and unpadded (eval and test), ``0, W, 2W, ..., 1, W + 1, ...``."""
        order = self._pass_order(self.epoch)
        return torch.cat([order[rank :: self.num_replicas] for rank in range(self.num_replicas)])

    def _pass_order(self, epoch):
        """The indices of pass ``epoch`` (padded to a multiple of the world size), which the ranks take in turn."""
        n, w = self.num_samples, self.num_replicas
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + epoch)
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        if self.pad:
            total = self.rank_length() * w
            if total > n:
                reps = -(-total // n)
                order = order.repeat(reps)
            order = order[:total]
        return order

    def window_indices(self):
        """This rank's indices for the current pass within the window (``set_window``), as one tensor."""
        start, stop = self._window
        return self.rank_indices()[start:stop]

    def __iter__(self):
        if self._window is not None:
            return iter(self.window_indices().tolist())
        start, self._resume = self._resume, 0
        return self._passes(start) if self.loops else iter(self.rank_indices()[start:].tolist())

    def _passes(self, start):
        """This rank's indices from ``start`` of the current pass on, then those of each pass after it."""
        skipped, start = divmod(start, self.rank_length())
        epoch = self.epoch + skipped
        while True:
            yield from self._indices(epoch)[start:].tolist()
            epoch, start = epoch + 1, 0

    def __len__(self):
        if self._window is None:
            return sys.maxsize if self.loops else max(self.rank_length() - self._resume, 0)
        start, stop = self._window
        return len(range(self.rank_length())[start:stop])


@SAMPLERS.register_class()
class LoopSampler(ShardedSampler):
    """scepter's endless train sampler, named by a data config (``SAMPLER: {NAME: LoopSampler}``); the loader builds it.

    Iterating ``DataBundle.dataloader`` then yields pass after pass, each shuffled anew
    (``seed + pass``) and sharded over the ranks, so a loop that draws ``next(...)`` MAX_STEPS
    times never runs out.  scepter's draws random indices without passes; this one keeps
    them, so that a resumed run continues at the very batch.  The solver's own loop already
    goes pass after pass (one an epoch): for it nothing changes.
    """

    para_dict = {}
    loops = True
