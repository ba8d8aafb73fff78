"""BackwardHook, LrHook, EarlyStoppingHook, callbacks and multi-loss, in process."""

import contextlib
import logging
import math
import re

import numpy as np
import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.errors import ConfigError, DataError
from scepter_like.model import MODELS, BaseModel
from scepter_like.utils.metrics_log import read_metrics


def params(solver):
    return [p.detach().clone() for p in solver.unwrapped_model.parameters()]


@pytest.fixture
def blobs(tmp_path):
    return write_blobs(tmp_path / 'blobs.npz', n=56)


@pytest.mark.parametrize('n', [64, 56])  # 56: the last accumulation group is shorter (3 of 4)
def test_accumulation_equals_large_batch(tmp_path, n):
    npz = write_blobs(tmp_path / f'b{n}.npz', n=n)

    def run(batch, accumulate):
        cfg = blob_solver_cfg(
            npz, tmp_path / f'w{batch}', hooks=[{'NAME': 'BackwardHook', 'ACCUMULATE_STEP': accumulate}], MAX_EPOCHS=2
        )
        cfg['SOLVER']['TRAIN_DATA']['BATCH_SIZE'] = batch
        solver = build_solver(cfg)
        solver.solve()
        return solver

    small = run(8, 4)
    large = run(32, 1)
    assert small.optimizer_steps == large.optimizer_steps == 4
    for a, b in zip(params(small), params(large)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # and accumulation really changes the result compared with stepping every micro-batch
    plain = run(8, 1)
    assert not all(torch.allclose(a, b, atol=1e-4) for a, b in zip(params(plain), params(large)))


def test_solver_accu_step_is_the_same_knob(blobs, tmp_path):
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', ACCU_STEP=2, MAX_EPOCHS=1)
    solver = build_solver(cfg)
    solver.solve()
    assert solver.optimizer_steps == 2  # 56 samples / 16 = 4 batches -> 2 groups
    cfg = blob_solver_cfg(blobs, tmp_path / 'w2', hooks=[{'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 3}], ACCU_STEP=2)
    with pytest.raises(ConfigError, match='disagree'):
        build_solver(cfg).solve()


def test_gradient_clip_bounds_the_global_norm(blobs, tmp_path):
    clip, lr = 0.05, 0.1
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=[{'NAME': 'BackwardHook', 'GRADIENT_CLIP': clip}], MAX_EPOCHS=1)
    solver = build_solver(cfg)
    record = []
    solver.register_callback_on_iter_begin(lambda s: record.append(params(s)))
    solver.register_callback_on_iter_end(lambda s: record.append((params(s), float(s.iter_outputs['grad_norm']))))
    solver.solve()
    steps = [(record[i], record[i + 1]) for i in range(0, len(record), 2)]
    assert len(steps) == 4
    for before, (after, grad_norm) in steps:
        update = torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(after, before))) / lr
        assert grad_norm > clip  # clipping was active ...
        assert update.item() <= clip * (1 + 1e-4)  # ... and bounded the applied gradient
        assert update.item() == pytest.approx(clip, rel=1e-3)


def test_bf16_autocast_on_cpu_trains_and_logs_its_dtype(blobs, tmp_path, caplog):
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=[{'NAME': 'BackwardHook', 'USE_AMP': True}], MAX_EPOCHS=2)
    solver = build_solver(cfg)
    dtypes = []
    solver.unwrapped_model.backbone.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    with caplog.at_level('INFO', logger='scepter_like.test'):
        solver.solve()
    assert 'autocast to torch.bfloat16 on cpu' in caplog.text
    assert torch.bfloat16 in dtypes
    assert all(p.dtype == torch.float32 for p in solver.unwrapped_model.parameters())
    assert solver.epoch_outputs['eval']['accuracy'] > 0.5


def test_fp16_on_cpu_is_refused_at_set_up(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook', 'USE_AMP': True, 'AMP_DTYPE': 'fp16'}]
    with pytest.raises(ConfigError, match=r'TRAIN_HOOKS\[0\]\.AMP_DTYPE: fp16 needs CUDA'):
        build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks))


def _lr_recorder(solver):
    lrs = []
    solver.register_callback_on_iter_begin(lambda s: lrs.append([g['lr'] for g in s.optimizer.param_groups]))
    return lrs


def _warmup_cosine_cfg(npz, work_dir, **keys):
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False, 'WARMUP_EPOCHS': 1, 'WARMUP_START_LR': 0.01},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True},
    ]
    cfg = blob_solver_cfg(npz, work_dir, hooks=hooks, MAX_EPOCHS=3, **keys)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'CosineAnnealingLR', 'T_MAX': 12, 'ETA_MIN': 0.001}
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'SGD', 'LEARNING_RATE': 0.1, 'MOMENTUM': 0.9}
    return cfg


def warmup_cosine(t, base=0.1, eta_min=0.001, t_max=12, start=0.01, warmup=4):
    sched = eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / t_max)) / 2
    r0 = start / base
    return sched * (r0 + (1 - r0) * min(1.0, t / warmup))


