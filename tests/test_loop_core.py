"""The loop's core without a solver: TrainingProgress, the stage table, and the step owner (WeightUpdater)."""

import logging

import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.config import Config
from scepter_like.errors import CheckpointError, TrainingError
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.loop_state import StepState, TrainingProgress
from scepter_like.solver.optimization import UpdateSettings, WeightUpdater
from scepter_like.solver.stages import StageTable

LOGGER = logging.getLogger('scepter_like.test')

# -- TrainingProgress ------------------------------------------------------------------------------


def test_accumulation_groups_close_at_the_epoch_end_with_a_short_last_group():
    progress = TrainingProgress(max_epochs=1)
    progress.start_train_epoch(7)
    groups = []
    for _ in range(7):
        groups.append(progress.accumulation_group(3))
        progress.count_step('train', groups[-1][1])
    assert groups == [(3, False), (3, False), (3, True), (3, False), (3, False), (3, True), (1, True)]
    assert progress.optimizer_steps == 3 and progress.total_iter == 7


def test_a_resume_inside_a_group_averages_the_rest_of_that_group_over_its_own_length():
    """On another world size the checkpoint's group end maps to iteration 3 of groups of 2: (3), then (4, 5), ..."""
    progress = TrainingProgress(max_epochs=1)
    progress.iters['train'] = 3  # where the resume placed the epoch
    progress.start_train_epoch(8)
    groups = []
    for _ in range(5):
        groups.append(progress.accumulation_group(2))
        progress.count_step('train', groups[-1][1])
    assert groups == [(1, True), (2, False), (2, True), (2, False), (2, True)]


def test_max_steps_cuts_the_epoch_and_the_accumulation_group():
    progress = TrainingProgress(max_epochs=3, max_steps=5)
    assert progress.start_train_epoch(4) == (0, 4)
    for _ in range(4):
        progress.count_step('train', True)
    progress.finish_train_epoch()
    progress.next_epoch()
    assert progress.start_train_epoch(4) == (0, 1)  # one step left of MAX_STEPS
    assert progress.accumulation_group(4) == (1, True)  # the group is cut with it and closes
    progress.count_step('train', True)
    assert progress.train_finished() and progress.steps_left() == 0


def test_folds_split_a_pass_into_epochs():
    progress = TrainingProgress(max_epochs=4, num_folds=2)
    windows = []
    for _ in range(4):
        windows.append((progress.pass_index, progress.start_train_epoch(9)))
        progress.iters['train'] = progress.epoch_iters['train']
        progress.finish_train_epoch()
        progress.next_epoch()
    assert windows == [(0, (0, 4)), (0, (4, 9)), (1, (0, 4)), (1, (4, 9))]


def test_folds_apply_only_with_several_processes_as_in_scepter():
    """scepter's BaseSolver reads NUM_FOLDS only when world_size > 1: one process trains whole passes."""
    several, one = TrainingProgress(max_epochs=4, num_folds=2), TrainingProgress(max_epochs=4, num_folds=2)
    several.plan_folds(9, world_size=2)
    one.plan_folds(9, world_size=1)
    assert (several.num_folds, several.epoch_iters['train']) == (2, 4)
    assert (one.num_folds, one.epoch_iters['train']) == (1, 9)


def test_one_process_with_num_folds_trains_whole_epochs(tmp_path):
    from helpers import blob_solver_cfg, build_solver, write_blobs

    solver = build_solver(blob_solver_cfg(write_blobs(tmp_path / 'b.npz'), tmp_path / 'w', NUM_FOLDS=2))
    solver.solve()  # 6 batches a pass, 2 epochs: 12 steps (was 6: two epochs of half a pass)
    assert (solver.num_folds, solver.progress.total_iter) == (1, 12)


def test_progress_state_round_trip_keeps_a_pending_evaluation():
    progress = TrainingProgress(max_epochs=3)
    progress.start_train_epoch(5)
    for _ in range(5):
        progress.count_step('train', True)
    progress.finish_train_epoch()
    state = progress.state_dict(eval_pending=True)
    assert state['epoch'] == 1 and state['iter'] == 0 and state['eval_pending']
    again = TrainingProgress(max_epochs=3)
    again.load_state_dict(state)
    # resumed between the epoch and its evaluation: solve() evaluates epoch 0 first, then goes on
    assert (again.epoch, again.epoch_finished, again.total_iter) == (0, True, 5)


# -- the stage table -------------------------------------------------------------------------------


class _Recorder(Hook):
    def __init__(self, name, priority, log):
        super().__init__(Config({'PRIORITY': priority}))
        self.name, self.log = name, log

    def before_iter(self, solver):
        self.log.append(self.name)


class _Quiet(Hook):
    """Implements nothing per step."""


