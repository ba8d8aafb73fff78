"""Closure optimizers (L-BFGS), optimizer phases, loss aggregators in the solver, SOLVER.DTYPE, resampled points.

The problem is the Poisson PINN of configs/pinn/poisson2d.yaml on a few points, so each run
takes a second or two.
"""

import copy
import os
import re

import pytest
import torch
import yaml
from conftest import REPO, run_cli, run_train_killed_at
from helpers import blob_solver_cfg, build_solver, write_blobs
from optimization_support import GradCaptureHook
from test_checkpoint_resume import assert_same

import tasks.pinn  # noqa: F401  (registers PoissonPINN)
from scepter_like.errors import ConfigError
from scepter_like.model.loss_aggregators.pcgrad import project_conflicting

POISSON_CFG = os.path.join(REPO, 'configs', 'pinn', 'poisson2d.yaml')
SUPPORT = os.path.join(REPO, 'tests', 'ckpt_support.py')
OWN_SUPPORT = os.path.join(REPO, 'tests', 'optimization_support.py')
LBFGS = {'NAME': 'LBFGS', 'LEARNING_RATE': 1.0, 'MAX_ITER': 1, 'MAX_EVAL': 10, 'LINE_SEARCH_FN': 'strong_wolfe'}


def poisson_cfg(work_dir, steps, **solver_keys):
    """The Poisson config on 48 + 16 points (full batch: one step per epoch), an 11x11 grid, no hooks."""
    with open(POISSON_CFG) as f:
        cfg = yaml.safe_load(f)
    solver = cfg['SOLVER']
    solver.update(WORK_DIR=str(work_dir), MAX_EPOCHS=steps, EVAL_INTERVAL=steps, OPTIMIZER_PHASES=[])
    solver['TRAIN_DATA']['SETS']['pde']['COUNT'] = 48
    solver['TRAIN_DATA']['SETS']['bc']['COUNT'] = 16
    solver['EVAL_DATA'].update(RESOLUTION=[11, 11], BATCH_SIZE=121)
    solver['TRAIN_HOOKS'] = [{'NAME': 'BackwardHook'}]
    solver['EVAL_HOOKS'] = []
    solver.update(solver_keys)
    return cfg


def full_batch(solver):
    return next(iter(solver.datas['train'].iterate()))


def test_lbfgs_through_backward_hook_equals_a_hand_written_lbfgs_loop_in_float64(tmp_path):
    solver = build_solver(poisson_cfg(tmp_path / 'run', 5, OPTIMIZER=LBFGS, DTYPE='float64'))
    hand = copy.deepcopy(solver.unwrapped_model)
    batch = full_batch(solver)
    assert batch['pde.x'].dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in solver.unwrapped_model.parameters())
    solver.solve()
    solver.close()

    opt = torch.optim.LBFGS(hand.parameters(), lr=1.0, max_iter=1, max_eval=10, line_search_fn='strong_wolfe')
    hand.train()

    def closure():
        opt.zero_grad(set_to_none=True)
        out = hand(**batch)
        loss = out['loss_pde'] + out['loss_bc']
        loss.backward()
        return loss.detach()

    first = float(closure())
    for _ in range(5):
        opt.step(closure)
    assert float(closure()) < first / 2  # L-BFGS lowered the loss
    for mine, theirs in zip(solver.unwrapped_model.parameters(), hand.parameters()):
        assert torch.equal(mine, theirs)
    assert solver.optimizer.state_dict()['state'][0]['func_evals'] == opt.state_dict()['state'][0]['func_evals']