def test_warmup_cosine_matches_closed_form_every_step_and_across_resume(blobs, tmp_path):
    # 56 samples / 16 = 4 steps per epoch; warmup 1 epoch = 4 optimizer steps; 12 steps in all
    solver = build_solver(_warmup_cosine_cfg(blobs, tmp_path / 'full'))
    lrs = _lr_recorder(solver)
    solver.solve()
    expected = [warmup_cosine(t) for t in range(12)]
    assert [lr[0] for lr in lrs] == pytest.approx(expected, rel=1e-9)

    first = build_solver(_warmup_cosine_cfg(blobs, tmp_path / 'cut', MAX_STEPS=6))  # stops mid-epoch 2
    lrs_a = _lr_recorder(first)
    first.solve()
    second = build_solver(_warmup_cosine_cfg(blobs, tmp_path / 'cut', RESUME_FROM='auto'))
    assert (second.progress.epoch, second.progress.iters[second.mode], second.progress.total_iter) == (1, 2, 6)
    lrs_b = _lr_recorder(second)
    second.solve()
    assert [lr[0] for lr in lrs_a + lrs_b] == pytest.approx(expected, rel=1e-9)
    for a, b in zip(params(solver), params(second)):
        assert torch.equal(a, b)


def test_hook_states_follow_their_hooks_when_the_resumed_hook_list_changes(blobs, tmp_path, caplog):
    """Hook states are saved under position keys (``train.2.LrHook``).  A hook added at resume moves the LrHook
    that LR_SCHEDULER adds; it still takes its state (the epoch step it did: StepLR stepped again otherwise, and
    epoch 2 ran at half the rate), so the run ends as the one that went on.  A state no hook takes and a hook with
    state that finds none are warnings naming them."""
    backward, saver = {'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True}

    def cfg(work, hooks, **keys):
        cfg = blob_solver_cfg(blobs, tmp_path / work, hooks=hooks, MAX_EPOCHS=2, **keys)
        cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5}
        return cfg

    went_on = build_solver(cfg('full', [backward, saver]))
    went_on.solve()
    build_solver(cfg('cut', [backward, saver], MAX_STEPS=6)).solve()  # stops in epoch 2, after its StepLR step
    source = tmp_path / 'cut' / 'checkpoints' / 'checkpoint-last.pth'

    def resume(hooks):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            solver = build_solver(cfg('cut', hooks, RESUME_FROM='auto'))
        return solver, [r.getMessage() for r in caplog.records if 'TRAIN_HOOKS[' in r.getMessage()]

    _, said = resume([backward, {'NAME': 'EarlyStoppingHook'}])  # LogHook and LrHook added, at [2] and [3]
    assert said == [
        f'{source} holds the state of CheckpointHook (SOLVER.TRAIN_HOOKS[1]), which no hook of this run takes: it'
        ' is dropped; resume with the hook list that saved it to keep it',
        f'EarlyStoppingHook (SOLVER.TRAIN_HOOKS[1]) finds no saved state in {source}: it starts fresh',
    ]
    resumed, said = resume([backward, saver, {'NAME': 'GradNormHook'}])
    assert said == [
        f'{source}: the state of LrHook (SOLVER.TRAIN_HOOKS[3]) goes to LrHook (SOLVER.TRAIN_HOOKS[4])'
        ' (the hook list changed)'
    ]
    resumed.solve()
    assert resumed.optimizer.param_groups[0]['lr'] == pytest.approx(0.05)
    for a, b in zip(params(went_on), params(resumed)):
        assert torch.equal(a, b)


