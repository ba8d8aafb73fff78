"""The sanity pass: a few eval batches through the eval step and the metrics before the first train step; and the
first eval step's outputs, asked for before any pass (the scalars a model returns beside its metrics' inputs).

A wrong metric ``KEYS``, an eval forward that breaks or a metric that cannot compute then
fails in seconds (a scepter metric over the whole pass only has its KEYS read: it computes
on the whole pass) instead of after a whole epoch of training (Lightning runs two validation
batches the same way).  Nothing of it is kept: no hook runs, no result is recorded, the
metrics start afresh at the first evaluation, and every RNG is as it was, so a run with
the pass trains exactly as one without.  ``SOLVER.SANITY_EVAL_BATCHES`` (default 2; 0: off).
"""

import itertools

import torch

from scepter_like.metric.base import Metric
from scepter_like.solver.parallel import eval_context
from scepter_like.utils.seed import get_rng_state, set_rng_state


def sanity_eval(solver, batches):
    """Run up to ``batches`` eval batches through ``solver.run_step_eval`` and its metrics, as an eval pass's steps
    do, and compute them (every rank)."""
    if batches <= 0 or 'eval' not in solver.datas:
        return
    ran = _quiet_eval_steps(solver, batches, solver.update_metrics, compute=True)
    solver.logger.info(f'sanity pass: {ran} eval batch(es) through the eval step and the metrics')


def first_eval_results(solver):
    """What the eval step returns for the first eval batch (None without eval data), nothing of it kept: the outputs
    a pass will have, asked for before any (``TrainValSolver.metric_names``)."""
    found = []
    if 'eval' in solver.datas:
        _quiet_eval_steps(solver, 1, lambda batch, results: found.append(results), compute=False)
    return found[0] if found else None


def _quiet_eval_steps(solver, batches, each, compute):
    """Up to ``batches`` eval steps, ``each(batch, results)`` after each, then (``compute``) the metrics computed and
    reset; the mode, the step's outputs and every RNG as they were after.  The number of steps run."""
    rng, previous, ran = get_rng_state(), solver.mode, 0
    solver.mode = 'eval'
    try:
        with torch.no_grad(), eval_context(solver.model):
            for ran, batch in enumerate(itertools.islice(solver.datas['eval'].iterate(), batches), 1):
                if solver.moves_batches:
                    batch = solver.transfer_data_to_device(batch)
                solver.step.begin()
                results = solver.run_step_eval(batch, ran - 1, solver.progress.total_iter, solver.rank)
                solver.take_step_results(results)
                each(batch, results)
                solver.step.end()
            for metric in solver.metrics if compute else ():
                if isinstance(metric, Metric):  # a whole-pass metric needs the whole pass: its KEYS were read
                    metric.compute(solver.device)
                    metric.reset()
    finally:
        solver.mode = previous
        solver.step.outputs = {}  # nothing of the pass is kept: the first train hooks see no eval outputs
        set_rng_state(rng)
    return ran
