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
        if not lists:
            return IntervalMeans({}, None, world_size)
        device = next(iter(lists.values()))[0].device
        if world_size == 1 and device.type == 'cpu':  # read each scalar when asked: a load each
            return IntervalMeans(lists, None, world_size)
        sums = torch.stack([torch.stack(values).double().sum() for values in lists.values()])
        return IntervalMeans(lists, all_reduce_sum(sums), world_size)


class IntervalMeans:
    """One interval's means, read on demand: a CPU scalar is a load, a device sum one copy to the host."""

    __slots__ = ('_lists', '_sums', '_world_size')

    def __init__(self, lists, sums, world_size):
        self._lists, self._sums, self._world_size = lists, sums, world_size

    def read(self):
        """``{name: mean over the interval's steps and all ranks}``."""
        lists = self._lists
        if self._sums is None:
            sums = [math.fsum(map(torch.Tensor.item, values)) for values in lists.values()]
        else:
            sums = self._sums.tolist()
        return {k: total / (len(values) * self._world_size) for (k, values), total in zip(lists.items(), sums)}