def test_epoch_warmup_and_per_group_ratios(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_EPOCHS': 2, 'WARMUP_START_LR': 0.02}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=4)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5}
    solver = build_solver(cfg)
    # a second parameter group at a tenth of the rate: warmup must keep the ratio
    head = solver.unwrapped_model.backbone[-1]
    group0 = solver.optimizer.param_groups[0]
    group0['params'] = [p for p in group0['params'] if all(p is not q for q in head.parameters())]
    solver.optimizer.add_param_group({'params': list(head.parameters()), 'lr': 0.01})
    solver.lr_scheduler = torch.optim.lr_scheduler.StepLR(solver.optimizer, step_size=1, gamma=0.5)
    lrs = []
    solver.register_callback_on_epoch_begin(lambda s: lrs.append([g['lr'] for g in s.optimizer.param_groups]))
    solver.solve()
    r0 = 0.02 / 0.1
    factors = [r0, r0 + (1 - r0) * 0.5, 1.0, 1.0]
    for epoch, (lr0, lr1) in enumerate(lrs):
        assert lr0 == pytest.approx(0.1 * 0.5**epoch * factors[epoch])
        assert lr1 == pytest.approx(lr0 / 10)
    assert solver.lr_scheduler.last_epoch == 3  # stepped once per epoch boundary, never twice


def test_a_warmup_that_takes_the_whole_run_is_named(blobs, tmp_path, caplog):
    """One epoch of warmup in a one-epoch run (a sweep over LEARNING_RATE with MAX_EPOCHS=1): the rate never
    leaves the warmup, so every swept rate would train alike."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_EPOCHS': 2, 'WARMUP_START_LR': 0.02}]
    warned = {}
    for epochs in (2, 3):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            build_solver(blob_solver_cfg(blobs, tmp_path / f'w{epochs}', hooks=hooks, MAX_EPOCHS=epochs)).solve()
        warned[epochs] = [r.getMessage() for r in caplog.records if 'takes the whole run' in r.getMessage()]
    assert warned == {
        2: [
            'SOLVER.TRAIN_HOOKS[1].WARMUP_EPOCHS: the warmup of 2 epoch(s) takes the whole run (2 epoch(s)): the'
            " learning rate stays in it, from WARMUP_START_LR 0.02, and never reaches the optimizer's 0.1; lower"
            ' WARMUP_EPOCHS (0: no warmup) or train longer'
        ],
        3: [],
    }


def test_a_warmup_that_starts_above_the_learning_rate_is_named(blobs, tmp_path, caplog):
    """WARMUP_START_LR is a rate, not a fraction: above a low LEARNING_RATE (a search's low trials) the warmup
    warms down, and the first epoch trains at a multiple of the rate asked for."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_EPOCHS': 1, 'WARMUP_START_LR': 0.2}]
    lrs = []
    with caplog.at_level(logging.INFO):
        solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2))
        solver.register_callback_on_epoch_begin(lambda s: lrs.append(s.optimizer.param_groups[0]['lr']))
        solver.solve()
    assert lrs == pytest.approx([0.2, 0.1])  # what it warns about
    assert [r.getMessage() for r in caplog.records if 'warms down' in r.getMessage()] == [
        "SOLVER.TRAIN_HOOKS[1].WARMUP_START_LR: the warmup starts at 0.2, above the optimizer's learning rate 0.1 it"
        ' warms up to, so it warms down: training starts at 2x the rate asked for; set WARMUP_START_LR below the'
        ' learning rate (e.g. 0.01, a tenth of it) or WARMUP_EPOCHS: 0'
    ]


def test_a_per_step_schedule_shorter_than_an_epoch_is_named(blobs, tmp_path, caplog):
    """SET_BY_EPOCH false reads T_MAX in optimizer steps: T_MAX 3 meant as epochs cycles the rate every 3 steps of
    a 4-step epoch for the whole run; a length of the run's steps, or a schedule by epoch, says nothing."""
    warned = {}
    for t_max, by_epoch in ((3, False), (12, False), (3, True)):
        hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'SET_BY_EPOCH': by_epoch, 'WARMUP_EPOCHS': 0}]
        cfg = blob_solver_cfg(blobs, tmp_path / f'w{t_max}{by_epoch}', hooks=hooks, MAX_EPOCHS=3, EVAL_DATA=None)
        cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'CosineAnnealingLR', 'T_MAX': t_max}
        caplog.clear()
        with caplog.at_level(logging.INFO):
            build_solver(cfg).solve()
        warned[t_max, by_epoch] = [r.getMessage() for r in caplog.records if 'counts optimizer steps' in r.getMessage()]
    assert warned == {
        (3, False): [
            'CosineAnnealingLR (SOLVER.LR_SCHEDULER): T_MAX 3 counts optimizer steps here'
            ' (SOLVER.TRAIN_HOOKS[1].SET_BY_EPOCH false), fewer than one epoch of 4: the schedule runs its course'
            " every 3 step(s) through the run's 12; if T_MAX meant epochs, give it in steps (3 epochs: 12) or set"
            ' SET_BY_EPOCH: true'
        ],
        (12, False): [],
        (3, True): [],
    }


def test_a_per_step_warmup_keeps_its_length_in_steps_across_a_resume_with_other_batches(blobs, tmp_path):
    """Resumed on another world size (here: another batch size) the epoch has other step counts; the warmup, fixed
    in optimizer steps when the run began, goes on where it was instead of restarting lower."""
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False, 'WARMUP_EPOCHS': 2, 'WARMUP_START_LR': 0.01},
        {'NAME': 'CheckpointHook'},
    ]
    first = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None))
    first.solve()
    steps = first.progress.optimizer_steps
    lr_at_end = first.optimizer.param_groups[0]['lr']
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2, EVAL_DATA=None, RESUME_FROM='auto')
    cfg['SOLVER']['TRAIN_DATA']['BATCH_SIZE'] = 32
    resumed = build_solver(cfg)
    lrs = _lr_recorder(resumed)
    resumed.solve()
    lr_hook = next(h for h in resumed.hooks_dict['train'] if type(h).__name__ == 'LrHook')
    assert lr_hook._warmup_steps == 2 * steps  # not 2 epochs of the larger batches
    assert resumed.progress.optimizer_steps == steps + steps // 2
    assert lrs[0][0] == pytest.approx(lr_at_end) and lrs[1][0] > lrs[0][0]  # it goes on rising from there


