"""PCGrad: projecting conflicting gradients (Yu et al. 2020, arXiv:2001.06782).

Each term's gradient ``g_i`` (of ``LOSS_WEIGHTS[i] * L_i`` over the parameters) is, for
the other terms ``j`` in a random order, projected onto the normal plane of ``g_j``
whenever the two conflict (``g_i . g_j < 0``):

    g_i <- g_i - (g_i . g_j) / |g_j|^2 * g_j

A term whose gradient is zero (a loss that does not depend on the parameters, such as a
boundary term a hard constraint satisfies exactly, or one of weight 0) conflicts with no
other and projects nothing; its own row stays zero.  The parameters get the sum of the
projected gradients.  The order is drawn from ``(seed, step)``, so a resumed run projects
exactly as an uninterrupted one.

Because it needs each term's gradient, PCGrad does the backward pass itself:
``performs_backward`` is True and the solver calls ``backward(terms, step, params)``
instead of ``loss.backward()``; it adds to ``p.grad`` as a backward would (so
accumulation works).  Under DDP each term's gradient is averaged over ranks before the
projection (one all-reduce of all of them); the forward must then not let DDP reduce
gradients itself (run it under ``model.no_sync()``).  ``agg(terms, step)`` returns the
weighted sum, the value to log and the one an optimizer closure returns.
"""

import random

import torch

from scepter_like.model.loss_aggregators.base import Sum
from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS
from scepter_like.utils.distributed import all_reduce_sum, get_world_size


def project_conflicting(grads, orders):
    """The PCGrad projection of ``grads`` ``[m, P]``; ``orders[i]`` lists the other rows in the order to use."""
    projected = grads.clone()
    # |g_j|^2, with 1 where g_j is zero: a zero gradient conflicts with nothing (its dot product is 0), so it
    # projects nothing; dividing 0 by 0 would make the whole step NaN (a hard-constrained term, a weight 0)
    norms = grads.pow(2).sum(1)
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    for i, order in enumerate(orders):
        g = projected[i]
        for j in order:  # min(dot, 0): no projection where they agree, and no host sync to decide it
            g -= torch.dot(g, grads[j]).clamp(max=0) / norms[j] * grads[j]
    return projected


@LOSS_AGGREGATORS.register_class()
class PCGrad(Sum):
    para_dict = {}
    performs_backward = True

    def orders(self, step):
        """For each term, the other terms in the random order of ``step`` (a pure function of seed and step)."""
        rng = random.Random(self.seed * 1_000_003 + step)
        m = len(self.names)
        return [rng.sample([j for j in range(m) if j != i], m - 1) for i in range(m)]

    def backward(self, terms, step, params):
        """Write the projected gradient of ``terms`` into ``p.grad`` of ``params`` (added to what is there)."""
        params = [p for p in params if p.requires_grad]
        rows = []
        for term in self.scaled(terms):
            grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
            rows.append(
                torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)])
            )
        stacked = torch.stack(rows)
        if get_world_size() > 1:
            stacked = all_reduce_sum(stacked) / get_world_size()
        flat = project_conflicting(stacked, self.orders(step)).sum(0)
        offset = 0
        for p in params:
            n = p.numel()
            g = flat[offset : offset + n].view_as(p)
            offset += n
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.add_(g)
