"""TensorboardLogHook: events read back with TensorBoard's reader; closed and readable after an error."""

import glob

import pytest
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.utils.metrics_log import read_metrics


def _events(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = glob.glob(f'{log_dir}/events.out.tfevents.*')
    assert len(files) == 1
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}


def _cfg(tmp_path, **keys):
    npz = write_blobs(tmp_path / 'd.npz', n=96)  # 6 batches of 16 per epoch
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'TensorboardLogHook', 'LOG_INTERVAL': 4}]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, **keys)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    return cfg


def test_scalars_lr_and_metrics_at_the_expected_steps(tmp_path, caplog):
    solver = build_solver(_cfg(tmp_path, MAX_EPOCHS=2))
    losses = []
    solver.register_callback_on_iter_end(lambda s: losses.append(s.iter_outputs['loss'].item()))
    with caplog.at_level('INFO'):
        solver.solve()
    log_dir = tmp_path / 'w' / 'tensorboard'
    assert f'tensorboard --logdir {log_dir}' in caplog.text
    assert solver.hooks_dict['train'][1].writer is None  # closed
    ev = _events(log_dir)
    # every 4 steps of an epoch (as LogHook counts), plus the end of each epoch (steps 6 and 12)
    assert [s for s, _ in ev['train/loss']] == [4, 6, 10, 12]
    bounds = [(0, 4), (4, 6), (6, 10), (10, 12)]
    for (_step, value), (a, b) in zip(ev['train/loss'], bounds):
        assert value == pytest.approx(sum(losses[a:b]) / (b - a), rel=1e-5)
    assert [s for s, _ in ev['train/lr']] == [4, 6, 10, 12]
    assert ev['train/lr'][0][1] == pytest.approx(0.1)
    assert [s for s, _ in ev['eval/accuracy']] == [6, 12]
    assert ev['eval/accuracy'][-1][1] == pytest.approx(solver.epoch_outputs['eval']['accuracy'])
    assert [s for s, _ in ev['test/accuracy']] == [12]


def test_error_run_leaves_closed_readable_events(tmp_path):
    solver = build_solver(_cfg(tmp_path, MAX_EPOCHS=3))

    def fail(s):
        if s.progress.epoch == 1:
            raise RuntimeError('boom')

    solver.register_callback_on_epoch_end(fail)
    with pytest.raises(RuntimeError, match='boom'):
        solver.solve()
    assert solver.hooks_dict['train'][1].writer is None
    ev = _events(tmp_path / 'w' / 'tensorboard')
    assert [s for s, _ in ev['train/loss']] == [4, 6, 10, 12]
    assert [s for s, _ in ev['eval/accuracy']] == [6]


def test_the_same_log_interval_gives_loghooks_points_of_metrics_jsonl(tmp_path):
    """With LogHook's LOG_INTERVAL, TensorBoard's train points are metrics.jsonl's (MLflow's, W&B's): same steps,
    same means, same lr (it counted the interval across epochs: steps 4, 6, 8, 12 against LogHook's 4, 6, 10, 12)."""
    cfg = _cfg(tmp_path, MAX_EPOCHS=2)
    cfg['SOLVER']['TRAIN_HOOKS'].append({'NAME': 'LogHook', 'LOG_INTERVAL': 4})
    build_solver(cfg).solve()
    ev = _events(tmp_path / 'w' / 'tensorboard')
    train = [r for r in read_metrics(tmp_path / 'w' / 'metrics.jsonl') if r['kind'] == 'train']
    for name in ('loss', 'lr'):
        assert [s for s, _ in ev[f'train/{name}']] == [r['step'] for r in train] == [4, 6, 10, 12]
        assert [v for _, v in ev[f'train/{name}']] == pytest.approx([r['values'][name] for r in train], rel=1e-6)


def test_log_and_tensorboard_hooks_listed_in_eval_hooks_log_the_pass_and_write_no_train_scalars(tmp_path, caplog):
    """scepter's configs list LogHook (and TensorboardLogHook) in EVAL_HOOKS too: the eval pass's scalars once went
    out as train records (metrics.jsonl, train/* in a second event file)."""
    from scepter_like.utils.metrics_log import METRICS_FILE

    cfg = _cfg(tmp_path, MAX_EPOCHS=2)
    solver_cfg = cfg['SOLVER']
    solver_cfg['TRAIN_HOOKS'].append({'NAME': 'LogHook', 'LOG_INTERVAL': 4})
    solver_cfg['EVAL_HOOKS'] = [{'NAME': 'LogHook', 'LOG_INTERVAL': 4}, {'NAME': 'TensorboardLogHook'}]
    solver_cfg['MODEL']['METRIC'] = {'NAME': 'AccuracyMetric'}  # eval steps output a scalar accuracy
    solver = build_solver(cfg)
    with caplog.at_level('INFO'):
        solver.solve()
    ev = _events(tmp_path / 'w' / 'tensorboard')  # one event file
    assert [s for s, _ in ev['train/accuracy']] == [s for s, _ in ev['train/loss']] == [4, 6, 10, 12]
    assert [s for s, _ in ev['eval/accuracy']] == [6, 12]
    train_records = [r for r in read_metrics(tmp_path / 'w' / METRICS_FILE) if r['kind'] == 'train']
    assert [(r['step'], r['iter']) for r in train_records] == [(4, 4), (6, 6), (10, 4), (12, 6)]
    lines = caplog.text.splitlines()
    assert sum('eval iter 4/6 accuracy: ' in line for line in lines) == 2  # each eval pass, its own iterations
    assert sum('eval iter 6/6 accuracy: ' in line for line in lines) == 2
    assert sum(' trained in ' in line for line in lines) == 2  # one per train epoch, none per eval pass
    assert 'a TensorboardLogHook listed again writes nothing' in caplog.text