def test_a_resume_with_another_batch_size_keeps_the_position_in_samples(tmp_path, caplog):
    """One process, batch 8 cut after 6 of 12 steps (48 samples), resumed with batch 16 and ACCU_STEP 2: the epoch
    goes on at batch 3 (the 48th sample), so every sample of it is trained once; the open accumulation group's
    rest (batch 3) steps alone, then batches 4 and 5 are one group."""
    import ckpt_support  # noqa: F401  (registers RecordingNpzDataset)

    npz, record = write_blobs(tmp_path / 'b96.npz', n=96), tmp_path / 'served.txt'
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'STEP_INTERVAL': 6}]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None, MAX_STEPS=6)
    cfg['SOLVER']['TRAIN_DATA'].update(NAME='RecordingNpzDataset', RECORD=str(record), BATCH_SIZE=8)
    build_solver(cfg).solve()
    cfg['SOLVER'].update(MAX_STEPS=0, ACCU_STEP=2, RESUME_FROM='auto')
    cfg['SOLVER']['TRAIN_DATA']['BATCH_SIZE'] = 16
    resumed = build_solver(cfg)
    resumed.solve()
    assert 'was saved with global batch 8 and this run has 16' in caplog.text
    assert 'the epoch continues at batch 3 (batch 6 of global size 8 then, 16 now)' in caplog.text
    assert (resumed.progress.total_iter, resumed.progress.optimizer_steps) == (9, 8)
    batches = [line.split() for line in record.read_text().splitlines()]
    served = [int(i) for batch in batches if len(batch) > 1 for i in batch]  # (set-up reads sample 0 alone)
    assert sorted(served) == list(range(96))


def test_warmup_func_null_is_no_warmup_as_in_scepter(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_FUNC': None, 'WARMUP_START_LR': 0.02}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5}
    solver = build_solver(cfg)
    lrs = []
    solver.register_callback_on_epoch_begin(lambda s: lrs.append(s.optimizer.param_groups[0]['lr']))
    solver.solve()
    assert lrs == [pytest.approx(0.1), pytest.approx(0.05)]  # WARMUP_EPOCHS' default 1 does not apply


def test_scheduler_steps_once_per_optimizer_step_with_accumulation(blobs, tmp_path):
    hooks = [
        {'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False, 'WARMUP_EPOCHS': 0},
    ]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=3)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5}
    solver = build_solver(cfg)
    lrs = _lr_recorder(solver)
    solver.solve()
    assert solver.progress.total_iter == 12 and solver.optimizer_steps == 6
    assert solver.lr_scheduler.last_epoch == 6
    # the LR changes only between accumulation groups
    assert [lr[0] for lr in lrs] == pytest.approx([0.1 * 0.5 ** (i // 2) for i in range(12)])


def test_reduce_on_plateau_gets_the_eval_metric(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0, 'PLATEAU_METRIC': 'accuracy'}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=4)
    cfg['SOLVER']['OPTIMIZER']['LEARNING_RATE'] = 0.0  # accuracy cannot change: a plateau
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'ReduceLROnPlateau', 'MODE': 'max', 'PATIENCE': 0, 'MIN_LR': 0.0}
    solver = build_solver(cfg)
    solver.solve()
    assert (
        solver.lr_scheduler.num_bad_epochs == 0 and solver.lr_scheduler.best == solver.epoch_outputs['eval']['accuracy']
    )
    assert solver.lr_scheduler._last_lr == [0.0]
    cfg['SOLVER']['TRAIN_HOOKS'][1]['PLATEAU_METRIC'] = 'acc'
    with pytest.raises(ConfigError, match="PLATEAU_METRIC.*'acc'.*\\['accuracy'\\]"):
        build_solver(cfg).solve()
    # torch's MODE min on accuracy would lower the rate while accuracy climbs: the metric's direction decides
    cfg['SOLVER']['TRAIN_HOOKS'][1]['PLATEAU_METRIC'] = 'accuracy'
    del cfg['SOLVER']['LR_SCHEDULER']['MODE']
    message = r'^ReduceLROnPlateau \(SOLVER\.LR_SCHEDULER\): MODE min waits for accuracy to stop falling, and accuracy'
    with pytest.raises(ConfigError, match=message + r' is better greater; set MODE: max$'):
        build_solver(cfg).solve()


def _early_cfg(npz, work_dir, **keys):
    cfg = blob_solver_cfg(
        npz,
        work_dir,
        hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}],
        EVAL_HOOKS=[{'NAME': 'EarlyStoppingHook', 'MONITOR': 'accuracy', 'PATIENCE': 2}],
        **keys,
    )
    cfg['SOLVER']['OPTIMIZER']['LEARNING_RATE'] = 0.0  # nothing improves after the first evaluation
    return cfg


def test_early_stopping_stops_at_the_right_epoch_and_resumes_its_patience(blobs, tmp_path):
    solver = build_solver(_early_cfg(blobs, tmp_path / 'a', MAX_EPOCHS=10))
    solver.solve()
    assert (
        solver.progress.epoch == 3 and solver.progress.total_iter == 3 * 4
    )  # best at 1, then 2 evaluations without gain
    first = build_solver(_early_cfg(blobs, tmp_path / 'b', MAX_EPOCHS=2))
    first.solve()
    hook = first.hooks_dict['eval'][0]
    assert hook.bad_evals == 1 and not first.stop_requested
    resumed = build_solver(_early_cfg(blobs, tmp_path / 'b', MAX_EPOCHS=10, RESUME_FROM='auto'))
    assert resumed.hooks_dict['eval'][0].bad_evals == 0  # the epoch-2 checkpoint predates its evaluation
    resumed.solve()
    assert resumed.progress.epoch == 3 and resumed.progress.total_iter == 12


