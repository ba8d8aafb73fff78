"""Evaluate and test with other weights (EMA, SWA): swap them in for the pass, back after.

A hook listed in TRAIN_HOOKS only sees train-mode stages, so the averaging hooks call
:func:`swap_in_for_eval` from ``before_solve``: it adds two callbacks to the eval and
test stage tables — swap in after ``before_all_iter``'s hooks, swap back after
``after_all_iter``'s hooks.  The metrics (computed before ``after_all_iter``) see the
averaged weights; everything outside those passes, checkpoints included, sees the raw
training weights.  ``solver.predict`` runs inside :func:`evaluation_weights`, so it answers with the
weights evaluation and test use.  A test pass of a file's weights (``test_weights``) pauses the swaps.  A hook
that swaps puts what it swaps in into a checkpoint as ``eval_model`` (``before_save_checkpoint``),
so a checkpoint chosen by such an evaluation (the best) carries the weights that were evaluated.
"""

import contextlib

import torch

from scepter_like.solver.hooks.hook import SolverSurface


class WeightSwap:
    """Copies ``weights()`` (``{state-dict key: tensor}``) into ``model`` and restores the originals."""

    def __init__(self, model, weights):
        self.model = model
        self.weights = weights
        self.paused = False  # the model holds the weights to evaluate already
        self._saved = None

    def swap_in(self, solver=None):
        weights = None if self.paused else self.weights()
        if not weights or self._saved is not None:
            return
        own = self.model.state_dict()
        self._saved = {k: own[k].clone() for k in weights}
        with torch.no_grad():
            for k, v in weights.items():
                own[k].copy_(v)

    def swap_back(self, solver=None):
        if self._saved is None:
            return
        own = self.model.state_dict()
        with torch.no_grad():
            for k, v in self._saved.items():
                own[k].copy_(v)
        self._saved = None


def swap_in_for_eval(solver: SolverSurface, weights):
    """Run every eval and test pass of ``solver`` with ``weights()`` (None or {} : raw weights)."""
    swap = WeightSwap(solver.unwrapped_model, weights)
    for mode in ('eval', 'test'):
        solver.register_stage_callback('before_all_iter', swap.swap_in, mode=mode)
        solver.register_stage_callback('after_all_iter', swap.swap_back, mode=mode)
    return swap


def weight_swaps(solver):
    """The swaps ``swap_in_for_eval`` registered on ``solver``'s test passes."""
    return [
        fn.__self__
        for fn in solver.stage_functions('before_all_iter', 'test')
        if isinstance(getattr(fn, '__self__', None), WeightSwap)
    ]


@contextlib.contextmanager
def evaluation_weights(solver):
    """Inside, the model holds the weights eval and test passes run with (the swaps' weights swapped in)."""
    swaps = weight_swaps(solver)
    for swap in swaps:
        swap.swap_in()
    try:
        yield
    finally:
        for swap in reversed(swaps):
            swap.swap_back()
