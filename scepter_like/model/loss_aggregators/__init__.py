"""Loss aggregators: ``Sum`` (weighted, the default), ``Relobralo`` and ``PCGrad``.

Built as ``LOSS_AGGREGATORS.build(cfg, logger=logger, weights=LOSS_WEIGHTS, seed=ENV.SEED)``;
``aggregate_loss(agg, results, step)`` turns a model's train outputs into the loss; see
``base`` for how a solver calls them.
"""

from scepter_like.model.loss_aggregators import base, pcgrad, relobralo  # noqa: F401  (registrations)
from scepter_like.model.loss_aggregators.base import LossAggregator, aggregate_loss, loss_terms
from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS

__all__ = ['LOSS_AGGREGATORS', 'LossAggregator', 'aggregate_loss', 'loss_terms']
