"""The pass means of the scalars an eval / test step returns that no metric reads (``val_loss``).

A model's eval forward may return 0-dim tensors beside what its METRICS read (Lightning users
return ``val_loss``).  Without this they would be lost: TrainValSolver averages each over the
pass, weighted by the samples of its batch and over every rank (exact, as the metrics are:
one all-reduce of the sums and sample counts), and reports it under its own name beside the
metrics' values: the pass's log line, ``epoch_outputs``, ``metrics.jsonl``, and what
SAVE_BEST_BY, MONITOR or a search's METRIC may name.
"""

import torch

from scepter_like.utils.distributed import all_gather_object, all_reduce_sum, is_dist


def batch_samples(batch):
    """The samples in ``batch``: the length of its first tensor of samples (1 without one)."""
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim():
            return len(value)
    return 1


class OutputMeans:
    """Sums of ``samples * value`` and of ``samples`` per output name over one pass (``reset`` starts one)."""

    def __init__(self, read_by_metrics):
        self.read_by_metrics = frozenset(read_by_metrics)  # the metrics' KEYS: those outputs are theirs
        self.seen = {}  # every name averaged so far, or learnt from a step (``learn``), in order
        self._sums = {}  # name -> [sum of samples * value (a float64 0-dim tensor), samples]

    @property
    def lower_is_better(self):
        """The names where less is better, as a metric declares its own: those that name a loss (``val_loss``)."""
        return tuple(name for name in self.seen if 'loss' in name)

    def learn(self, results):
        """Take the names a step's ``results`` hold that this averages, before any pass has run; under DDP those of
        every rank's step (every rank calls it: a rank without eval batches has no step)."""
        names = [k for k, v in results.items() if self._averaged(k, v)]
        self.seen.update(dict.fromkeys(_on_any_rank(names)))

    def _averaged(self, key, value):
        return isinstance(value, torch.Tensor) and value.dim() == 0 and key not in self.read_by_metrics

    def reset(self):
        self._sums = {}

    def update(self, results, samples):
        """Add a step's scalars, each weighted by the ``samples`` of its batch."""
        for key, value in results.items():
            if self._averaged(key, value):
                weighted = value.detach().to(torch.float64) * samples
                if key in self._sums:
                    entry = self._sums[key]
                    entry[0], entry[1] = entry[0] + weighted, entry[1] + samples
                else:
                    self._sums[key] = [weighted, samples]
                    self.seen[key] = None

    def compute(self, device=None):
        """``{name: mean over the pass}`` over every rank (the names any rank saw, in the order first seen)."""
        names = _on_any_rank(list(self._sums))
        if not names:
            return {}
        zero = torch.zeros((), dtype=torch.float64, device=device)
        sums = [self._sums[k][0].to(device) if k in self._sums else zero for k in names]
        counts = [torch.tensor(float(self._sums[k][1] if k in self._sums else 0), device=device) for k in names]
        totals = all_reduce_sum(torch.stack(sums + counts).to(torch.float64)).tolist()
        return {k: s / n for k, s, n in zip(names, totals, totals[len(names) :]) if n}


def _on_any_rank(names):
    """``names`` joined with every rank's (under DDP, in rank order, each once)."""
    if not is_dist():
        return names
    return list(dict.fromkeys(name for seen in all_gather_object(names) for name in seen))
