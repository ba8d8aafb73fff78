"""Running means of a step's scalar outputs, for the hooks that log them at an interval."""

import collections
import math

import torch

from scepter_like.utils.distributed import all_reduce_sum


class ScalarSums:
    """Each key's mean over the steps since the last ``take``, over all ranks.

    ``add`` only keeps a reference to each scalar: no tensor operation per step, which in
    a fast loop costs more than its own time.  The scalars must stay as they were at their
    step; the solver's ``iter_outputs`` are such snapshots (``BaseSolver._detached``).
    """

    def __init__(self):
        self._values = collections.defaultdict(list)  # key -> its scalars since the last take
        self.count = 0

    def add(self, outputs):
        values = self._values
        for key, value in outputs.items():
            if value.dim() == 0:  # grad_norm only on optimizer steps: keys may differ in count
                values[key].append(value)
        self.count += 1

    def take(self, world_size=1):
        """The interval so far as ``IntervalMeans``, to read now or later; then starts over.

        Under DDP this all-reduces (every rank must call it at the same step); nothing here
        waits for the device: only ``IntervalMeans.read`` copies to the host.
        """
        lists, self._values, self.count = self._values, collections.defaultdict(list), 0
        counts = {key: len(values) * world_size for key, values in lists.items()}
        if not lists:
            return IntervalMeans(counts, [])
        device = next(iter(lists.values()))[0].device
        if world_size == 1 and device.type == 'cpu':  # read each scalar when asked: a load each
            return IntervalMeans(counts, list(lists.values()))
        sums = torch.stack([torch.stack(values).double().sum() for values in lists.values()])
        return IntervalMeans(counts, all_reduce_sum(sums))


class IntervalMeans:
    """One interval's means, read on demand: a CPU scalar is a load, the device sums one copy to the host."""

    __slots__ = ('_counts', '_values')

    def __init__(self, counts, values):
        self._counts = counts  # key -> its values over the interval and all ranks
        self._values = values  # the CPU scalars (a list per key), or the per-key sums as one tensor

    def read(self):
        """``{name: mean over the interval's steps and all ranks}``."""
        values = self._values
        if isinstance(values, list):
            sums = [math.fsum(map(torch.Tensor.item, scalars)) for scalars in values]
        else:
            sums = values.tolist()
        return {key: total / count for (key, count), total in zip(self._counts.items(), sums)}
