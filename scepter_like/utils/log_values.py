"""Scalar aggregation and progress text for log lines, under scepter's names ``LogAgg`` and ``time_since``."""

import math
import numbers
import time
from collections import OrderedDict

__all__ = ['LINE_KEYS', 'LogAgg', 'as_time', 'time_since']

# The keys a train line writes itself, beside the step's scalars (the model's outputs, grad_norm): a scalar of
# one of these names would be shown twice or, for lr, hidden in metrics.jsonl (PhysicsInformedModel refuses
# PARAMETERS of these names).  Keep in step with LogHook._write_line.
LINE_KEYS = ('epoch', 'iter', 'step', 'lr', 'time', 'data', 'samples/s', 'FLOP/s', 'eta', 'mem')


class LogAgg:
    """Collect scalar values step by step; ``aggregate(n)`` gives ``{key: (mean of last n, mean of all)}``.

    Means are weighted by each update's ``count``.  Values that are not scalars (tensors
    or arrays with dimensions, strings) are skipped; a 0-d tensor costs one ``.item()``.
    ``reset()`` starts over.
    """

    def __init__(self):
        self.buffer = OrderedDict()
        self.counter = []

    def update(self, kv, count=1):
        for key, value in kv.items():
            if hasattr(value, 'ndim') and hasattr(value, 'item'):  # a tensor, numpy array or numpy scalar
                if value.ndim != 0:
                    continue
                value = value.item()
            elif not isinstance(value, numbers.Number) or isinstance(value, bool):
                continue
            self.buffer.setdefault(key, []).append((float(value), count))
        self.counter.append(count)

    @staticmethod
    def _mean(pairs):
        total = sum(count for _, count in pairs)
        return sum(value * count for value, count in pairs) / total if total else math.nan

    def aggregate(self, log_interval=1):
        """``{key: (weighted mean of the last log_interval values, weighted mean of all)}``."""
        recent = max(int(log_interval), 0)
        return OrderedDict(
            (key, (self._mean(pairs[-recent:] if recent else pairs), self._mean(pairs)))
            for key, pairs in self.buffer.items()
        )

    def reset(self):
        self.buffer.clear()
        self.counter.clear()


def as_time(seconds):
    """``'1hours 2mins 3secs'`` (scepter's words) for a number of seconds."""
    seconds = int(seconds)
    parts = []
    for unit, size in (('days', 86400), ('hours', 3600), ('mins', 60)):
        if seconds >= size:
            parts.append(f'{seconds // size}{unit}')
            seconds %= size
    parts.append(f'{seconds}secs')
    return ' '.join(parts)


def time_since(since, percent):
    """``'<elapsed> <percent>%(<time left>)'`` for a job ``percent`` (0..1] done that began at ``since``."""
    elapsed = time.time() - since
    left = elapsed / percent - elapsed if percent > 0 else math.inf
    left_text = as_time(left) if math.isfinite(left) else '?'
    return f'{as_time(elapsed)} {100 * percent:.2f}%({left_text})'