def test_lbfgs_line_search_evaluates_the_loss_an_override_of_run_step_train_defines(tmp_path):
    """L-BFGS calls its closure several times a step: every evaluation goes through run_step_train, so a subclass
    that weights the terms itself trains on its loss (the re-evaluations once took the model's default sum)."""
    from scepter_like.solver import SOLVERS
    from scepter_like.solver.train_val_solver import TrainValSolver

    @SOLVERS.register_class('BcWeightedSolver')
    class BcWeightedSolver(TrainValSolver):
        def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
            out = super().run_step_train(batch_data, batch_idx, step, rank)
            return dict(out, loss=out['loss_pde'] + 10 * out['loss_bc'])

    try:
        solver = build_solver(
            poisson_cfg(tmp_path / 'run', 4, OPTIMIZER=LBFGS, DTYPE='float64', NAME='BcWeightedSolver')
        )
        hand = copy.deepcopy(solver.unwrapped_model)
        batch = full_batch(solver)
        solver.solve()
        solver.close()
    finally:
        SOLVERS._entries.pop('BcWeightedSolver', None)

    opt = torch.optim.LBFGS(hand.parameters(), lr=1.0, max_iter=1, max_eval=10, line_search_fn='strong_wolfe')
    hand.train()

    def closure():
        opt.zero_grad(set_to_none=True)
        out = hand(**batch)
        loss = out['loss_pde'] + 10 * out['loss_bc']
        loss.backward()
        return loss.detach()

    for _ in range(4):
        opt.step(closure)
    assert opt.state_dict()['state'][0]['func_evals'] > 4  # the line search evaluated the closure again
    for mine, theirs in zip(solver.unwrapped_model.parameters(), hand.parameters()):
        assert torch.equal(mine, theirs)


def test_float64_casts_float32_data_and_trains(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz')  # float32 arrays
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'run', DTYPE='float64', MAX_EPOCHS=1))
    assert (
        solver.datas['train'].dataset.arrays['img'].dtype == torch.float32
    )  # the loop casts each batch; no float64 copy
    solver.solve()
    solver.close()
    assert all(p.dtype == torch.float64 for p in solver.unwrapped_model.parameters())
    assert torch.get_default_dtype() == torch.float32  # the run's dtype did not leak out of set-up
    logits = solver.predict({'img': solver.datas['eval'].dataset.arrays['img'][:5].numpy()})['logits']
    assert logits.dtype == 'float64' and logits.shape == (5, 3)  # float32 inputs are cast for the model
    assert 0.0 <= solver.epoch_outputs['eval']['accuracy'] <= 1.0


