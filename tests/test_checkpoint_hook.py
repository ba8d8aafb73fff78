"""CheckpointHook in process: KEEP_LAST pruning, SAVE_BEST in both directions, best
tracking and a user hook's state across a resume, and the checkpoint's contents."""

import os

import ckpt_support  # noqa: F401  (registers CounterHook)
import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.errors import ConfigError


def ckpt_hooks(**keys):
    return [
        {'NAME': 'BackwardHook'},
        {'NAME': 'CheckpointHook', 'INTERVAL': 1, **keys},
        {'NAME': 'DistSamplerHook'},
        {'NAME': 'CounterHook'},
    ]


def run(tmp_path, epochs, hooks, **solver_keys):
    """Train; returns the solver and the eval accuracy of each epoch, in order."""
    npz = write_blobs(tmp_path / 'blobs.npz')
    cfg = blob_solver_cfg(npz, tmp_path / 'run', hooks=hooks, MAX_EPOCHS=epochs, **solver_keys)
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'SGD', 'LEARNING_RATE': 0.02}
    solver = build_solver(cfg)
    history = []
    solver.register_callback_on_epoch_begin(lambda s: history.append(s.epoch_outputs.get('eval', {}).get('accuracy')))
    solver.solve()
    history = [a for a in history[1:] if a is not None] + [solver.epoch_outputs['eval']['accuracy']]
    return solver, history


def checkpoint_files(tmp_path):
    """The folder's names, ``latest`` first, then the checkpoints sorted by name."""
    return sorted(os.listdir(tmp_path / 'run' / 'checkpoints'), key=lambda name: (name != 'latest', name))


def hook_state(ckpt, name):
    return next(state for key, state in ckpt['hooks'].items() if key.endswith(name))


def test_keep_last_prunes_periodic_checkpoints_and_keeps_the_best_apart(tmp_path):
    solver, history = run(tmp_path, 4, ckpt_hooks(KEEP_LAST=2, SAVE_BEST_BY='+accuracy'))
    assert checkpoint_files(tmp_path) == [
        'latest',
        'checkpoint-best.pth',
        'checkpoint-epoch-3.pth',
        'checkpoint-epoch-4.pth',
    ]
    best = torch.load(tmp_path / 'run' / 'checkpoints' / 'checkpoint-best.pth', weights_only=True)
    first_best = history.index(max(history))
    assert hook_state(best, 'CheckpointHook')['best_value'] == max(history)
    # the best checkpoint holds the model right after the first epoch that reached the best
    assert best['solver']['total_iter'] == (first_best + 1) * 6


def test_save_best_by_minus_metric_keeps_the_lowest(tmp_path):
    solver, history = run(tmp_path, 3, ckpt_hooks(INTERVAL=0, SAVE_BEST_BY='-accuracy'))
    hook = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CheckpointHook')
    assert hook.best_value == min(history) and hook.best_epoch == history.index(min(history)) + 1
    assert checkpoint_files(tmp_path) == ['latest', 'checkpoint-best.pth']


def test_best_tracking_and_hook_state_survive_a_resume(tmp_path):
    hooks = ckpt_hooks(SAVE_BEST_BY='-accuracy', KEEP_LAST=1)
    _, first = run(tmp_path, 2, hooks)
    best_path = tmp_path / 'run' / 'checkpoints' / 'checkpoint-best.pth'
    mtime = os.stat(best_path).st_mtime_ns
    solver, second = run(tmp_path, 4, hooks, RESUME_FROM='auto')
    history = first + second[1:]  # the resumed run starts with the evaluation of epoch 2 already done
    ck = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CheckpointHook')
    assert ck.best_value == min(history) and ck.best_epoch == history.index(min(history)) + 1
    if min(second[1:]) >= min(first):  # no later epoch beat the first run's best: the file stayed
        assert os.stat(best_path).st_mtime_ns == mtime
    counter = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CounterHook')
    assert counter.steps == solver.progress.total_iter == 24  # state_dict / load_state_dict carried the count
    # before_save_checkpoint added a tensor to the file; after_load_checkpoint read it back
    assert torch.equal(counter.loaded_extra, torch.full((2,), 12.0))
    assert checkpoint_files(tmp_path) == ['latest', 'checkpoint-best.pth', 'checkpoint-epoch-4.pth']


