"""What a Lightning user looks for at the start: a per-layer model summary, an LR range test, console scripts."""

import csv
import importlib.metadata
import logging
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import DIGITS_CFG, REPO, tool_env
from helpers import blob_solver_cfg, build_solver, write_blobs
from newcomer_support import run_cli, tool_main


@pytest.fixture(scope='module')
def blobs(tmp_path_factory):
    return write_blobs(tmp_path_factory.mktemp('blobs') / 'blobs.npz')


def test_the_run_starts_with_a_per_layer_model_summary(blobs, tmp_path, caplog):
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'run', MAX_STEPS=1, MODEL_SUMMARY_DEPTH=2))
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        solver.solve()
    solver.close()
    table = caplog.text[caplog.text.index('model summary:') :]
    rows = [re.split(r'\s{2,}', line.strip()) for line in table.splitlines()[1:8]]
    assert rows[0] == ['name', 'type', 'params', 'output shape']
    assert ['backbone', 'MLP', '195', '[1, 3]'] in rows  # MLP 8 -> 16 -> 3: 8*16 + 16 + 16*3 + 3 parameters
    assert ['backbone.0', 'Linear', '144', '[1, 16]'] in rows and ['backbone.1', 'ReLU', '0', '[1, 16]'] in rows
    assert ['loss', 'CrossEntropyLoss', '0', '-'] in rows  # not called by an eval forward
    assert '195 trainable, 0 frozen parameters' in table
    off = build_solver(blob_solver_cfg(blobs, tmp_path / 'off', MAX_STEPS=1, MODEL_SUMMARY_DEPTH=0))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        off.solve()
    off.close()
    assert 'model summary' not in caplog.text


def test_lr_range_test_api_sweeps_without_touching_work_dir(blobs, tmp_path):
    from scepter_like.lr_finder import find_lr

    cfg = blob_solver_cfg(blobs, tmp_path / 'run', hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}])
    cfg['ENV'].update(NUM_THREADS=torch.get_num_threads() + 1, DETERMINISTIC=True)
    program = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    result = find_lr(cfg, min_lr=1e-5, max_lr=100.0, num_steps=60)
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == program  # the sweep's ENV ended
    assert not os.path.exists(tmp_path / 'run')
    assert 10 < len(result.lrs) <= 60 and result.lrs == sorted(result.lrs)
    assert result.lrs[0] == pytest.approx(1e-5)
    assert 1e-5 < result.suggestion < 100.0
    at = result.lrs.index(result.suggestion)
    assert result.smoothed[at] < result.smoothed[0]  # the loss falls there


@pytest.mark.slow
def test_find_lr_tool_writes_the_plot_and_suggests(tmp_path, capsys):
    from PIL import Image

    status = run_cli(
        tool_main('find_lr'), '--cfg', DIGITS_CFG, '--steps', 40, '--output', tmp_path / 'lr', 'SOLVER.WORK_DIR=nope'
    )
    assert status == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    lr = float(re.search(r'suggested learning rate: ([0-9.e+-]+)', out).group(1))
    assert f'SOLVER.OPTIMIZER.LEARNING_RATE={lr:.3g}' in out
    with Image.open(tmp_path / 'lr' / 'lr_find.png') as image:
        assert image.format == 'PNG' and image.size[0] > 300
    with open(tmp_path / 'lr' / 'lr_find.csv') as f:
        rows = list(csv.DictReader(f))
    assert 10 < len(rows) <= 40 and float(rows[0]['lr']) == pytest.approx(1e-7)
    assert not os.path.exists('nope') and not os.path.exists(os.path.join(REPO, 'nope'))


def test_every_tool_is_a_console_script():
    from scepter_like.tools import COMMANDS

    scripts = {ep.name: ep for ep in importlib.metadata.entry_points(group='console_scripts')}
    for script, module in COMMANDS.items():
        assert script in scripts, f'{script}: reinstall the package (pip install -e .) to get it'
        assert callable(scripts[script].load())
        assert os.path.isfile(os.path.join(REPO, 'scepter_like', 'tools', f'{module}.py'))
        assert os.path.isfile(os.path.join(REPO, 'tools', f'{module}.py'))  # the repository's way stays


@pytest.mark.slow
def test_console_script_runs_as_installed(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), 'scepter-train')
    env = tool_env()
    env.pop('PYTHONPATH', None)  # the installed package, not the repository on the path
    cmd = [script, '--cfg', DIGITS_CFG, '--print-config', 'SOLVER.MAX_EPOCHS=2']
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert 'MAX_EPOCHS: 2' in res.stdout and 'TEST_WITH: best' in res.stdout
    bad = subprocess.run([script, '--cfg', 'nowhere.yaml'], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bad.returncode == 2
    assert re.fullmatch(r'error: config file not found: \S*nowhere\.yaml; check the --cfg path', bad.stderr.strip())
