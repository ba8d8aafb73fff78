"""Running means of a step's scalar outputs, for the hooks that log them at an interval."""

import math

import torch

from scepter_like.utils.distributed import all_reduce_sum


class ScalarSums:
    """Each key's mean over the steps since the last ``means``, over all ranks.

    ``add`` only keeps a reference to each scalar: no tensor operation per step, which in
    a fast loop costs more than its own time.  The scalars must stay as they were at their
    step; the solver's ``iter_outputs`` are such snapshots (``BaseSolver._detached``).
    ``means`` reads them all (with one device-to-host copy off the CPU, and one
    all-reduce under DDP, so every rank must call it at the same step) and starts over.
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
            flat = [v for values in lists.values() for v in values]
            device = flat[0].device
            # on the CPU a read is a load; elsewhere one copy to the host for all of them
            read = [v.item() for v in flat] if device.type == 'cpu' else torch.stack(flat).tolist()
            counts = [len(values) for values in lists.values()]
            start, sums = 0, []
            for n in counts:
                sums.append(math.fsum(read[start : start + n]))
                start += n
            if world_size > 1:  # one all-reduce for every key
                sums = all_reduce_sum(torch.tensor(sums, dtype=torch.float64, device=device)).tolist()
            means = {k: total / (n * world_size) for k, total, n in zip(lists, sums, counts)}
        self._values, self.count = {}, 0
        return means