def test_checkpoint_holds_the_full_training_state(tmp_path):
    solver, _ = run(tmp_path, 1, ckpt_hooks())
    ckpt = torch.load(tmp_path / 'run' / 'checkpoints' / 'checkpoint-epoch-1.pth', weights_only=True)
    assert {'model', 'optimizer', 'lr_scheduler', 'solver', 'hooks', 'rng', 'meta', 'counter_extra'} <= ckpt.keys()
    assert ckpt['model'].keys() == solver.unwrapped_model.state_dict().keys()
    assert not any(k.startswith('module.') for k in ckpt['model'])
    assert ckpt['solver']['total_iter'] == 6 and ckpt['solver']['eval_pending'] is True
    assert {'python', 'numpy', 'torch'} <= ckpt['rng'][0].keys() and len(ckpt['rng']) == 1
    assert ckpt['meta']['world_size'] == 1 and 'TrainValSolver' in ckpt['meta']['config']
    assert (tmp_path / 'run' / 'checkpoints' / 'latest').read_text().strip() == 'checkpoint-epoch-1.pth'


def test_unknown_best_metric_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"SAVE_BEST_BY: no eval metric is called 'f1'; the metrics give \['acc"):
        run(tmp_path, 1, ckpt_hooks(SAVE_BEST_BY='+f1'))
    # METRICS given, EVAL_DATA not: the evaluation is what is missing
    with pytest.raises(ConfigError, match=r"SAVE_BEST_BY: no eval metric is called 'accuracy': there is no evaluation;"
                       r' give the config EVAL_DATA \(and METRICS\)$'):  # fmt: skip
        run(tmp_path, 1, ckpt_hooks(SAVE_BEST_BY='+accuracy'), EVAL_DATA=None)


def test_plus_on_a_lower_is_better_metric_is_a_config_error_at_set_up(tmp_path):
    """'+mse' kept the checkpoint of the greatest error as best, without a word; unsigned and '-' keep the least."""
    metrics = [{'NAME': 'AccuracyMetric'}, {'NAME': 'MSEMetric', 'KEYS': ['logits', 'logits']}]
    with pytest.raises(ConfigError, match=r"SAVE_BEST_BY: '\+mse', but its metric says less mse is better; write"
                       r" 'mse' or '-mse'"):  # fmt: skip
        run(tmp_path, 1, ckpt_hooks(SAVE_BEST_BY='+mse'), METRICS=metrics)
    assert not os.path.exists(tmp_path / 'run' / 'checkpoints' / 'latest')  # refused before any training
    for best_by in ('mse', '-mse'):
        (tmp_path / best_by).mkdir()
        solver, _ = run(tmp_path / best_by, 1, ckpt_hooks(SAVE_BEST_BY=best_by), METRICS=metrics)
        assert os.path.exists(tmp_path / best_by / 'run' / 'checkpoints' / 'checkpoint-best.pth')


def test_step_checkpoint_due_inside_an_accumulation_group_waits_for_its_end(tmp_path):
    seen = []
    hooks = [
        {'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 4},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 3},
        {'NAME': 'DistSamplerHook'},
    ]
    npz = write_blobs(tmp_path / 'blobs.npz')
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'run', hooks=hooks))
    grads = lambda s: [p.grad for p in s.unwrapped_model.parameters() if p.grad is not None]  # noqa: E731
    solver.register_callback_on_iter_end(
        lambda s: seen.append((s.progress.total_iter, s.step.in_accumulation, len(grads(s))))
    )
    solver.solve()
    # groups per 6-step epoch: steps 1-4 and 5-6; due at 3, 6, 9, 12 -> saved at 4, 6, 10, 12
    assert checkpoint_files(tmp_path) == ['latest'] + [f'checkpoint-step-{s}.pth' for s in (10, 12, 4, 6)]
    assert [(step, acc, n) for step, acc, n in seen if step in (4, 6, 10, 12)] == [
        (s, False, 0) for s in (4, 6, 10, 12)
    ]
    assert (3, True) in [(step, acc) for step, acc, _ in seen]  # step 3 was inside a group