def test_early_stopping_metric_must_exist_and_hook_must_be_an_eval_hook(blobs, tmp_path):
    cfg = _early_cfg(blobs, tmp_path / 'a')
    cfg['SOLVER']['EVAL_HOOKS'][0]['MONITOR'] = 'f1'
    with pytest.raises(ConfigError, match="MONITOR: no eval metric is called 'f1'"):
        build_solver(cfg).solve()
    cfg = _early_cfg(blobs, tmp_path / 'b')
    cfg['SOLVER']['TRAIN_HOOKS'].append(cfg['SOLVER'].pop('EVAL_HOOKS')[0])
    with pytest.raises(ConfigError, match='list it in SOLVER.EVAL_HOOKS'):
        build_solver(cfg).solve()


def test_early_stopping_mode_max_on_a_metric_that_says_less_is_better_is_a_config_error(blobs, tmp_path, monkeypatch):
    from scepter_like.metric.accuracy import AccuracyMetric

    monkeypatch.setattr(AccuracyMetric, 'lower_is_better', ('accuracy',))  # as an error metric declares itself
    cfg = _early_cfg(blobs, tmp_path / 'a')
    cfg['SOLVER']['EVAL_HOOKS'][0]['MODE'] = 'max'
    with pytest.raises(ConfigError, match=r'MODE: max waits for accuracy to rise, and its metric says less accuracy'):
        build_solver(cfg).solve()
    cfg = _early_cfg(blobs, tmp_path / 'b', MAX_EPOCHS=1)
    cfg['SOLVER']['EVAL_HOOKS'][0]['MODE'] = 'min'  # as it says: runs
    build_solver(cfg).solve()


def test_callbacks_run_in_registration_order_after_the_hooks(blobs, tmp_path):
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', MAX_EPOCHS=1))
    calls = []
    for stage in ('epoch_begin', 'epoch_end', 'iter_begin', 'iter_end'):
        register = getattr(solver, f'register_callback_on_{stage}')
        register(lambda s, stage=stage: calls.append((stage, 1, s.mode, s.progress.iters[s.mode])))
        register(lambda s, stage=stage: calls.append((stage, 2, s.mode, s.progress.iters[s.mode])))
    stepped = []
    solver.register_callback_on_iter_end(lambda s: stepped.append(s.optimizer_steps))
    solver.solve()
    assert calls[:2] == [('epoch_begin', 1, 'train', 0), ('epoch_begin', 2, 'train', 0)]
    assert calls[2:6] == [
        ('iter_begin', 1, 'train', 0),
        ('iter_begin', 2, 'train', 0),
        ('iter_end', 1, 'train', 1),
        ('iter_end', 2, 'train', 1),
    ]
    assert calls[-2:] == [('epoch_end', 1, 'train', 4), ('epoch_end', 2, 'train', 4)]
    assert stepped == [1, 2, 3, 4]  # iter_end callbacks run after BackwardHook stepped


@MODELS.register_class()
class TwoLossModel(BaseModel):
    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.net = torch.nn.Linear(8, 3)

    def forward(self, img, label):
        out = self.net(img)
        if self.training:
            return {
                'loss_ce': torch.nn.functional.cross_entropy(out, label),
                'loss_l2': out.pow(2).mean(),
            }
        return {'logits': out, 'label': label}


def test_multi_loss_terms_are_weighted_summed_and_logged(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 2}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, LOSS_WEIGHTS={'loss_l2': 0.5})
    cfg['SOLVER']['MODEL'] = {'NAME': 'TwoLossModel'}
    solver = build_solver(cfg)
    seen = []
    solver.register_callback_on_iter_end(lambda s: seen.append({k: float(v) for k, v in s.iter_outputs.items()}))
    solver.solve()
    for out in seen:
        assert out['loss'] == pytest.approx(out['loss_ce'] + 0.5 * out['loss_l2'], rel=1e-6)
    logged = solver.hooks_dict['train'][1].last_logged
    assert set(logged) >= {'loss', 'loss_ce', 'loss_l2'}
    cfg['SOLVER']['LOSS_WEIGHTS'] = {'loss_kl': 1.0}
    with pytest.raises(ConfigError, match="LOSS_WEIGHTS: the model returns no \\['loss_kl'\\]"):
        build_solver(cfg).solve()


@MODELS.register_class()
class LossAndTermsModel(TwoLossModel):
    """Returns its own loss and, beside it, a term (logged only)."""

    def forward(self, img, label):
        out = super().forward(img, label)
        if self.training:
            out['loss'] = out['loss_ce']
        return out


