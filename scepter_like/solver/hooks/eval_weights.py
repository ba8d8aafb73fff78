"""Evaluate and test with other weights (EMA, SWA): swap them in for the pass, back after.

A hook listed in TRAIN_HOOKS only sees train-mode stages, so the averaging hooks call
:func:`swap_in_for_eval` from ``before_solve``: it adds two callbacks to the eval and
test stage tables — swap in after ``before_all_iter``'s hooks, swap back after
``after_all_iter``'s hooks.  The metrics (computed before ``after_all_iter``) see the
averaged weights; everything outside those passes, checkpoints included, sees the raw
training weights.  Several averaging hooks share the solver's one swap: it saves the training
weights once and restores exactly them (two swaps restoring in the order they swapped in would
leave the first one's average in training), and a pass evaluates one average, that of the
hook added last that has one (the later ``before_solve``: higher PRIORITY, then later listed).
``solver.predict`` runs inside :func:`evaluation_weights`, so it answers with the weights
evaluation and test use.  A test pass of a file's weights (``test_weights``) pauses the swap.
A hook that swaps puts what it swaps in into a checkpoint as ``eval_model``
(``before_save_checkpoint``, called in the same order, so the last one with an average has the
last word), so a checkpoint chosen by such an evaluation (the best) carries the weights that
were evaluated.
"""

import contextlib

import torch

from scepter_like.solver.hooks.hook import SolverSurface


class WeightSwap:
    """Copies into ``model`` the weights of the last of ``sources`` (each ``() -> {state-dict key: tensor}``,
    None or {} while it has none) that has some, and restores the originals."""

    def __init__(self, model):
        self.model = model
        self.sources = []
        self.paused = False  # the model holds the weights to evaluate already
        self._saved = None

    def swap_in(self, solver=None):
        if self.paused or self._saved is not None:
            return
        weights = next((w for w in (source() for source in reversed(self.sources)) if w), None)
        if not weights:
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
    """Run every eval and test pass of ``solver`` with ``weights()`` (None or {}: raw weights, or the average of
    an averaging hook added earlier); returns the solver's one swap."""
    swaps = weight_swaps(solver)
    if swaps:
        swap = swaps[0]
    else:
        swap = WeightSwap(solver.unwrapped_model)
        for mode in ('eval', 'test'):
            solver.register_stage_callback('before_all_iter', swap.swap_in, mode=mode)
            solver.register_stage_callback('after_all_iter', swap.swap_back, mode=mode)
    swap.sources.append(weights)
    return swap


def weight_swaps(solver):
    """The swap ``swap_in_for_eval`` registered on ``solver``'s test passes, in a list (empty: none)."""
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