def _equal_tree(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal_tree(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal_tree(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize('async_save, gated', [(False, 'commit_temp'), (True, 'torch_save_temp')])
def test_saves_finish_in_the_background_with_the_same_files(tmp_path, monkeypatch, async_save, gated):
    """Default: the fsync and move run in the writer thread; ASYNC_SAVE: the serialization too."""
    import threading

    from scepter_like.solver.hooks import checkpoint as checkpoint_module

    hooks = dict(KEEP_LAST=2, SAVE_BEST_BY='+accuracy', STEP_INTERVAL=3)
    (tmp_path / 'sync').mkdir()
    sync, _ = run(tmp_path / 'sync', 3, ckpt_hooks(**hooks))

    real, gate, threads = getattr(checkpoint_module, gated), threading.Event(), []

    def gated_step(*args):  # holds the first background step until training has gone on
        threads.append(threading.current_thread().name)
        if len(threads) == 1:
            assert gate.wait(30)
        return real(*args)

    monkeypatch.setattr(checkpoint_module, gated, gated_step)
    npz = write_blobs(tmp_path / 'blobs.npz')
    cfg = blob_solver_cfg(
        npz, tmp_path / 'async' / 'run', hooks=ckpt_hooks(ASYNC_SAVE=async_save, **hooks), MAX_EPOCHS=3
    )
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'SGD', 'LEARNING_RATE': 0.02}
    solver = build_solver(cfg)
    steps_when_released = []
    folder_b = tmp_path / 'async' / 'run' / 'checkpoints'

    def release(s):  # training went on while the first save (step 3) was not yet in place
        if s.progress.total_iter == 4 and not gate.is_set():
            steps_when_released.append(s.progress.total_iter)
            assert not (folder_b / 'latest').exists() and not (folder_b / 'checkpoint-step-3.pth').exists()
            assert any(name.startswith('.tmp.checkpoint-step-3.pth') for name in os.listdir(folder_b)) != async_save
            gate.set()

    solver.register_callback_on_iter_end(release)
    solver.solve()
    assert steps_when_released == [4] and set(threads) == {'checkpoint-writer'}
    folder_a = tmp_path / 'sync' / 'run' / 'checkpoints'
    assert sorted(os.listdir(folder_a)) == sorted(os.listdir(folder_b))
    assert (folder_a / 'latest').read_text() == (folder_b / 'latest').read_text()
    for name in os.listdir(folder_a):
        if name.endswith('.pth'):
            a, b = (torch.load(f / name, weights_only=True) for f in (folder_a, folder_b))
            a['meta'].pop('time'), b['meta'].pop('time'), a['meta'].pop('config'), b['meta'].pop('config')
            assert _equal_tree(a, b), name
    for p, q in zip(sync.unwrapped_model.parameters(), solver.unwrapped_model.parameters()):
        assert torch.equal(p, q)


def test_a_hook_failing_at_the_end_still_lets_the_last_checkpoint_land(tmp_path, monkeypatch):
    import time

    from scepter_like.solver.hooks import checkpoint as checkpoint_module

    real_commit = checkpoint_module.commit_temp

    def slow_commit(tmp, path):  # a disk slower than training: the commit is still running at the end
        time.sleep(0.2)
        real_commit(tmp, path)

    monkeypatch.setattr(checkpoint_module, 'commit_temp', slow_commit)
    hooks = ckpt_hooks(SAVE_LAST=True) + [{'NAME': 'FailAtEndHook'}]
    with pytest.raises(RuntimeError, match='final export failed'):
        run(tmp_path, 2, hooks)
    folder = tmp_path / 'run' / 'checkpoints'
    assert (folder / 'latest').read_text().strip() == 'checkpoint-last.pth'
    assert torch.load(folder / 'checkpoint-last.pth', weights_only=True)['solver']['total_iter'] == 12
    assert not [name for name in os.listdir(folder) if name.startswith('.tmp.')]


def test_metrics_lines_up_to_a_checkpoint_are_on_disk_before_it_is_written(tmp_path, monkeypatch):
    import json

    from scepter_like.solver.hooks import checkpoint as checkpoint_module

    real_save, seen = checkpoint_module.torch_save_temp, []

    def save(obj, path):  # the train lines metrics.jsonl holds when each checkpoint is written
        lines = (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()
        seen.append((obj['solver']['total_iter'], [json.loads(x)['step'] for x in lines if '"train"' in x]))
        return real_save(obj, path)

    monkeypatch.setattr(checkpoint_module, 'torch_save_temp', save)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 1}]
    hooks.append({'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 4})
    run(tmp_path, 1, hooks)
    assert seen == [(4, [1, 2, 3, 4])]


def test_an_interval_longer_than_the_run_warns_that_no_epoch_checkpoint_is_written(tmp_path, caplog):
    """scepter's INTERVAL counted steps too: INTERVAL 500 on a 2-epoch run was a checkpoint every 500 steps there."""
    run(tmp_path, 2, ckpt_hooks(INTERVAL=500))
    (warning,) = [r for r in caplog.records if 'is more than the run has' in r.getMessage()]
    assert warning.levelname == 'WARNING'
    assert 'TRAIN_HOOKS[1].INTERVAL: 500 epochs is more than the run has (2), so no checkpoint is written at all' in (
        warning.getMessage()
    )
    assert not checkpoint_files(tmp_path)
    caplog.clear()
    (tmp_path / 'b').mkdir()
    run(tmp_path / 'b', 2, ckpt_hooks(INTERVAL=2))
    assert 'is more than the run has' not in caplog.text
    # the digits example's shape (INTERVAL 10, MAX_EPOCHS=5, a best checkpoint): an INFO line, no warning
    caplog.clear()
    caplog.set_level('INFO')
    (tmp_path / 'c').mkdir()
    run(tmp_path / 'c', 2, ckpt_hooks(INTERVAL=500, SAVE_BEST_BY='+accuracy'))
    (line,) = [r for r in caplog.records if 'is more than the run has' in r.getMessage()]
    assert line.levelname == 'INFO' and 'so no epoch checkpoint is written, only the best / last' in line.getMessage()
    assert [name for name in checkpoint_files(tmp_path / 'c') if '-best' in name]


def test_a_run_ending_after_its_newest_checkpoint_says_which_step_it_holds(tmp_path, caplog):
    caplog.set_level('INFO')
    run(tmp_path, 3, ckpt_hooks(INTERVAL=2))  # 6 steps an epoch: saved after epoch 2 (step 12), ends at step 18
    assert (
        'training ended at step 18; the newest checkpoint holds step 12 (checkpoint-epoch-2.pth, which latest names:'
        ' RUN:last is that file, and RESUME_FROM=auto trains steps 13-18 again from it); SAVE_LAST: true saves the'
        ' end too'
    ) in caplog.text
    caplog.clear()
    (tmp_path / 'b').mkdir()
    run(tmp_path / 'b', 2, ckpt_hooks(INTERVAL=2))
    assert 'training ended at step' not in caplog.text


def test_latest_is_the_newest_training_state_and_the_end_of_run_message_agrees(tmp_path, caplog):
    """6 steps an epoch: the epoch-4 checkpoint holds step 24, the best after epoch 5 step 30, training ends at
    step 36.  ``latest`` names the newest state (the best file), and the end-of-run message, ``RUN:last`` and
    ``RESUME_FROM=auto`` all mean that file (the message named step 24; with no periodic file it said nothing)."""
    from scepter_like.utils.checkpoint import resolve_checkpoint

    caplog.set_level('INFO')
    for interval, sub in ((4, 'a'), (0, 'b')):
        caplog.clear()
        (tmp_path / sub).mkdir()
        solver, history = run(tmp_path / sub, 6, ckpt_hooks(INTERVAL=interval, SAVE_BEST_BY='+accuracy'))
        assert history.index(max(history)) == 4  # (this seed's best: epoch 5)
        folder = tmp_path / sub / 'run' / 'checkpoints'
        best = str(folder / 'checkpoint-best.pth')
        assert (folder / 'latest').read_text().strip() == 'checkpoint-best.pth'
        assert torch.load(best, weights_only=True)['solver']['total_iter'] == 30
        assert 'training ended at step 36; the newest checkpoint holds step 30 (checkpoint-best.pth, which latest' in (
            caplog.text
        )
        assert resolve_checkpoint(f'{tmp_path / sub / "run"}:last') == best
    cfg = blob_solver_cfg(
        str(tmp_path / 'b' / 'blobs.npz'), tmp_path / 'b' / 'run', hooks=ckpt_hooks(INTERVAL=0), RESUME_FROM='auto'
    )
    again = build_solver(cfg)
    assert again.resumed_from == best and again.progress.total_iter == 30


def test_scepters_disable_snapshot_key_turns_the_step_checkpoints_off_and_keeps_the_epoch_ones(tmp_path):
    """scepter's CheckpointHook reads DISABLE_SNAPSHOT (true: no step snapshot files; its epoch files stay)."""
    run(tmp_path, 2, ckpt_hooks(STEP_INTERVAL=2, DISABLE_SNAPSHOT=True))
    assert [n for n in checkpoint_files(tmp_path) if n.endswith('.pth')] == [
        'checkpoint-epoch-1.pth',
        'checkpoint-epoch-2.pth',
    ]
