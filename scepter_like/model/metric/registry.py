"""``scepter.modules.model.metric.registry`` maps here: the one METRICS registry."""

from scepter_like.metric.registry import METRICS

__all__ = ['METRICS']
