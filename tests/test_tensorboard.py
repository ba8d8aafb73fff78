"""TensorboardLogHook: events read back with TensorBoard's reader; closed and readable after an error."""

import glob

import pytest
from helpers import blob_solver_cfg, build_solver, write_blobs


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
    # every 4 steps, plus the end of each epoch (steps 6 and 12)
    assert [s for s, _ in ev['train/loss']] == [4, 6, 8, 12]
    bounds = [(0, 4), (4, 6), (6, 8), (8, 12)]
    for (_step, value), (a, b) in zip(ev['train/loss'], bounds):
        assert value == pytest.approx(sum(losses[a:b]) / (b - a), rel=1e-5)
    assert [s for s, _ in ev['train/lr']] == [4, 6, 8, 12]
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
    assert [s for s, _ in ev['train/loss']] == [4, 6, 8, 12]
    assert [s for s, _ in ev['eval/accuracy']] == [6]