@pytest.mark.parametrize(
    'model, keys, pattern',
    [
        (
            'LossAndTermsModel',
            {'LOSS_WEIGHTS': {'loss_l2': 5.0}},
            r"^SOLVER\.LOSS_WEIGHTS: the model returns 'loss', the objective as returned \(its loss_\* terms"
            r" \['loss_ce', 'loss_l2'\] are only logged\); .* drop 'loss' from the model's train outputs, or drop"
            r' SOLVER\.LOSS_WEIGHTS$',
        ),
        (
            'Classifier',
            {'LOSS_WEIGHTS': {'loss_typo': 5.0}},
            r"^SOLVER\.LOSS_WEIGHTS: the model returns 'loss', the objective as returned, and no \['loss_typo'\];",
        ),
        (
            'LossAndTermsModel',
            {'LOSS_AGGREGATOR': {'NAME': 'Relobralo'}, 'LOSS_WEIGHTS': {'loss_kl': 1.0}},
            r"^SOLVER\.LOSS_AGGREGATOR and SOLVER\.LOSS_WEIGHTS: the model returns 'loss', .* are only logged\), and"
            r" no \['loss_kl'\];",
        ),
    ],
    ids=['weights', 'unknown weight', 'aggregator'],
)
def test_loss_weights_and_aggregator_for_a_model_returning_loss_are_an_error(blobs, tmp_path, model, keys, pattern):
    """A model's own 'loss' is trained on as returned: weights or an aggregator would silently do nothing."""
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', MAX_EPOCHS=1, SANITY_EVAL_BATCHES=0, **keys)
    if model != 'Classifier':
        cfg['SOLVER']['MODEL'] = {'NAME': model}
    solver = build_solver(cfg)
    with pytest.raises(ConfigError, match=pattern):
        solver.solve()
    assert solver.progress.total_iter == 0  # at the first step


@MODELS.register_class()
class PerSampleTermModel(TwoLossModel):
    """Returns one of its terms per sample ([N, 1]), not reduced."""

    def forward(self, img, label):
        out = super().forward(img, label)
        if self.training:
            out['loss_l2'] = self.net(img).pow(2).mean(1, keepdim=True)
        return out


def test_a_term_that_is_not_a_scalar_is_a_data_error_naming_it(blobs, tmp_path):
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', MAX_EPOCHS=1, SANITY_EVAL_BATCHES=0)
    cfg['SOLVER']['MODEL'] = {'NAME': 'PerSampleTermModel'}
    pattern = r"^the model's 'loss_l2' must be a scalar tensor, got a tensor of shape \[16, 1\]; reduce it \(mean\)$"
    with pytest.raises(DataError, match=pattern):
        build_solver(cfg).solve()


@MODELS.register_class()
class ValLossModel(TwoLossModel):
    """Returns, in eval mode, its batch's mean cross entropy as ``val_loss`` (``EVAL_NAME``) beside the logits."""

    EVAL_NAME = 'val_loss'

    def forward(self, img, label):
        out = super().forward(img, label)
        if not self.training:
            out[self.EVAL_NAME] = torch.nn.functional.cross_entropy(out['logits'], label)
        return out


