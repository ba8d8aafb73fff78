"""register_flops: fvcore FLOPs per sample equal the hand count; the log then shows FLOP/s."""

import re

import pytest
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.errors import DataError


def _solver(tmp_path, hidden, hooks=None):
    tmp_path.mkdir(exist_ok=True)
    npz = write_blobs(tmp_path / 'd.npz', n=32)
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1)
    cfg['SOLVER']['MODEL']['BACKBONE']['HIDDEN_DIMS'] = hidden
    return build_solver(cfg)


def _batch(solver):
    return next(solver.datas['train'].iterate())  # 16 samples


@pytest.mark.parametrize(('hidden', 'expected'), [([], 8 * 3), ([16], 8 * 16 + 16 * 3)])
def test_flops_per_sample_equal_the_hand_count(tmp_path, hidden, expected):
    solver = _solver(tmp_path, hidden)
    batch = _batch(solver)
    assert batch['img'].shape[0] == 16
    assert solver.register_flops(batch, keys=['img']) == expected  # one sample, not 16
    assert solver.model_flops == expected
    assert solver.register_flops(batch) == expected  # all keys: the label changes no FLOPs
    assert solver.unwrapped_model.training  # mode restored


def test_unknown_key_is_a_data_error(tmp_path):
    solver = _solver(tmp_path, [])
    with pytest.raises(DataError, match=r"\['image'\] are not in the data"):
        solver.register_flops(_batch(solver), keys=['image'])


def test_log_shows_flops_per_second_only_when_known(tmp_path, caplog):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 1}]
    plain = _solver(tmp_path / 'a', [16], hooks=hooks)
    with caplog.at_level('INFO'):
        plain.solve()
    assert 'samples/s' in caplog.text and 'FLOP/s' not in caplog.text
    caplog.clear()
    solver = _solver(tmp_path / 'b', [16], hooks=hooks)
    with caplog.at_level('INFO'):
        solver.register_flops(_batch(solver), keys=['img'])
        solver.solve()
    assert caplog.text.count('FLOPs per sample') == 1 and '176 FLOP' in caplog.text
    lines = [line for line in caplog.text.splitlines() if 'samples/s' in line]
    assert lines and all(re.search(r'FLOP/s: [0-9.e+]+', line) for line in lines)
    sps = float(re.search(r'samples/s: (\d+)', lines[-1]).group(1))
    flops = float(re.search(r'FLOP/s: ([0-9.e+]+)', lines[-1]).group(1))
    assert flops == pytest.approx(3 * 176 * sps, rel=0.01, abs=3 * 176)


def test_samples_per_second_counts_the_samples_of_a_short_last_batch(tmp_path, caplog):
    """40 samples in batches of 16: each epoch's line covers 16 + 16 + 8 samples, not 3 x 16 (2.5x too many on a
    line of the last batch alone)."""
    npz = write_blobs(tmp_path / 'd.npz', n=40)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 3}]
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2, EVAL_DATA=None))
    with caplog.at_level('INFO'):
        solver.solve()
    lines = [line for line in caplog.text.splitlines() if 'samples/s' in line]
    assert len(lines) == 2
    for line in lines:
        step_ms = float(re.search(r' time: ([0-9.]+)ms', line).group(1))
        rate = float(re.search(r'samples/s: (\d+)', line).group(1))
        assert rate == pytest.approx(40 / (3 * step_ms / 1e3), rel=0.05), line