def test_the_optimizer_switches_at_its_step_and_the_schedule_follows(tmp_path):
    cfg = poisson_cfg(
        tmp_path / 'run',
        6,
        LR_SCHEDULER={'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5},
        OPTIMIZER_PHASES=[{'AT_STEP': 3, 'OPTIMIZER': dict(LBFGS, LEARNING_RATE=0.5)}],
        TRAIN_HOOKS=[{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0}, {'NAME': 'LogHook'}],
    )
    solver = build_solver(cfg)
    seen = []
    solver.register_callback_on_iter_end(
        lambda s: seen.append((type(s.optimizer).__name__, s.optimizer.param_groups[0]['lr']))
    )
    solver.solve()
    solver.close()
    # Adam under StepLR for 3 epochs (halved before each later epoch), then L-BFGS at its own constant lr
    assert seen == [('Adam', 0.001), ('Adam', 0.0005), ('Adam', 0.00025)] + [('LBFGS', 0.5)] * 3
    assert solver.progress.phase == 1 and solver.lr_scheduler is None


def test_a_later_phase_scheduler_gets_an_lr_hook_and_starts_at_its_initial_rate(tmp_path):
    cfg = poisson_cfg(
        tmp_path / 'run',
        5,
        OPTIMIZER_PHASES=[
            {'AT_EPOCH': 2, 'OPTIMIZER': {'NAME': 'SGD', 'LEARNING_RATE': 0.1}, 'LR_SCHEDULER': {
                'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5}}
        ],
    )  # fmt: skip
    solver = build_solver(cfg)  # TRAIN_HOOKS has no LrHook: the phase's scheduler needs one
    assert [type(h).__name__ for h in solver.hooks_dict['train']] == ['BackwardHook', 'LogHook', 'LrHook']
    seen = []
    solver.register_callback_on_iter_end(lambda s: seen.append(s.optimizer.param_groups[0]['lr']))
    solver.solve()
    solver.close()
    assert seen == [0.001, 0.001, 0.1, 0.05, 0.025]  # the phase's first epoch at the scheduler's initial rate


def test_float64_weights_describe_their_dtype_and_rebuild_in_it(tmp_path):
    from scepter_like.model.description import describe, model_from_description

    solver = build_solver(poisson_cfg(tmp_path / 'run', 1, DTYPE='float64'))
    desc = describe(solver.unwrapped_model)
    assert desc['dtype'] == 'float64'
    rebuilt = model_from_description(desc, 'test')
    assert all(p.dtype == torch.float64 for p in rebuilt.parameters())
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize(
    'weight, message',
    [
        (None, 'a loss weight is a number >= 0 \\(0 switches the term off\\), got null'),
        ('10', "a loss weight is a number >= 0 .*, got '10'"),
        ([10], 'a loss weight is a number >= 0 .*, got \\[10\\]'),
        (-1.0, 'the weight -1.0 is negative: the loss would grow loss_down instead of shrinking it'),
    ],
)
def test_a_loss_weight_that_is_no_number_or_negative_is_an_error_at_set_up(tmp_path, weight, message):
    cfg = blob_solver_cfg(
        write_blobs(tmp_path / 'blobs.npz'),
        tmp_path / 'run',
        MODEL={'NAME': 'TwoTargetsModel'},
        LOSS_WEIGHTS={'loss_down': weight},
        METRICS=[],
        MAX_EPOCHS=1,
    )
    with pytest.raises(ConfigError, match=f'^SOLVER\\.LOSS_WEIGHTS\\.loss_down: {message}'):
        build_solver(cfg)  # at set-up: no train step reaches the aggregator's product
    cfg['SOLVER']['LOSS_WEIGHTS'] = {'loss_down': 0}  # 0 switches a term off
    build_solver(cfg).solve()


def test_pcgrad_in_the_solver_steps_with_the_projected_gradient(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz')
    cfg = blob_solver_cfg(
        npz,
        tmp_path / 'run',
        hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'GradCaptureHook'}],
        MODEL={'NAME': 'TwoTargetsModel'},
        LOSS_AGGREGATOR={'NAME': 'PCGrad'},
        LOSS_WEIGHTS={'loss_down': 2.0},
        METRICS=[],
        MAX_EPOCHS=1,
    )
    solver = build_solver(cfg)
    hand = copy.deepcopy(solver.unwrapped_model)
    capture = next(h for h in solver.hooks_dict['train'] if isinstance(h, GradCaptureHook))
    solver.solve()
    solver.close()
    # the first step's gradient by hand: each weighted term's gradient, projected in the order of (seed, step 0)
    hand.train()
    out = hand(**capture.batches[0])
    params = list(hand.parameters())
    rows = torch.stack(
        [
            torch.cat([g.reshape(-1) for g in torch.autograd.grad(term, params, retain_graph=True)])
            for term in (out['loss_up'], 2.0 * out['loss_down'])
        ]
    )
    assert torch.dot(rows[0], rows[1]) < 0  # they conflict, so the projection changes the step
    expected = project_conflicting(rows, solver.loss_aggregator.orders(0)).sum(0)
    got = torch.cat([g.reshape(-1) for g in capture.grads[0]])
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, rows.sum(0))


def test_resampled_points_change_with_the_pass(tmp_path):
    cfg = poisson_cfg(tmp_path / 'run', 3)
    cfg['SOLVER']['TRAIN_DATA']['SETS']['pde']['RESAMPLE_EVERY'] = 2
    cfg['SOLVER']['TRAIN_HOOKS'].append({'NAME': 'GradCaptureHook'})
    solver = build_solver(cfg)
    capture = next(h for h in solver.hooks_dict['train'] if isinstance(h, GradCaptureHook))
    solver.solve()
    solver.close()
    first, second, third = (b['pde.x'] for b in capture.batches)
    assert torch.equal(first, second) and not torch.equal(second, third)  # round 0 for passes 0-1, then round 1


# -- kill and resume across the switch (subprocesses) ----------------------------------------------
def kill_job(tmp_path):
    cfg = poisson_cfg(
        tmp_path / 'unused',
        12,
        OPTIMIZER_PHASES=[{'AT_STEP': 6, 'OPTIMIZER': LBFGS}],
        LOSS_AGGREGATOR={'NAME': 'Relobralo'},
        TRAIN_HOOKS=[
            {'NAME': 'BackwardHook'},
            {'NAME': 'LogHook', 'LOG_INTERVAL': 1},
            {'NAME': 'CheckpointHook', 'INTERVAL': 100, 'STEP_INTERVAL': 2, 'SAVE_LAST': True, 'KEEP_LAST': 0},
            {'NAME': 'KillHook'},
        ],
    )
    cfg['SOLVER']['TRAIN_DATA']['SETS']['pde']['RESAMPLE_EVERY'] = 4
    path = tmp_path / 'job.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_job(cfg, work_dir, kill_at='', resume=False):
    args = ['--cfg', cfg, '--import', SUPPORT, f'SOLVER.WORK_DIR={work_dir}']
    if resume:
        args.append('SOLVER.RESUME_FROM=auto')
    res = run_train_killed_at(kill_at, *args)
    assert res.returncode == (-9 if kill_at else 0), res.stderr[-3000:]
    return res


def final_state(work_dir):
    ckpt = torch.load(os.path.join(work_dir, 'checkpoints', 'checkpoint-last.pth'), weights_only=True)
    ckpt.pop('meta')
    return ckpt


def test_kill_and_resume_across_the_optimizer_switch_is_bit_exact(tmp_path):
    cfg = kill_job(tmp_path)
    alone, chain = tmp_path / 'alone', tmp_path / 'chain'
    res = run_job(cfg, alone)
    assert 'optimizer phase 1 of 1 from step 6: LBFGS' in res.stdout
    # killed in the Adam phase (last checkpoint: step 2), right at the switch (checkpoint at step 6, in
    # phase 0, killed as step 7 begins), and in the L-BFGS phase (checkpoint at step 8, phase 1)
    for kill, resumed_at in (('train:3', None), ('train:6', 2), ('train:9', 6), ('', 8)):
        res = run_job(cfg, chain, kill_at=kill, resume=resumed_at is not None)
        if resumed_at is not None:
            assert re.search(rf'resumed from \S+ after step {resumed_at}: ', res.stdout)
    end = final_state(chain)
    assert end['solver']['phase'] == 1 and 'history' in str(end['optimizer']['param_groups'])
    assert_same(final_state(alone), end)


# -- bad input: one error line, exit 2 --------------------------------------------------------------
ERRORS = {
    'lbfgs with accumulation': (
        ['SOLVER.ACCU_STEP=2'],
        r'^error: SOLVER\.OPTIMIZER_PHASES\[0\]\.OPTIMIZER: LBFGS re-evaluates the loss .*ACCU_STEP',
    ),
    'float64 with amp': (
        ['SOLVER.DTYPE=float64', 'SOLVER.TRAIN_HOOKS.0.USE_AMP=true'],
        r'^error: SOLVER\.DTYPE: float64 cannot run under AMP',
    ),
    'unknown aggregator': (['SOLVER.LOSS_AGGREGATOR={NAME: Relobrallo}'], r'did you mean Relobralo'),
    'strong_wolfe without max_eval': (
        ['SOLVER.OPTIMIZER_PHASES.0.OPTIMIZER.LINE_SEARCH_FN=strong_wolfe'],
        r'^error: SOLVER\.OPTIMIZER_PHASES\[0\]\.OPTIMIZER: LBFGS with LINE_SEARCH_FN strong_wolfe needs MAX_EVAL',
    ),
    'both starts': (['SOLVER.OPTIMIZER_PHASES.0.AT_EPOCH=3'], r'give exactly one of AT_STEP and AT_EPOCH'),
    'swa_lr with phases': (
        ['SOLVER.TRAIN_HOOKS+={NAME: SWAHook, SWA_LR: 0.01}'],
        r'^error: SOLVER\.TRAIN_HOOKS\[\d\]\.SWA_LR: SWALR anneals one optimizer, and SOLVER\.OPTIMIZER_PHASES',
    ),
    'a later phase key, by --print-config': (
        ['--print-config', 'SOLVER.OPTIMIZER_PHASES.0.OPTIMIZER.MAX_ITR=1'],
        r'^error: SOLVER\.OPTIMIZER_PHASES\[0\]\.OPTIMIZER\.MAX_ITR: unknown key for OPTIMIZERS\.LBFGS; did you mean'
        r' MAX_ITER',
    ),
}


@pytest.mark.parametrize('case', sorted(ERRORS))
def test_bad_optimization_settings_are_one_error_line(case, tmp_path):
    overrides, pattern = ERRORS[case]
    res = run_cli('run_train.py', '--cfg', POISSON_CFG, f'SOLVER.WORK_DIR={tmp_path}', *overrides)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(pattern, lines[0]), res.stderr[-2000:]
    assert ' step ' not in res.stdout


def test_lbfgs_and_pcgrad_under_two_process_torchrun(tmp_path):
    """Both ranks take the same line-search path (the closure's loss is averaged) and end with equal weights."""
    from test_distributed import torchrun

    cfg = poisson_cfg(
        tmp_path / 'run',
        6,
        OPTIMIZER_PHASES=[{'AT_STEP': 3, 'OPTIMIZER': LBFGS}],
        LOSS_AGGREGATOR={'NAME': 'PCGrad'},
        TRAIN_HOOKS=[{'NAME': 'BackwardHook'}, {'NAME': 'GradCaptureHook'}, {'NAME': 'WeightDumpHook'}],
    )
    path = tmp_path / 'job.yaml'
    path.write_text(yaml.safe_dump(cfg))
    proc, logs = torchrun(str(path), ['--import', OWN_SUPPORT], str(tmp_path), 'lbfgs')
    assert proc.returncode == 0, proc.stderr[-3000:] + str(logs)
    dumps = [torch.load(tmp_path / 'run' / f'weights-rank{r}.pt', weights_only=True) for r in (0, 1)]
    assert dumps[0]['optimizer'] == 'LBFGS' and dumps[0]['func_evals'] == dumps[1]['func_evals'] > 3
    for a, b in zip(dumps[0]['params'], dumps[1]['params']):
        assert torch.equal(a, b)


@pytest.mark.parametrize('by_epoch', [False, True])
def test_a_phase_beginning_inside_an_epoch_runs_its_first_step_at_the_warmed_rate(tmp_path, by_epoch):
    """Warmup counts over the whole run: a phase that begins at step 8 of 12 (epoch 2 of 2, 6 steps each) runs at
    its rate times the warmup factor from that step on (it ran at the new optimizer's raw rate until LrHook's turn)."""
    npz = write_blobs(tmp_path / 'blobs.npz')  # 96 samples: 6 steps of 16 an epoch
    lr_hook = {'NAME': 'LrHook', 'WARMUP_EPOCHS': 2, 'WARMUP_START_LR': 0.01, 'SET_BY_EPOCH': by_epoch}
    phase = {'AT_STEP': 8, 'OPTIMIZER': {'NAME': 'Adam', 'LEARNING_RATE': 0.2}}
    cfg = blob_solver_cfg(npz, tmp_path / 'w', [{'NAME': 'BackwardHook'}, lr_hook], OPTIMIZER_PHASES=[phase])
    solver = build_solver(cfg)
    seen = []
    solver.register_callback_on_iter_begin(lambda s: seen.append(s.optimizer.param_groups[0]['lr']))
    solver.solve()
    solver.close()
    ratio = 0.01 / 0.1  # WARMUP_START_LR over the first phase's rate
    done = 1 / 2 if by_epoch else 8 / 12  # warmup done at the switch: epochs 1 of 2, or optimizer steps 8 of 12
    assert seen[8] == pytest.approx(0.2 * (ratio + (1 - ratio) * done))
