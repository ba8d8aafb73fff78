"""Relobralo: relative loss balancing with random lookback (Bischof & Kraus 2021, arXiv:2110.09813).

With ``m`` terms ``L_i``, temperature ``T`` and

    bal_i(t, t') = m * softmax_i( L_i(t) / (T * L_i(t')) )

the weights at step ``t >= 1`` are

    hist_i(t)   = rho * lambda_i(t-1) + (1 - rho) * bal_i(t, 0)
    lambda_i(t) = alpha * hist_i(t) + (1 - alpha) * bal_i(t, t-1)

with ``rho ~ Bernoulli(RHO)`` drawn anew each step (the random lookback: with probability
``1 - RHO`` the history restarts from the balance against the first step's losses), and
``lambda_i(0) = 1``.  Terms that grow relative to their past get more weight.  The
loss is ``sum_i lambda_i * LOSS_WEIGHTS[i] * L_i`` with the lambdas held constant (no
gradient flows through them).  Under DDP the term values are averaged over ranks first,
so every rank computes the same weights.
"""

import random

import torch

from scepter_like.model.loss_aggregators.base import LossAggregator
from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS
from scepter_like.utils.distributed import all_reduce_sum, get_world_size

_TINY = 1e-12  # keeps L(t) / L(t') finite when a term reaches zero


@LOSS_AGGREGATORS.register_class()
class Relobralo(LossAggregator):
    para_dict = {
        'ALPHA': {
            'value': 0.999,
            'description': 'weight of the history against the balance to the previous step',
            'min': 0.0,
            'max': 1.0,
        },
        'RHO': {
            'value': 0.999,
            'description': 'probability of keeping the history each step (1 - RHO: look back to step 0)',
            'min': 0.0,
            'max': 1.0,
        },
        'TEMPERATURE': {
            'value': 0.1,
            'description': 'softmax temperature T (smaller: sharper balancing)',
            'above': 0.0,
        },
    }

    def __init__(self, cfg, logger=None, weights=None, seed=0):
        super().__init__(cfg, logger, weights, seed)
        self.alpha, self.rho, self.temperature = cfg.ALPHA, cfg.RHO, cfg.TEMPERATURE
        self.lambdas = None  # [m] weights of the last step
        self.initial = None  # [m] term values at the first step
        self.previous = None  # [m] term values at the last step
        self.last_step = None

    def balance(self, now, reference):
        return len(now) * torch.softmax(now / (self.temperature * reference + _TINY), dim=0)

    def keeps_history(self, step):
        """The Bernoulli(RHO) draw of ``step``: a pure function of (seed, step)."""
        return random.Random(self.seed * 1_000_003 + step).random() < self.rho

    @torch.no_grad()
    def update(self, values, step):
        """Advance the weights to ``step`` given its term values ``[m]`` (detached)."""
        if get_world_size() > 1:
            values = all_reduce_sum(values.clone()) / get_world_size()
        if self.lambdas is None:
            self.lambdas = torch.ones_like(values)
            self.initial = values
        else:
            rho = 1.0 if self.keeps_history(step) else 0.0
            hist = rho * self.lambdas + (1.0 - rho) * self.balance(values, self.initial)
            self.lambdas = self.alpha * hist + (1.0 - self.alpha) * self.balance(values, self.previous)
        self.previous = values
        self.last_step = step

    def __call__(self, terms, step):
        scaled = self.scaled(terms)
        if step != self.last_step:
            self.update(torch.stack([t.detach() for t in scaled]), step)
        return sum(lam * term for lam, term in zip(self.lambdas.unbind(), scaled))

    def weights(self):
        if self.lambdas is None:
            return {}
        return {k: lam * self.static_weights.get(k, 1.0) for k, lam in zip(self.names, self.lambdas.unbind())}

    def state_dict(self):
        return {
            'names': list(self.names or ()),
            'lambdas': self.lambdas,
            'initial': self.initial,
            'previous': self.previous,
            'last_step': self.last_step,
        }

    def load_state_dict(self, state):
        self.names = tuple(state['names']) or None
        self.lambdas, self.initial, self.previous = state['lambdas'], state['initial'], state['previous']
        self.last_step = state['last_step']
