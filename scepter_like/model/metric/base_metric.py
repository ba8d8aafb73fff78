"""scepter's metric base: a callable over the whole evaluation pass.

A scepter metric is called once per evaluation with the tensors its ``KEYS`` name
(gathered from every batch) and returns ``{name: value}``.  This project's own metrics
(:class:`scepter_like.metric.base.Metric`) accumulate sums per batch instead; the solver
runs both shapes.  ``KEYS`` is declared here, once, with the same entry as there.
"""

from scepter_like.metric.base import Metric

__all__ = ['BaseMetric']


class BaseMetric:
    """Subclass it, declare ``para_dict`` (either form) and write ``__call__(*tensors)``."""

    para_dict = {'KEYS': Metric.para_dict['KEYS']}

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} must define __call__(*tensors named by KEYS) -> dict')

    def __repr__(self):
        return type(self).__name__