def test_stage_table_orders_by_priority_keeps_ties_and_adds_callbacks_last():
    log = []
    hooks = [_Recorder('b', 100, log), _Recorder('a', 50, log), _Recorder('c', 100, log), _Quiet(None)]
    table = StageTable({'train': sorted(hooks, key=lambda h: h.priority), 'eval': [], 'test': []})
    table.add_callback('train', 'before_iter', lambda solver: log.append('callback'))
    for fn in table.functions('train', 'before_iter'):
        fn(None)
    assert log == ['a', 'b', 'c', 'callback']
    assert table.functions('train', 'after_iter') == []  # no hook implements it: nothing to call per step
    assert 'train before_iter' in table.describe() and '_Recorder(50) -> _Recorder(100)' in table.describe()


# -- the step owner --------------------------------------------------------------------------------


def _updater(model, accumulate=1, policy='stop', clip=-1.0, optimizer=None, max_nonfinite=10):
    solver_cfg = Config(
        {
            'OPTIMIZER': optimizer or {'NAME': 'SGD', 'LEARNING_RATE': 0.1},
            'LR_SCHEDULER': None,
            'OPTIMIZER_PHASES': [],
            'LOSS_AGGREGATOR': None,
            'LOSS_WEIGHTS': {},
            'ACCU_STEP': accumulate,
            'DTYPE': 'float32',
        },
        path='SOLVER',
    )
    updater = WeightUpdater(solver_cfg, LOGGER)
    settings = UpdateSettings(
        accumulate_steps=accumulate, gradient_clip=clip, nonfinite_policy=policy, max_nonfinite_steps=max_nonfinite
    )
    updater.configure(settings, active=True, seed=0)
    updater.set_up([p for p in model.parameters()], torch.device('cpu'), None)
    return updater


def _step(updater, model, x, y, index=0, group=(1, True)):
    step = StepState()
    step.begin(index, {'x': x, 'y': y}, *group)
    step.loss = updater.loss_of({'loss': torch.nn.functional.mse_loss(model(x), y)}, step)
    took = updater.update(step, recompute=lambda: _recomputed(updater, model, step), after_backward=lambda: None)
    return step, took


def _recomputed(updater, model, step):
    return updater.loss_of({'loss': torch.nn.functional.mse_loss(model(step.batch['x']), step.batch['y'])}, step)


def _data(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g)


def test_update_accumulates_micro_batches_into_the_step_of_their_union():
    torch.manual_seed(0)
    plain, accumulated = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    accumulated.load_state_dict(plain.state_dict())
    x, y = _data()
    _, took = _step(_updater(plain), plain, x, y)
    assert took
    updater = _updater(accumulated, accumulate=2)
    took_first = _step(updater, accumulated, x[:4], y[:4], 0, (2, False))[1]
    took_second = _step(updater, accumulated, x[4:], y[4:], 1, (2, True))[1]
    assert (took_first, took_second) == (False, True)  # a micro-step is not an optimizer step
    for a, b in zip(plain.parameters(), accumulated.parameters()):
        torch.testing.assert_close(a, b)


def test_a_nonfinite_step_is_skipped_and_too_many_in_a_row_stop():
    model = torch.nn.Linear(3, 1)
    updater = _updater(model, policy='skip', max_nonfinite=2)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = _data()
    _, took = _step(updater, model, x * float('nan'), y)
    assert not took and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())  # the bad gradients are gone
    assert _step(updater, model, x, y, 1)[1] and updater.nonfinite_in_a_row == 0
    _step(updater, model, x * float('nan'), y, 2)
    with pytest.raises(TrainingError, match='2 non-finite losses in a row'):
        _step(updater, model, x * float('nan'), y, 3)
    assert updater.nonfinite_total == 3


def test_clipping_bounds_the_step_and_logs_the_norm_before_clipping():
    model = torch.nn.Linear(3, 1)
    x, y = _data()
    torch.nn.functional.mse_loss(model(x), y).backward()
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    model.zero_grad()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    step, _ = _step(_updater(model, clip=1e-3), model, x, y)  # SGD, lr 0.1
    moved = torch.linalg.vector_norm(torch.cat([p.detach().flatten() for p in model.parameters()]) - before)
    assert step.outputs['grad_norm'] == pytest.approx(norm.item()) and norm > 1e-3
    assert moved.item() == pytest.approx(0.1 * 1e-3, rel=1e-3)


def test_a_closure_optimizer_reuses_the_steps_own_evaluation():
    model = torch.nn.Linear(3, 1).double()
    lbfgs = {'NAME': 'LBFGS', 'LEARNING_RATE': 1.0, 'MAX_ITER': 1, 'MAX_EVAL': 4, 'LINE_SEARCH_FN': 'strong_wolfe'}
    updater = _updater(model, optimizer=lbfgs)
    assert updater.takes_closure
    calls = []
    forward = model.forward
    model.forward = lambda x: calls.append(1) or forward(x)
    x, y = _data()
    _step(updater, model, x.double(), y.double())
    # the step's own forward, then the line search's evaluations (each a fresh forward)
    assert 1 < len(calls) <= 1 + 4


