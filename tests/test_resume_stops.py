"""Resuming a run that MAX_STEPS (or a stop) ended inside an epoch, or one that had finished: the resumed run ends
as the run that was never stopped (evaluations, best checkpoint, averages), and says what it does."""

import logging
import os

import pytest
import torch
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


def _swa_cfg(blobs, work_dir, **keys):
    saver = {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True}
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'SWAHook', 'START_EPOCH': 1}, saver]
    return blob_solver_cfg(blobs, work_dir, hooks=hooks, DEFAULT_LOG_HOOK=False, **keys)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same_weights(a, b):
    return all(torch.equal(v, b.unwrapped_model.state_dict()[k]) for k, v in a.unwrapped_model.state_dict().items())


@pytest.mark.slow
def test_swa_save_last_holds_the_weights_training_ended_with_so_extending_the_run_trains_on_from_them(blobs, tmp_path):
    """The model keeps the average after the run, but only once every hook's end-of-run work is done: SAVE_LAST's
    checkpoint holds the training weights as ``model`` (the average as ``eval_model``), so RESUME_FROM=auto with
    more epochs ends as the longer run (it trained on from the average)."""
    whole = build_solver(_swa_cfg(blobs, tmp_path / 'whole', MAX_EPOCHS=3))
    whole.solve()
    first = build_solver(_swa_cfg(blobs, tmp_path / 'ext', MAX_EPOCHS=2))
    ended_with = {}
    first.register_callback_on_epoch_end(lambda s: ended_with.update(_state(s.unwrapped_model)))
    first.solve()
    first.close()
    last = torch.load(tmp_path / 'ext' / 'checkpoints' / 'checkpoint-last.pth', weights_only=True)
    swa = first.hooks_dict['train'][1]
    for k, v in ended_with.items():
        assert torch.equal(last['model'][k], v)
        assert torch.equal(last['eval_model'][k], swa.averaged.module.state_dict()[k])
        assert torch.equal(first.unwrapped_model.state_dict()[k], last['eval_model'][k])  # the model: the average
    extended = build_solver(_swa_cfg(blobs, tmp_path / 'ext', MAX_EPOCHS=3, RESUME_FROM='auto'))
    extended.solve()
    assert extended.hooks_dict['train'][1].n_averaged == whole.hooks_dict['train'][1].n_averaged == 3
    assert _same_weights(extended, whole)


@pytest.mark.slow
def test_swa_averages_an_epoch_max_steps_cut_short_once_when_the_resumed_run_finishes_it(blobs, tmp_path):
    whole = build_solver(_swa_cfg(blobs, tmp_path / 'whole', MAX_EPOCHS=3))
    whole.solve()
    cut = build_solver(_swa_cfg(blobs, tmp_path / 'cut', MAX_EPOCHS=3, MAX_STEPS=8))  # iter 2 of epoch 2
    cut.solve()
    cut.close()
    assert cut.hooks_dict['train'][1].n_averaged == 1  # epoch 1 only
    resumed = build_solver(_swa_cfg(blobs, tmp_path / 'cut', MAX_EPOCHS=3, RESUME_FROM='auto'))
    resumed.solve()
    assert resumed.hooks_dict['train'][1].n_averaged == whole.hooks_dict['train'][1].n_averaged == 3
    assert _same_weights(resumed, whole)


@pytest.mark.slow
def test_resuming_with_another_optimizer_class_is_one_config_error_naming_both(blobs, tmp_path):
    """AdamW's state loaded into SGD failed at the first step with SGD's KeyError 'momentum' and a traceback."""
    from scepter_like.errors import ConfigError

    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None)
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'AdamW', 'LEARNING_RATE': 0.01}
    first = build_solver(cfg)
    first.solve()
    first.close()
    cfg['SOLVER'].update(RESUME_FROM='auto', MAX_EPOCHS=2, OPTIMIZER={'NAME': 'SGD', 'LEARNING_RATE': 0.01})
    last = tmp_path / 'w' / 'checkpoints' / 'checkpoint-last.pth'
    with pytest.raises(ConfigError) as caught:
        build_solver(cfg)
    assert str(caught.value) == (
        f'SOLVER.OPTIMIZER.NAME: SGD, and {last} holds the state of optimizer AdamW, which SGD cannot resume from;'
        f' resume with NAME: AdamW, or start a new run from its weights (SOLVER.MODEL.PRETRAINED_MODEL: {last})'
        ' with SGD'
    )


@pytest.mark.slow
def test_a_resume_under_other_optimizer_and_scheduler_settings_names_every_one_the_checkpoint_keeps(
    blobs, tmp_path, caplog
):
    """Only a changed learning rate was said; weight decay, betas and T_max were replaced silently."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None)
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'AdamW', 'LEARNING_RATE': 0.01, 'WEIGHT_DECAY': 0.0001}
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'CosineAnnealingLR', 'T_MAX': 10}
    first = build_solver(cfg)
    first.solve()
    first.close()
    cfg['SOLVER']['RESUME_FROM'] = 'auto'
    cfg['SOLVER']['OPTIMIZER'].update(LEARNING_RATE=0.02, WEIGHT_DECAY=0.05, BETAS=[0.8, 0.99])
    cfg['SOLVER']['LR_SCHEDULER']['T_MAX'] = 20
    last = tmp_path / 'w' / 'checkpoints' / 'checkpoint-last.pth'
    with caplog.at_level(logging.WARNING, logger='scepter_like.test'):
        resumed = build_solver(cfg)
    assert [r.getMessage() for r in caplog.records if 'other settings' in r.getMessage()] == [
        f"{last}'s optimizer and LR scheduler were made with other settings than this config's: learning rate 0.01"
        ' (this config: 0.02), betas (0.9, 0.999) (this config: (0.8, 0.99)), weight_decay 0.0001 (this config:'
        " 0.05), T_max 10 (this config: 20). A resume goes on with the checkpoint's optimizer and schedule, so it"
        " keeps the checkpoint's values and the config's are not used. To train with them, start a fresh run from"
        ' these weights (SOLVER.MODEL.PRETRAINED_MODEL)'
    ]
    group = resumed.optimizer.param_groups[0]
    assert (group['weight_decay'], group['betas'], resumed.lr_scheduler.T_max) == (0.0001, (0.9, 0.999), 10)


@pytest.mark.slow
def test_resuming_a_finished_run_says_it_is_finished_and_only_tests(blobs, tmp_path, caplog):
    """The resume line said 'goes on at epoch 3, iter 1' and the docs 'evaluates and tests again'."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    first = build_solver(cfg)
    first.solve()
    first.close()
    cfg['SOLVER']['RESUME_FROM'] = 'auto'
    with caplog.at_level(logging.INFO, logger='scepter_like.test'):
        again = build_solver(cfg)
        again.solve()
    last = tmp_path / 'w' / 'checkpoints' / 'checkpoint-last.pth'
    assert f'resumed from {last} after step 12: the run is finished, nothing is left to train\n' in caplog.text
    assert 'MAX_STEPS 0): nothing is left to train; only the test runs\n' in caplog.text
    assert [r['step'] for r in _evals(tmp_path / 'w')] == [6, 12]
    assert again.epoch_outputs['test'] == first.epoch_outputs['test']
