"""``scepter.modules.model.metric`` maps here: METRICS and scepter's callable ``BaseMetric``."""

from scepter_like.model.metric.base_metric import BaseMetric
from scepter_like.model.metric.registry import METRICS

__all__ = ['METRICS', 'BaseMetric']
