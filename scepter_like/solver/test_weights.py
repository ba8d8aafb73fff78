"""The weights a test pass runs with: the best checkpoint's, the last ones, or a given file's.

``SOLVER.TEST_WITH: best`` (the default, as Lightning's ``trainer.test(ckpt_path='best')``)
tests the final model with the weights of CheckpointHook's best checkpoint when the run
keeps one (SAVE_BEST_BY), else, saying so, with the weights training ended with (``last``).
``build_solver(...).test(weights=...)`` takes the same words or a checkpoint path.  A
checkpoint's evaluation weights are loaded (the EMA or SWA average at that time, when the
run evaluated with it), else its weights; either way exactly the file's weights are tested:
the averaging hooks' swaps pause meanwhile.  The weights training ended with
are back afterwards, so the hooks' end-of-run work (a last checkpoint, an export) sees them.
Under FSDP the file's full tensors are cut to each rank's shard, as a resume does.  Every rank reads the file
from its own disk: one some rank lacks, or holds other bytes of, is a ConfigError on every rank
(``check_every_rank_reads``), so no rank tests other weights than the others.
A test line of the run's metrics.jsonl names the weights it ran with (``weights``: ``last`` or the
file's path in WORK_DIR); a file outside WORK_DIR (another run's) is tested without a line.
``best`` is the file the hook saved: its train step is checked against the hook's record
(``CheckpointHook.check_best_file``), so a best that a later session wrote over in the same WORK_DIR
is refused, not tested and recorded under this session's step.  The check reads the file
the test loads anyway: nothing more is read.
"""

import contextlib
import os

import torch

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.checkpoint import CheckpointHook
from scepter_like.solver.hooks.eval_weights import weight_swaps
from scepter_like.solver.parallel import load_model_state
from scepter_like.utils.checkpoint import (
    load_torch_file,
    load_weights_file,
    resolve_checkpoint,
    weights_in,
)
from scepter_like.utils.distributed import broadcast_object
from scepter_like.utils.shared_file import check_every_rank_reads

TEST_WITH = ('best', 'last')


def best_checkpoint_of(solver):
    """(the run's best checkpoint, complete on disk, on every rank; the CheckpointHook that keeps it), or
    (None, None) without one."""
    hooks = [hook for hook in solver.hooks_dict['train'] if isinstance(hook, CheckpointHook)]
    found = next(((i, path) for i, path in enumerate(hook.best_checkpoint(solver) for hook in hooks) if path), None)
    found = broadcast_object(found if solver.is_main else None)  # rank 0 names it: each rank has the same hooks
    return (found[1], hooks[found[0]]) if found else (None, None)


def test_weights_path(solver, weights):
    """(the file whose weights a test with ``weights`` ('best', 'last' or a path; None: 'best') uses, None: the
    model's own; the CheckpointHook whose best it is, for 'best')."""
    weights = 'best' if weights is None else weights
    if not isinstance(weights, (str, os.PathLike)):
        raise ConfigError(f"the test weights are 'best', 'last' or a checkpoint path, got {weights!r}")
    if weights == 'last':
        _warn_if_untrained(solver)
        return None, None
    path, keeper = (resolve_checkpoint(weights), None) if weights != 'best' else best_checkpoint_of(solver)
    if path is None:
        if not _warn_if_untrained(solver):
            solver.logger.info('no best checkpoint (CheckpointHook SAVE_BEST_BY keeps one): testing the last weights')
        return None, None
    # rank 0 named it; each rank reads it.  A word that is no file ('Best', 'latest') is told the choices
    named = 'best' if weights == 'best' else f"{weights!r}: 'best', 'last' or a checkpoint path"
    check_every_rank_reads(path, f'the test weights ({named}): checkpoint')
    return path, keeper


def _warn_if_untrained(solver):
    """Warn (and True) when the model's own weights are its initial ones: the session neither trained nor loaded any
    (a resume, MODEL.PRETRAINED_MODEL), so a test scores random weights."""
    model_cfg = solver.cfg.get('MODEL') or {}
    if solver.progress.total_iter or solver.resumed_from or model_cfg.get('PRETRAINED_MODEL'):
        return False
    solver.logger.warning(
        "testing the model's initial (untrained) weights: this session has not trained (fit()) and loaded no weights"
        ' (SOLVER.RESUME_FROM, MODEL.PRETRAINED_MODEL, or a checkpoint path as the test weights)'
    )
    return True


@contextlib.contextmanager
def weights_for_test(solver, weights):
    """Inside, the model holds the weights ``weights`` names; the ones it held are back after."""
    path, keeper = test_weights_path(solver, weights)
    with _recorded(solver, path), _file_weights(solver, path, keeper) if path else contextlib.nullcontext():
        yield path


def _recorded(solver, path):
    """The run's test lines say which weights they ran with (``MetricsLog.testing``): 'last' (the model's own), the
    file's path in WORK_DIR, or none for a file outside it (another run's: no result of this run)."""
    if solver.metrics_log is None:  # a session that did not train writes no records
        return contextlib.nullcontext()
    if path is None:
        return solver.metrics_log.testing('last')
    work_dir, file = os.path.realpath(solver.work_dir), os.path.realpath(path)
    if os.path.commonpath([work_dir, file]) != work_dir:
        solver.logger.info(f'{path} is outside this run ({solver.work_dir}): its test is not written to its records')
        return solver.metrics_log.testing(None)
    return solver.metrics_log.testing(os.path.relpath(file, work_dir))


@contextlib.contextmanager
def _file_weights(solver, path, keeper=None):
    """Inside, the model holds the weights of the file ``path`` (its evaluation weights when it has them);
    ``keeper``: the CheckpointHook whose best checkpoint it is, which checks the file is the one it saved."""
    state, evaluated, step = _evaluation_weights(path)
    if keeper is not None:  # every rank read the same bytes: each refuses alike
        keeper.check_best_file(solver, path, step)
    # each rank's own shard under FSDP (no gather): loaded back as it is; the file's full tensors are cut to shards
    held = {k: v.detach().clone() for k, v in solver.unwrapped_model.state_dict().items()}
    load_model_state(solver.model, state, path)
    swaps = weight_swaps(solver)  # the file's weights are what is tested: no averaging hook swaps its own in
    for swap in swaps:
        swap.paused = True
    solver.logger.info(f'testing with the weights of {path}' + (' (its evaluation weights)' if evaluated else ''))
    try:
        yield
    finally:
        for swap in swaps:
            swap.paused = False
        with torch.no_grad():
            load_model_state(solver.model, held, 'the weights training ended with')


def _evaluation_weights(path):
    """(state dict, whether it is the checkpoint's ``eval_model``: weights an averaging hook evaluated with, the
    train step the file holds or None)."""
    if path.endswith('.safetensors'):
        return load_weights_file(path), False, None
    data = load_torch_file(path)
    progress = data.get('solver') if isinstance(data, dict) else None  # (a solver's own save_checkpoint: maybe none)
    step = progress.get('total_iter') if isinstance(progress, dict) else None
    evaluated = isinstance(data, dict) and isinstance(data.get('eval_model'), dict)
    return weights_in(data, path, eval_weights=True), evaluated, step