def test_updater_state_round_trips_and_old_checkpoints_load():
    model = torch.nn.Linear(3, 1)
    updater = _updater(model, optimizer={'NAME': 'Adam', 'LEARNING_RATE': 0.01}, policy='skip')
    x, y = _data()
    _step(updater, model, x, y)
    _step(updater, model, x * float('nan'), y, 1)
    state = updater.state_dict()
    assert set(state) == {'optimizer', 'lr_scheduler', 'loss_aggregator', 'update'}
    fresh = _updater(torch.nn.Linear(3, 1), optimizer={'NAME': 'Adam', 'LEARNING_RATE': 0.01}, policy='skip')
    progress = TrainingProgress(1)
    fresh.load_state_dict(state, 0, progress, 'ckpt')
    assert fresh.optimizer.state_dict()['state'][0]['step'] == 1 and fresh.nonfinite_total == 1
    # written before the updater: the counts lived in BackwardHook's hook state
    old = {k: v for k, v in state.items() if k != 'update'}
    old['hooks'] = {'train.0.BackwardHook': {'nonfinite_in_a_row': 4, 'nonfinite_total': 6}}
    fresh.load_state_dict(old, 0, progress, 'old ckpt')
    assert (fresh.nonfinite_in_a_row, fresh.nonfinite_total) == (4, 6)
    with pytest.raises(CheckpointError, match='saved in optimizer phase 2; this config has 1'):
        fresh.load_state_dict(state, 2, progress, 'ckpt')


# -- steps count when taken, in a whole run ----------------------------------------------------------


@HOOKS.register_class()
class NanBatchHook(Hook):
    """Makes the batches of the given 1-based train steps NaN (so their loss is)."""

    para_dict = {'STEPS': {'value': [], 'description': 'steps to spoil'}}

    def before_iter(self, solver):
        if solver.mode == 'train' and solver.progress.total_iter + 1 in self.cfg.STEPS:
            batch = solver.step.batch
            batch['img'] = batch['img'] * float('nan')


def test_skipped_steps_advance_neither_the_schedule_nor_the_ema(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz', n=160)  # 10 steps an epoch at batch 16
    hooks = [
        {'NAME': 'BackwardHook', 'NONFINITE_POLICY': 'skip', 'MAX_NONFINITE_STEPS': 2},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False, 'WARMUP_EPOCHS': 0},
        {'NAME': 'EMAHook', 'DECAY': 0.9},
        {'NAME': 'NanBatchHook', 'STEPS': [5, 17, 30]},
    ]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=4, EVAL_DATA=None)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'LinearLR', 'START_FACTOR': 1.0, 'END_FACTOR': 0.0, 'TOTAL_ITERS': 50}
    solver = build_solver(cfg)
    solver.solve()
    ema = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'EMAHook')
    assert solver.progress.total_iter == 40 and solver.progress.optimizer_steps == 37 and ema.updates == 37
    assert solver.optimizer.param_groups[0]['lr'] == pytest.approx(0.1 * (1 - 37 / 50))


# -- a checkpoint written before the updater ---------------------------------------------------------

OLD_CHECKPOINT = __file__.rsplit('/', 1)[0] + '/data/pre_updater_step3.pth'


def _old_run_cfg(npz, work, **keys):
    """The run that wrote tests/data/pre_updater_step3.pth at step 3 (commit 559ce20, before the updater)."""
    hooks = [
        {'NAME': 'BackwardHook', 'NONFINITE_POLICY': 'skip', 'GRADIENT_CLIP': 1.0},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False, 'WARMUP_EPOCHS': 0},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 3, 'SAVE_NAME_PREFIX': 'old'},
    ]
    cfg = blob_solver_cfg(npz, work, hooks=hooks, **keys)
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'Adam', 'LEARNING_RATE': 0.01}
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 2, 'GAMMA': 0.5}
    return cfg


def test_a_checkpoint_written_before_the_updater_resumes_bit_exactly(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz')
    whole = build_solver(_old_run_cfg(npz, tmp_path / 'whole'))
    whole.solve()
    resumed = build_solver(_old_run_cfg(npz, tmp_path / 'resumed', RESUME_FROM=OLD_CHECKPOINT))
    assert resumed.progress.total_iter == 3
    resumed.solve()
    for key, value in whole.unwrapped_model.state_dict().items():
        assert torch.equal(value, resumed.unwrapped_model.state_dict()[key]), key
    assert whole.optimizer.state_dict()['state'][0]['step'] == resumed.optimizer.state_dict()['state'][0]['step']