def test_a_scalar_of_the_eval_step_is_averaged_over_the_pass_and_reported(blobs, tmp_path, caplog):
    """val_loss: the mean over the samples (the last batch is short: not the mean of the batches' means), in
    epoch_outputs, metrics.jsonl and the pass's log line, and SAVE_BEST_BY may name it (less is better)."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'SAVE_BEST_BY': 'val_loss'}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2, LOSS_WEIGHTS={'loss_l2': 0.5})
    cfg['SOLVER']['MODEL'] = {'NAME': 'ValLossModel'}
    solver = build_solver(cfg)
    assert solver.metric_names('eval') == ['accuracy', 'val_loss']  # known before any pass
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        solver.solve()
    data = np.load(blobs)
    with torch.no_grad():
        model = solver.unwrapped_model.eval()
        logits = model.net(torch.as_tensor(data['x']))
        whole = torch.nn.functional.cross_entropy(logits, torch.as_tensor(data['y'])).item()
    assert solver.epoch_outputs['eval']['val_loss'] == pytest.approx(whole, rel=1e-6)
    evals = [r for r in read_metrics(tmp_path / 'w' / 'metrics.jsonl') if r['kind'] == 'eval']
    assert len(evals) == 2 and all('val_loss' in r['values'] for r in evals)
    assert evals[-1]['values']['val_loss'] == pytest.approx(whole, rel=1e-6)
    assert 'keeps the least val_loss as best' in caplog.text
    assert re.search(r'eval epoch 2/2 \(56 samples\): accuracy: \S+, val_loss: \S+', caplog.text)
    best = min(r['values']['val_loss'] for r in evals)
    hook = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CheckpointHook')
    assert hook.best_value == best and (tmp_path / 'w' / 'checkpoints' / hook.best_name).is_file()


def test_a_scalar_of_the_eval_step_named_as_a_metric_output_is_the_metrics(blobs, tmp_path, monkeypatch):
    """scepter's Classifier METRIC returns each batch's accuracy beside METRICS' AccuracyMetric: the pass's is exact."""
    monkeypatch.setattr(ValLossModel, 'EVAL_NAME', 'accuracy')
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', MAX_EPOCHS=1, LOSS_WEIGHTS={'loss_l2': 0.5})
    cfg['SOLVER']['MODEL'] = {'NAME': 'ValLossModel'}
    solver = build_solver(cfg)
    solver.solve()
    data = np.load(blobs)
    with torch.no_grad():
        pred = solver.unwrapped_model.eval().net(torch.as_tensor(data['x'])).argmax(1)
    assert solver.metric_names('eval') == ['accuracy']
    assert solver.epoch_outputs['eval'] == {'accuracy': (pred == torch.as_tensor(data['y'])).double().mean().item()}


@MODELS.register_class()
class StateOutputsModel(BaseModel):
    """Returns, beside its loss, scalars that change after the step: a parameter, a view of it, a buffer."""

    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.net = torch.nn.Linear(8, 3)
        self.scale = torch.nn.Parameter(torch.tensor(1.0))
        self.register_buffer('calls', torch.tensor(0.0))

    def forward(self, img, label):
        out = self.net(img) * self.scale
        if self.training:
            self.calls += 1
            loss = torch.nn.functional.cross_entropy(out, label)
            return {'loss': loss, 'scale': self.scale, 'scale_view': self.scale.view(()), 'calls': self.calls}
        return {'logits': out, 'label': label}


def test_logged_means_use_each_steps_values_of_parameters_and_buffers(blobs, tmp_path):
    """iter_outputs are snapshots: LogHook keeps them without copying, the optimizer then changes the parameter."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 2}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1)
    cfg['SOLVER']['MODEL'] = {'NAME': 'StateOutputsModel'}
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'SGD', 'LEARNING_RATE': 0.5}
    solver = build_solver(cfg)
    used, seen = [], []
    solver.register_callback_on_iter_begin(lambda s: used.append(float(s.unwrapped_model.scale.detach())))
    solver.register_callback_on_iter_end(lambda s: seen.append({k: float(v) for k, v in s.iter_outputs.items()}))
    solver.solve()
    assert len(set(used)) == len(used)  # the optimizer moved the parameter every step
    assert [out['scale'] for out in seen] == used == [out['scale_view'] for out in seen]
    assert [out['calls'] for out in seen] == [float(i) for i in range(1, len(seen) + 1)]
    last = seen[-(solver.epoch_max_iter % 2 or 2) :]  # the steps of the last log line
    logged = solver.hooks_dict['train'][1].last_logged
    for key in ('loss', 'scale', 'scale_view', 'calls'):
        assert logged[key] == pytest.approx(sum(out[key] for out in last) / len(last), rel=1e-6), key


def test_resume_between_an_epoch_and_its_evaluation_does_not_train_the_epoch_again(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1}]
    first = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1))
    first.solve()
    epoch_1 = str(tmp_path / 'w' / 'checkpoints' / 'checkpoint-epoch-1.pth')
    assert torch.load(epoch_1, weights_only=True)['solver']['eval_pending']
    for keys in ({'MAX_EPOCHS': 3}, {'MAX_EPOCHS': 3, 'EVAL_INTERVAL': 2}, {'MAX_EPOCHS': 3, 'EVAL_DATA': None}):
        resumed = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, RESUME_FROM=epoch_1, **keys))
        resumed.solve()
        assert (resumed.progress.epoch, resumed.progress.total_iter) == (3, 12), keys  # 2 more epochs of 4 steps


def test_empty_value_for_a_typed_key_is_a_config_error(blobs, tmp_path):
    for key, value in (('MAX_EPOCHS', None), ('WORK_DIR', None)):
        with pytest.raises(ConfigError, match=f'SOLVER.{key}: expected .* got None'):
            build_solver(blob_solver_cfg(blobs, tmp_path / 'w', **{key: value}), set_up=False)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def _recorded(logger, caplog):
    """Every INFO-and-up record ``logger`` handles inside the block, in ``sink.records``."""
    sink = _Records()
    logger.addHandler(sink)
    try:
        with caplog.at_level('INFO', logger=logger.name):
            yield sink
    finally:
        logger.removeHandler(sink)


