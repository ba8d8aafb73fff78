"""Resuming a run that MAX_STEPS (or a stop) ended inside an epoch, or one that had finished: the resumed run ends
as the run that was never stopped (evaluations, best checkpoint, averages), and says what it does."""

import logging
import os

import pytest
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.utils.metrics_log import read_metrics


@pytest.fixture(scope='module')
def blobs(tmp_path_factory):
    return write_blobs(tmp_path_factory.mktemp('blobs') / 'blobs.npz')  # 96 samples: 6 batches of 16


def _evals(work_dir):
    return [r for r in read_metrics(os.path.join(work_dir, 'metrics.jsonl')) if r['kind'] == 'eval']


def _checkpoint_hook(solver):
    return next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CheckpointHook')


@pytest.mark.slow
def test_an_evaluation_of_an_epoch_max_steps_cut_short_is_not_that_epochs(blobs, tmp_path, caplog):
    """MAX_STEPS 8 stops at iter 2 of epoch 2 and evaluates there: the log and metrics.jsonl both say so, and it
    is no evaluation of epoch 2 (nor a best checkpoint), so the resumed run evaluates epoch 2 when it ends and its
    best checkpoint and test are the uninterrupted run's."""
    saver = {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_BEST_BY': '+accuracy', 'SAVE_LAST': True}
    hooks = [{'NAME': 'BackwardHook'}, saver]

    def cfg(work, **keys):
        cfg = blob_solver_cfg(blobs, tmp_path / work, hooks=hooks, MAX_EPOCHS=3, **keys)
        cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
        return cfg

    whole = build_solver(cfg('whole'))
    whole.solve()
    cut = build_solver(cfg('cut', MAX_STEPS=8))
    with caplog.at_level(logging.INFO, logger='scepter_like.test'):
        cut.solve()
    cut.close()
    assert 'eval epoch 2/3 at iter 2/6 (cut short) (96 samples)' in caplog.text
    cut_eval = _evals(tmp_path / 'cut')[-1]
    assert (cut_eval['step'], cut_eval['epoch'], cut_eval['iter'], cut_eval['epoch_iters']) == (8, 2, 2, 6)
    resumed = build_solver(cfg('cut', RESUME_FROM='auto'))
    resumed.solve()
    assert [(r['step'], r['epoch']) for r in _evals(tmp_path / 'cut')] == [(6, 1), (8, 2), (12, 2), (18, 3)]
    assert [(r['step'], r['epoch']) for r in _evals(tmp_path / 'whole')] == [(6, 1), (12, 2), (18, 3)]
    assert _checkpoint_hook(resumed).best_epoch == _checkpoint_hook(whole).best_epoch
    assert _checkpoint_hook(resumed).best_value == _checkpoint_hook(whole).best_value
    assert resumed.epoch_outputs['test'] == whole.epoch_outputs['test']


@pytest.mark.slow
def test_max_steps_inside_an_accumulation_group_is_a_warning_naming_the_group_and_the_steps_that_end_one(
    blobs, tmp_path, caplog
):
    """MAX_STEPS counts train steps (micro-batches); a stop inside a group steps the optimizer on its part, which a
    run that goes on does not (so a resume from there differs).  6 steps an epoch, groups of 4: 1-4, 5-6."""
    for max_steps in (8, 10):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger='scepter_like.test'):
            build_solver(blob_solver_cfg(blobs, tmp_path / f'w{max_steps}', ACCU_STEP=4, MAX_STEPS=max_steps))
        warned = [r.getMessage() for r in caplog.records if 'accumulation group' in r.getMessage()]
        if max_steps == 8:
            assert warned == [
                'SOLVER.MAX_STEPS: 8 stops inside a gradient accumulation group (accumulation of 4: iterations 1-4'
                ' of epoch 2, counted from the epoch start); the stop steps the optimizer on part of that group, so'
                ' a run resumed from there (RESUME_FROM) does not continue the run it stopped exactly. MAX_STEPS 6'
                ' or 10 ends a group'
            ]
        else:  # 10 ends the group 1-4 of epoch 2
            assert warned == []
