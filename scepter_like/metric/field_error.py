"""Errors of a predicted field against a reference solution at the same points (PINN evaluation)."""

import torch

from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS


def _pair(metric, data):
    pred, ref = metric.inputs(data)
    pred = pred.detach().to(torch.float64)
    return pred, ref.detach().to(torch.float64).view_as(pred)


@METRICS.register_class()
class RelativeL2Error(Metric):
    """Reports ``relative_l2``: ``||pred - ref||_2 / ||ref||_2`` over every point of every rank."""

    para_dict = {'KEYS': {'value': ['u', 'u_exact'], 'description': 'the prediction key, then the reference key'}}
    state_names = ('sq_err', 'sq_ref')
    lower_is_better = ('relative_l2',)

    def update(self, data):
        pred, ref = _pair(self, data)
        self.accumulate(torch.stack([(pred - ref).pow(2).sum(), ref.pow(2).sum()]))

    def output_names(self):
        return ['relative_l2']

    def finish(self, sums):
        if sums['sq_ref'] == 0:
            return {'relative_l2': float('inf') if sums['sq_err'] > 0 else 0.0}
        return {'relative_l2': (sums['sq_err'] / sums['sq_ref']) ** 0.5}


@METRICS.register_class()
class MaxAbsError(Metric):
    """Reports ``max_abs_error``: the largest ``|pred - ref|`` over every point of every rank."""

    para_dict = {'KEYS': {'value': ['u', 'u_exact'], 'description': 'the prediction key, then the reference key'}}
    state_names = ('max_abs',)
    lower_is_better = ('max_abs_error',)
    reduction = 'max'

    def update(self, data):
        pred, ref = _pair(self, data)
        self.accumulate((pred - ref).abs().max().reshape(1))

    def output_names(self):
        return ['max_abs_error']

    def finish(self, sums):
        return {'max_abs_error': sums['max_abs']}