def test_log_lines_are_written_at_their_step_in_order_with_other_records(blobs, tmp_path, caplog):
    """Each LogHook line is written in its own step; metrics.jsonl holds every line up to a checkpoint."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 1, 'PROGRESS': 'off'}]
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1))

    def progress(records):
        return [r.getMessage().split(' ')[3] for r in records if getattr(r, 'progress_line', False)]

    metrics = tmp_path / 'w' / 'metrics.jsonl'
    seen = {}

    def on_iter_end(s):
        seen[s.progress.total_iter] = progress(sink.records)
        if s.progress.total_iter == 2:
            s.logger.info('a line of the user')
        if s.progress.total_iter == 3:
            s.save_checkpoint(str(tmp_path / 'mid.pth'))
            seen['metrics'] = [r['step'] for r in read_metrics(metrics) if r['kind'] == 'train']

    with _recorded(solver.logger, caplog) as sink:
        solver.register_callback_on_iter_end(on_iter_end)
        solver.solve()
    assert [seen[i] for i in (1, 2, 3)] == [['1/4'], ['1/4', '2/4'], ['1/4', '2/4', '3/4']]
    assert seen['metrics'] == [1, 2, 3]
    user = [r.getMessage() for r in sink.records].index('a line of the user')
    assert progress(sink.records[:user]) == ['1/4', '2/4']
    assert progress(sink.records) == ['1/4', '2/4', '3/4', '4/4']


def test_log_lines_up_to_a_failure_reach_metrics_jsonl(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 1, 'PROGRESS': 'off'}]
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1))

    def fail_at_3(s):
        if s.progress.total_iter == 3:
            raise RuntimeError('boom')

    solver.register_callback_on_iter_end(fail_at_3)
    with pytest.raises(RuntimeError, match='boom'):
        solver.solve()
    steps = [r['step'] for r in read_metrics(tmp_path / 'w' / 'metrics.jsonl') if r['kind'] == 'train']
    assert steps == [1, 2, 3]  # written out by after_solve


def test_a_config_without_train_data_evaluates_and_tests_the_model_once(tmp_path, caplog):
    """scepter's solve() runs the eval pass of an evaluation-only config; it was skipped without a word."""
    npz = write_blobs(tmp_path / 'blobs.npz')
    cfg = blob_solver_cfg(npz, tmp_path / 'run', hooks=[])
    solver_cfg = cfg['SOLVER']
    solver_cfg['TEST_DATA'] = dict(solver_cfg.pop('TRAIN_DATA'), SHUFFLE=False)
    del solver_cfg['OPTIMIZER']
    solver = build_solver(cfg)
    with caplog.at_level('INFO'):
        solver.solve()
    solver.close()
    kinds = [r['kind'] for r in read_metrics(tmp_path / 'run' / 'metrics.jsonl') if r['kind'] in ('eval', 'test')]
    assert kinds == ['eval', 'test']
    assert set(solver.epoch_outputs) == {'eval', 'test'} and solver.progress.total_iter == 0
    assert 'no best checkpoint' not in caplog.text  # nothing trained: the model's own weights, no word about it


def test_two_metrics_reporting_one_name_are_one_error_naming_both(tmp_path):
    """The later one hid the earlier in epoch_outputs, the log and SAVE_BEST_BY without a word."""
    npz = write_blobs(tmp_path / 'blobs.npz')
    metrics = [{'NAME': 'AccuracyMetric'}, {'NAME': 'AccuracyMetric', 'TOPK': [1, 3]}]
    with pytest.raises(ConfigError) as refused:
        build_solver(blob_solver_cfg(npz, tmp_path / 'w', METRICS=metrics))
    assert str(refused.value) == (
        "SOLVER.METRICS[1]: AccuracyMetric reports 'accuracy', as SOLVER.METRICS[0] (AccuracyMetric) does, and one"
        ' would hide the other; keep one of them'
    )


def test_an_extra_key_hiding_a_model_output_of_other_values_is_named_once(tmp_path, caplog):
    """A reference ``u_exact`` from a file beside the model's exact_solution: the metrics read the file's, silently."""
    blobs = np.load(write_blobs(tmp_path / 'blobs.npz'))
    npz = tmp_path / 'with_logits.npz'
    np.savez(npz, x=blobs['x'], y=blobs['y'], logits=np.zeros((len(blobs['y']), 3), np.float32))
    solver = build_solver(blob_solver_cfg(str(npz), tmp_path / 'w', EXTRA_KEYS=['label', 'logits']))
    with caplog.at_level(logging.WARNING, logger='scepter_like'):
        solver.solve()
    said = [r.getMessage() for r in caplog.records if 'in the model outputs too' in r.getMessage()]
    assert said == [
        "SOLVER.EXTRA_KEYS: ['logits'] are in the model outputs too, with other values; the metrics read"
        " the batch's, not the model's"
    ]  # once over two passes; the label the Classifier passes on is the same


def test_freeze_keeps_the_named_parameters_out_of_training_and_a_typo_is_one_line(tmp_path):
    cfg = blob_solver_cfg(write_blobs(tmp_path / 'blobs.npz'), tmp_path / 'w')
    cfg['SOLVER']['MODEL']['FREEZE'] = ['backbone.0']  # the first layer, as a finetuning user fixes a stem
    solver = build_solver(cfg)
    before = {k: v.clone() for k, v in solver.unwrapped_model.state_dict().items()}
    solver.solve()
    after = solver.unwrapped_model.state_dict()
    for key in before:
        assert torch.equal(after[key], before[key]) == key.startswith('backbone.0.'), key
    cfg['SOLVER']['MODEL']['FREEZE'] = ['backbone.7']
    cfg['SOLVER']['WORK_DIR'] = str(tmp_path / 'typo')
    with pytest.raises(ConfigError, match=r"^SOLVER.MODEL.FREEZE: 'backbone.7' names no parameter of the model \(its"):
        build_solver(cfg)
