"""Errors of a predicted field against a reference solution at the same points (PINN evaluation)."""

import torch

from scepter_like.errors import DataError
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS


class FieldError(Metric):
    """The base of the field errors: KEYS (prediction, reference) and COMPONENT, the output compared.

    With COMPONENT ``k`` the metric reads column ``k`` only and reports ``<name>_<prediction key><k>``
    (``relative_l2_u1``), so one instance per output of a system gives each its own name (for SAVE_BEST_BY);
    with null it compares every output and reports ``<name>``.
    """

    para_dict = {
        'KEYS': {'value': ['u', 'u_exact'], 'description': 'the prediction key, then the reference key'},
        'COMPONENT': {
            'value': None,
            'type': (int, type(None)),
            'min': 0,
            'description': 'the output compared, of a field with several (null: all); named in the metric',
        },
    }
    base_name = ''

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.component = cfg.COMPONENT
        self.name = self.base_name if self.component is None else f'{self.base_name}_{self.keys[0]}{self.component}'
        self.lower_is_better = (self.name,)

    def output_names(self):
        return [self.name]

    def pair(self, data):
        """Prediction and reference as float64 ``[N, outputs]`` (or the COMPONENT column)."""
        pred, ref = self.inputs(data)
        pred = pred.detach().to(torch.float64)
        ref = ref.detach().to(torch.float64).view_as(pred)
        if self.component is None:
            return pred, ref
        outputs = pred.shape[1] if pred.dim() == 2 else 1
        if self.component >= outputs:
            raise DataError(
                f'{self.cfg.path_of("COMPONENT")}: {self.keys[0]!r} has {outputs} output(s) per point, counted from 0;'
                f' COMPONENT {self.component} is not one of them'
            )
        return pred.reshape(len(pred), -1)[:, self.component], ref.reshape(len(ref), -1)[:, self.component]


@METRICS.register_class()
class RelativeL2Error(FieldError):
    """Reports ``relative_l2``: ``||pred - ref||_2 / ||ref||_2`` over every point of every rank."""

    state_names = ('sq_err', 'sq_ref')
    base_name = 'relative_l2'

    def update(self, data):
        pred, ref = self.pair(data)
        self.accumulate(torch.stack([(pred - ref).pow(2).sum(), ref.pow(2).sum()]))

    def finish(self, sums):
        if sums['sq_ref'] == 0:
            return {self.name: float('inf') if sums['sq_err'] > 0 else 0.0}
        return {self.name: (sums['sq_err'] / sums['sq_ref']) ** 0.5}


@METRICS.register_class()
class MaxAbsError(FieldError):
    """Reports ``max_abs_error``: the largest ``|pred - ref|`` over every point of every rank."""

    state_names = ('max_abs',)
    base_name = 'max_abs_error'
    reduction = 'max'

    def update(self, data):
        pred, ref = self.pair(data)
        self.accumulate((pred - ref).abs().max().reshape(1))

    def finish(self, sums):
        return {self.name: sums['max_abs']}
