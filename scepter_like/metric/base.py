"""Metric base: state is a vector of sums (or maxima) kept on the device, reduced once per evaluation."""

import torch

from scepter_like.errors import ConfigError, DataError, class_of
from scepter_like.utils.distributed import all_reduce_max, all_reduce_sum


class Metric:
    """Accumulate per-batch sums with ``update``; ``compute`` all-reduces them and divides.

    Subclasses name their sums in ``state_names`` and turn the reduced sums into
    ``{metric name: float}`` in ``finish``.  With ``reduction = 'max'`` the state is a
    vector of running maxima of non-negative values instead (0 before any data).
    """

    para_dict = {'KEYS': {'value': [], 'description': 'output / batch keys the metric reads, in order'}}
    state_names = ()
    reduction = 'sum'  # 'sum' | 'max': how batches and ranks combine
    lower_is_better: tuple[str, ...] = ()  # outputs where less is better (errors): SAVE_BEST_BY and MONITOR follow

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger
        self.keys = list(cfg.KEYS)
        self._state = None

    def reset(self):
        self._state = None

    def inputs(self, data):
        missing = [k for k in self.keys if k not in data]
        if missing:
            raise missing_keys(type(self).__name__, missing, data)
        return [data[k] for k in self.keys]

    def accumulate(self, sums):
        """Add a 1-d tensor of sums (in ``state_names`` order) to the running state (or take maxima)."""
        sums = sums.detach().to(torch.float64)
        if self._state is None:
            self._state = sums
        else:
            self._state = self._state + sums if self.reduction == 'sum' else torch.maximum(self._state, sums)

    def update(self, data):
        raise NotImplementedError

    def __call__(self, *tensors):
        """scepter's metric call: the values over ``tensors`` (in KEYS order) alone, without a collective."""
        if len(tensors) != len(self.keys):
            raise DataError(f'{type(self).__name__} takes {len(self.keys)} tensors ({self.keys}), got {len(tensors)}')
        saved, self._state = self._state, None
        try:
            self.update(dict(zip(self.keys, tensors)))
            state = self._state if self._state is not None else torch.zeros(len(self.state_names))
            return self.finish(dict(zip(self.state_names, state.tolist())))
        finally:
            self._state = saved

    def output_names(self):
        """The names ``compute`` reports (known before any data is seen)."""
        raise NotImplementedError

    def compute(self, device=None):
        """Exact values over every rank's samples (an all-reduce when distributed)."""
        state = self._state
        if state is None:
            state = torch.zeros(len(self.state_names), dtype=torch.float64, device=device)
        state = (all_reduce_sum if self.reduction == 'sum' else all_reduce_max)(state.clone())
        return self.finish(dict(zip(self.state_names, state.tolist())))

    def finish(self, sums):
        raise NotImplementedError


def missing_keys(owner, missing, data):
    """The DataError of a metric whose KEYS name what a step's outputs lack."""
    return DataError(
        f'{owner} needs keys {missing} in the model outputs; it has {sorted(data)} (a batch key reaches the metrics'
        ' when SOLVER.EXTRA_KEYS lists it)'
    )


def checked_metric(metric, cfg):
    """``metric`` (built from ``cfg``) if it derives from Metric, else a ConfigError naming it and the contract."""
    if isinstance(metric, Metric):
        return metric
    raise ConfigError(
        f'{cfg.path}: METRICS.{cfg.get("NAME")} ({class_of(metric)}) does not derive from'
        ' scepter_like.metric.base.Metric; a metric names its sums in state_names, adds them per batch in'
        ' update(data), turns the reduced sums into {name: float} in finish(sums) and lists those names in'
        ' output_names() (docs/extending.md)'
    )
