"""scepter's metric shape in this project's evaluation: one call over the whole pass.

A scepter metric (``BaseMetric``: ``fn(*tensors) -> {name: value}``) needs every batch's
tensors at once.  :class:`PassCollector` keeps the tensors that KEYS name, batch by batch,
on the CPU, and gathers them from every rank; :class:`WholePassMetric` gives such a
callable the interface of this project's metrics (``reset`` / ``update`` / ``compute``),
so TrainValSolver runs both shapes side by side.
"""

import torch

from scepter_like.errors import DataError
from scepter_like.metric.base import missing_keys
from scepter_like.utils.distributed import all_gather_object


class PassCollector:
    """The values of ``keys`` over an evaluation pass: tensors concatenated, lists joined, in dataset order.

    Rank ``r`` of ``W`` evaluates samples ``r, r + W, ...`` (the loader's sampler), so the ranks' rows joined in rank
    order would differ from one process's order; ``gathered`` puts a key's rows back in dataset order when it holds
    one row per sample.  A key with another number of rows (one value a batch) stays in rank order (as scepter's
    ``gather_data`` joins everything).
    """

    def __init__(self, keys, owner):
        self.keys = list(keys)
        self.owner = owner
        self.parts = {key: [] for key in self.keys}
        self.sampler = None  # the pass's sampler: which sample each rank's rows are of

    def reset(self, sampler=None):
        """A new pass over the data ``sampler`` deals out to the ranks (None: rows kept in rank order)."""
        self.parts = {key: [] for key in self.keys}
        self.sampler = sampler

    def update(self, data):
        missing = [k for k in self.keys if k not in data]
        if missing:
            raise missing_keys(self.owner, missing, data)
        for key in self.keys:
            value = data[key]
            self.parts[key].append(value.detach().cpu() if isinstance(value, torch.Tensor) else value)

    def gathered(self):
        """``{key: value over the pass on every rank}`` (every rank gets all of it)."""
        local = {key: _joined(parts) for key, parts in self.parts.items()}
        ranks = all_gather_object(local)
        data = {key: _joined([rank[key] for rank in ranks if rank[key] is not None]) for key in self.keys}
        rows = getattr(self.sampler, 'rows_of_ranks', None)  # (a SAMPLERS entry of a user's may lack it)
        if rows is None or len(ranks) == 1:
            return data
        positions = torch.argsort(rows())  # row i of dataset order is row positions[i] of rank order
        return {key: _reordered(value, positions) for key, value in data.items()}


def _reordered(value, positions):
    """``value``'s rows at ``positions``, when it has one row per sample; otherwise as it is."""
    if value is None or len(value) != len(positions):
        return value
    return value[positions] if isinstance(value, torch.Tensor) else [value[i] for i in positions.tolist()]


def _joined(parts):
    if not parts:
        return None
    if all(isinstance(p, torch.Tensor) for p in parts):
        return torch.cat([p.reshape(1) if p.dim() == 0 else p for p in parts])
    return [item for p in parts for item in (p if isinstance(p, (list, tuple)) else [p])]


class WholePassMetric:
    """A scepter metric callable run as one of this project's metrics (``metric_names`` known after a pass)."""

    def __init__(self, fn, keys):
        self.fn = fn
        self.label = getattr(fn, '__name__', type(fn).__name__)  # a function's name, else its class's
        self.collector = PassCollector(keys, self.label)
        self.names = None  # known once the metric ran

    @property
    def keys(self):
        """The keys it reads, as a Metric's."""
        return self.collector.keys

    def reset(self, sampler=None):
        self.collector.reset(sampler)

    def update(self, data):
        self.collector.update(data)

    def output_names(self):
        return self.names

    def compute(self, device=None):
        data = self.collector.gathered()
        out = self.fn(*[data[key] for key in self.collector.keys])
        if not isinstance(out, dict):
            raise DataError(f'{self.label} must return a dict of name: value, got {type(out).__name__}')
        values = {}
        for name, value in out.items():
            try:
                values[name] = float(value)
            except (TypeError, ValueError, RuntimeError):  # not one number (a tensor of several, a string)
                got = f'a tensor of shape {list(value.shape)}' if hasattr(value, 'shape') else type(value).__name__
                raise DataError(f'{self.label} returned {got} as {name!r}; a metric value is one number') from None
        self.names = list(values)
        return values
