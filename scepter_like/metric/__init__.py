"""Metrics computed from sums and counts, so any world size gives the exact value."""

from scepter_like.metric import accuracy, f1, field_error, regression  # noqa: F401  (registrations)
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS

__all__ = ['METRICS', 'Metric']
