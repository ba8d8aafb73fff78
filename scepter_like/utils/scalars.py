"""Running means of a step's scalar outputs, for the hooks that log them at an interval."""

import torch

from scepter_like.utils.distributed import all_reduce_sum


class ScalarSums:
    """Sums of each step's scalar outputs, kept on their device.

    ``add`` costs one in-place add per scalar and never syncs; ``means`` reads them all at
    once with one all-reduce (so every rank must call it at the same step) and starts over.
    """

    def __init__(self):
        self._sums = {}
        self._counts = {}  # per key: some scalars (grad_norm) come only on optimizer steps
        self.count = 0

    def add(self, outputs):
        sums, counts = self._sums, self._counts
        for key, value in outputs.items():
            if value.dim() == 0:
                if key in sums:
                    sums[key] += value
                    counts[key] += 1
                else:
                    sums[key] = value.float().clone()
                    counts[key] = 1
        self.count += 1

    def means(self, world_size=1):
        """``{name: mean over the steps since the last call and over all ranks}``; then resets."""
        names = list(self._sums)
        means = {}
        if names:
            sums = [self._sums[k] for k in names]
            if world_size > 1:  # one all-reduce for every key
                totals = all_reduce_sum(torch.stack(sums)).tolist()
            else:
                totals = [s.item() for s in sums]
            means = {k: total / (self._counts[k] * world_size) for k, total in zip(names, totals)}
        self._sums, self._counts, self.count = {}, {}, 0
        return means
