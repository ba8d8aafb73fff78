"""Running means of a step's scalar outputs, for the hooks that log them at an interval."""

import math

import torch

from scepter_like.utils.distributed import all_reduce_sum


class ScalarSums:
    """Each key's mean over the steps since the last ``means``, over all ranks.

    ``add`` only keeps a reference to each scalar: no tensor operation per step, which in
    a fast loop costs more than its own time.  The scalars must stay as they were at their
    step; the solver's ``iter_outputs`` are such snapshots (``BaseSolver._detached``).
    ``means`` reads them all (one process on the CPU: a load each; otherwise one
    all-reduce and one copy to the host for every key, so under DDP every rank must call
    it at the same step) and starts over.
    """

    def __init__(self):
        self._values = {}  # key -> its scalars since the last means (grad_norm comes only on optimizer steps)
        self.count = 0

    def add(self, outputs):
        values = self._values
        for key, value in outputs.items():
            if value.dim() == 0:
                if key in values:
                    values[key].append(value)
                else:
                    values[key] = [value]
        self.count += 1

    def means(self, world_size=1):
        """``{name: mean over the steps since the last call and over all ranks}``; then resets."""
        lists, means = self._values, {}
        if lists:
            device = next(iter(lists.values()))[0].device
            if world_size == 1 and device.type == 'cpu':  # a read is a load
                sums = [math.fsum(v.item() for v in values) for values in lists.values()]
            else:  # one all-reduce and one copy to the host for every key
                sums = torch.stack([torch.stack(values).double().sum() for values in lists.values()])
                sums = all_reduce_sum(sums).tolist()
            means = {k: total / (len(values) * world_size) for (k, values), total in zip(lists.items(), sums)}
        self._values, self.count = {}, 0
        return means
