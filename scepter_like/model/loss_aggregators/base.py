"""LossAggregator, the interface every aggregator follows, and ``Sum``.

How a solver uses one (once per train forward, with the train step it belongs to)::

    agg = LOSS_AGGREGATORS.build(cfg, logger=logger, weights=LOSS_WEIGHTS, seed=ENV.SEED)
    loss = aggregate_loss(agg, results, step)   # results: the model's train outputs
    # or by hand: loss = agg(terms, step) with terms = {'loss_pde': tensor, ...};
    #             agg.weights() -> {'loss_pde': 0-dim tensor, ...} for the log
    if agg.performs_backward:        # gradient-based (PCGrad): it writes .grad itself
        agg.backward(terms, step, params)       # instead of loss.backward()

``agg(terms, step)`` with the same ``step`` again (an L-BFGS closure evaluates one step's
loss several times) reuses that step's weights, so the objective stays fixed within the
step; a new ``step`` advances the state.  The weights and any randomness are pure
functions of ``(seed, step)`` and the state in ``state_dict()``, so a resumed run
computes the same weights as an uninterrupted one.

``LOSS_WEIGHTS`` (``weights``) scale the terms first (1.0 for a term it does not name);
an aggregator's own balancing multiplies on top.
"""

import torch

from scepter_like.errors import ConfigError, DataError
from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS

TERM_PREFIX = 'loss_'
WEIGHT_PREFIX = 'weight_'


def loss_terms(results):
    """The ``loss_*`` entries of a model's train outputs, in their order."""
    return {k: v for k, v in results.items() if k.startswith(TERM_PREFIX)}


def aggregate_loss(aggregator, results, step, configured_at=None):
    """The loss to minimise from a model's train outputs ``results`` at train step ``step``.

    ``results['loss']`` when the model gives one (a scalar tensor); otherwise ``aggregator``
    over the ``loss_*`` terms (scalar tensors too), put back as ``results['loss']``; an aggregator whose weights
    change (``logs_weights``: Relobralo) puts each term's weight beside it, ``weight_<term>``
    (``weight_pde`` for ``loss_pde``), so the log shows both.
    ``configured_at``: the config paths of the LOSS_AGGREGATOR and LOSS_WEIGHTS the user set
    (computed once by the caller, so the check costs one test a step): a model's own ``loss``
    is the objective as it returns it, which they would not change (a ConfigError).
    """
    loss = results.get('loss')
    if loss is not None:
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise not_scalar('loss', loss)
        if configured_at:
            raise _unused_config(configured_at, aggregator, results)
        return loss
    terms = loss_terms(results)
    if not terms:
        raise DataError(f"the model returned no 'loss' (nor 'loss_*' terms) in train mode: {sorted(results)}")
    for name, term in terms.items():
        if not isinstance(term, torch.Tensor) or term.dim():
            raise not_scalar(name, term)
    loss = results['loss'] = aggregator(terms, step)
    if aggregator.logs_weights:
        for name, weight in aggregator.weights().items():
            results[WEIGHT_PREFIX + name[len(TERM_PREFIX) :]] = weight
    return loss


def not_scalar(name, value):
    """The DataError of a model output ``name`` the loss needs as a scalar tensor."""
    got = f'a tensor of shape {list(value.shape)}' if isinstance(value, torch.Tensor) else type(value).__name__
    return DataError(f"the model's {name!r} must be a scalar tensor, got {got}; reduce it (mean)")


def _unused_config(configured_at, aggregator, results):
    """The ConfigError of LOSS_AGGREGATOR / LOSS_WEIGHTS set for a model that returns its own ``loss``: they apply to
    the ``loss_*`` terms of a model that returns none (its terms beside ``loss`` are only logged)."""
    terms = list(loss_terms(results))
    unknown = [k for k in aggregator.static_weights if k not in terms]
    paths = ' and '.join(configured_at)
    return ConfigError(
        f"{paths}: the model returns 'loss', the objective as returned"
        + (f' (its loss_* terms {terms} are only logged)' if terms else '')
        + (f', and no {unknown}' if unknown else '')
        + "; LOSS_WEIGHTS and LOSS_AGGREGATOR apply only to the loss_* terms of a model that returns no 'loss':"
        + f" drop 'loss' from the model's train outputs, or drop {paths}"
    )


class LossAggregator:
    """Base: checks the terms against ``weights`` and keeps the term names fixed for the run."""

    para_dict = {}
    performs_backward = False  # True: call backward(terms, step, params) instead of loss.backward()
    logs_weights = True  # the weights change from step to step: aggregate_loss puts them beside the terms

    def __init__(self, cfg, logger=None, weights=None, seed=0):
        self.cfg = cfg
        self.logger = logger
        self.static_weights = dict(weights or {})
        self.seed = seed
        self.names = None  # the term names, fixed at the first call

    def check_terms(self, terms):
        """The terms' names, in order; the same on every call."""
        names = tuple(terms)
        if self.names is None:
            if not names:
                raise DataError('the loss aggregator got no loss_* terms from the model')
            unknown = [k for k in self.static_weights if k not in terms]
            if unknown:
                raise ConfigError(f'SOLVER.LOSS_WEIGHTS: the model returns no {unknown}; its terms are {list(names)}')
            self.names = names
        elif names != self.names:
            raise DataError(f'the model returned loss terms {list(names)}, earlier {list(self.names)}')
        return names

    def scaled(self, terms):
        """``[LOSS_WEIGHTS[k] * terms[k]]`` in term order."""
        return [terms[k] * self.static_weights.get(k, 1.0) for k in self.check_terms(terms)]

    def __call__(self, terms, step):
        """The loss to minimise at train step ``step``."""
        raise NotImplementedError

    def weights(self):
        """``{term name: 0-dim tensor}``: the weight each term had in the last loss (empty before the first call)."""
        raise NotImplementedError

    def backward(self, terms, step, params):
        """Write the gradients of ``terms`` into ``params``' ``.grad`` (only where ``performs_backward``)."""
        raise NotImplementedError

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@LOSS_AGGREGATORS.register_class()
class Sum(LossAggregator):
    """``sum_k LOSS_WEIGHTS[k] * loss_k``: the solver's behaviour without an aggregator."""

    para_dict = {}
    logs_weights = False  # the config's LOSS_WEIGHTS: nothing new to log at every step

    def __init__(self, cfg, logger=None, weights=None, seed=0):
        super().__init__(cfg, logger, weights, seed)
        self._weights = {}

    def __call__(self, terms, step):
        scaled = self.scaled(terms)
        if not self._weights:
            device = scaled[0].device
            self._weights = {k: torch.tensor(self.static_weights.get(k, 1.0), device=device) for k in self.names}
        return sum(scaled)

    def weights(self):
        return self._weights
