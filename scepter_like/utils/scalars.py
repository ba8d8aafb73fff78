"""Running means of a step's scalar outputs, for the hooks that log them at an interval."""

import collections
import math

import torch

from scepter_like.utils.distributed import all_reduce_sum


def is_scalar(value):
    """A number or a one-element tensor: what an epoch's outputs keep as a float."""
    return isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)


class ScalarSums:
    """Each key's mean over the steps since the last ``take``, over all ranks.

    ``add`` only keeps a reference to each scalar (no tensor operation per step); the
    scalars must stay as they were at their step, which the solver's ``iter_outputs``
    guarantee (``loop_state.detached_outputs``).
    """

    def __init__(self):
        self._values = collections.defaultdict(list)  # key -> its scalars since the last take
        self.count = 0

    def add(self, outputs):
        """Keep this step's 0-dim tensors; other outputs (an eval step's EXTRA_KEYS: tensors of values, lists of
        ``meta`` strings) are no scalars to average."""
        values = self._values
        for key, value in outputs.items():
            if isinstance(value, torch.Tensor) and value.dim() == 0:  # grad_norm only on optimizer steps: counts differ
                values[key].append(value)
        self.count += 1

    def take(self, world_size=1):
        """``{name: mean over the interval's steps and all ranks}``; then starts over.

        Under DDP this all-reduces (every rank must call it at the same step).
        """
        lists, self._values, self.count = self._values, collections.defaultdict(list), 0
        if not lists:
            return {}
        counts = [len(values) * world_size for values in lists.values()]
        if next(iter(lists.values()))[0].device.type == 'cpu':  # a load per scalar; one tensor only under DDP
            sums = [math.fsum(map(torch.Tensor.item, values)) for values in lists.values()]
            if world_size > 1:
                sums = all_reduce_sum(torch.tensor(sums, dtype=torch.float64)).tolist()
        else:  # per-key sums on the device, one all-reduce, one copy to the host
            sums = all_reduce_sum(torch.stack([torch.stack(values).double().sum() for values in lists.values()]))
            sums = sums.tolist()
        return {key: total / count for key, total, count in zip(lists, sums, counts)}
