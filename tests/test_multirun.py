"""``run_train.py -m``: a grid of digits runs, each in its own subprocess and folder, and the summary."""

import csv
import json
import os
import subprocess
import sys

import pytest
from ckpt_support import SIGNAL_ENV
from conftest import DIGITS_CFG, REPO, run_cli, tool_env

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.multirun import expand_grid, final_metrics, parse_sweeps, run_name, split_values
from scepter_like.utils.checkpoint import latest_checkpoint

SHORT = ['SOLVER.MAX_EPOCHS=1', 'SOLVER.MAX_STEPS=4', 'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=2']


def read_csv(path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def run_grid(base, *sweeps):
    return run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={base}', '-m', *SHORT, *sweeps)


@pytest.mark.slow  # its runs are processes the multirun starts
def test_a_grid_runs_every_point_and_a_failing_run_leaves_the_rest_going(tmp_path):
    """Two keys of two values: four runs, in the grid's order, each in a process and folder of its own; the two
    that cannot start (LEARNING_RATE abc) are reported with their error and the others run; exit status 1."""
    base = tmp_path / 'grid'
    res = run_grid(base, 'SOLVER.TRAIN_DATA.BATCH_SIZE=16,64', 'SOLVER.OPTIMIZER.LEARNING_RATE=0.01,abc')
    assert res.returncode == 1, res.stderr[-3000:]
    rows = read_csv(base / 'multirun_summary.csv')
    bs, lr = 'SOLVER.TRAIN_DATA.BATCH_SIZE', 'SOLVER.OPTIMIZER.LEARNING_RATE'
    assert [(r[bs], r[lr], r['status'], r['exit']) for r in rows] == [
        ('16', '0.01', 'ok', '0'),
        ('16', 'abc', 'failed', '2'),
        ('64', '0.01', 'ok', '0'),
        ('64', 'abc', 'failed', '2'),
    ]
    ran, failed = rows[::2], rows[1::2]
    for row in ran:
        assert row['step'] == '4' and 0 <= float(row['test/accuracy']) <= 1 and float(row['train/loss']) > 0
        assert 0 <= float(row['eval/accuracy_top3']) <= 1
        assert row['work_dir'] == f'{bs}={row[bs]},{lr}={row[lr]}'
        assert f'BATCH_SIZE: {row[bs]}' in (base / row['work_dir'] / 'config.yaml').read_text()  # its values
    assert ran[0]['train/loss'] != ran[1]['train/loss']  # the values changed the runs
    for row in failed:
        assert row['error'].startswith(f'error: {lr}: expected a number'), row['error']
        assert "'abc'" in row['error'] and row['test/accuracy'] == ''
    md = (base / 'multirun_summary.md').read_text().splitlines()
    assert len(md) == 2 + 4 and md[0].startswith(f'| run | {bs} | {lr} |')
    assert sum('| failed | 2 |' in line for line in md) == 2
    assert '[multirun] 2 ok, 2 failed' in res.stdout


@pytest.mark.slow  # a multirun process to signal, and its runs
def test_a_stop_signal_to_the_multirun_stops_its_run_with_a_checkpoint_and_resume_auto_goes_on(tmp_path):
    """SIGTERM to the multirun alone (kill PID): the run in progress gets it, stops at a step boundary with a
    checkpoint; no further run starts; the summary says so and the exit status is 143.  The same command with
    RESUME_FROM=auto then continues that run from its checkpoint and runs the rest."""
    base = tmp_path / 'grid'
    support = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ckpt_support.py')
    command = [sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', DIGITS_CFG, '--import', support]
    command += [f'SOLVER.WORK_DIR={base}', 'SOLVER.MAX_EPOCHS=2', 'SOLVER.TRAIN_HOOKS+={"NAME": "KillHook"}']
    command += ['-m', 'SOLVER.OPTIMIZER.LEARNING_RATE=0.01,0.002']
    # the first run signals the multirun (its parent) as its step 31 begins, and waits until the signal is passed on
    env = tool_env(**{SIGNAL_ENV: 'SIGTERM:30:parent'})
    res = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 143, res.stderr[-3000:]
    rows = read_csv(base / 'multirun_summary.csv')
    assert [(r['status'], r['exit'], r['step']) for r in rows] == [('stopped', '143', '31')]
    first = base / rows[0]['work_dir']
    assert os.path.basename(latest_checkpoint(str(first / 'checkpoints'))) == 'preempted-step-31.pth'
    assert sorted(os.listdir(base)) == sorted([first.name, 'multirun_summary.csv', 'multirun_summary.md'])
    assert '[multirun] stopped by SIGTERM: 1 of 2 run(s) started (#0 stopped)' in res.stdout
    assert 'SOLVER.RESUME_FROM=auto' in res.stdout.splitlines()[-1]

    res = subprocess.run([*command, 'SOLVER.RESUME_FROM=auto'], env=tool_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_csv(base / 'multirun_summary.csv')
    epoch = 41  # digits: 41 steps an epoch
    assert [(r['status'], r['step']) for r in rows] == [('ok', str(2 * epoch))] * 2
    starts = [json.loads(line) for line in (first / 'metrics.jsonl').read_text().splitlines()]
    assert [(r['step'], r['resumed_from']) for r in starts if r['kind'] == 'start'] == [
        (0, None),
        (31, str(first / 'checkpoints' / 'preempted-step-31.pth')),
    ]


def test_empty_value_list_is_one_error_line(tmp_path):
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', '-m', 'SOLVER.MAX_STEPS=')
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        'error: -m SOLVER.MAX_STEPS=: empty value in the list; write SOLVER.MAX_STEPS=V1,V2,... with no empty item'
    ]
    assert not (tmp_path / 'multirun_summary.csv').exists()


def test_a_misspelt_swept_key_is_one_error_line_before_any_run(tmp_path):
    words = ['-m', 'SOLVER.OPTIMIZER.LEARNING_RAT=0.1,0.01']
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', *words)
    assert res.returncode == 2
    line = res.stderr.strip().splitlines()
    assert len(line) == 1 and line[0].startswith(
        'error: -m SOLVER.OPTIMIZER.LEARNING_RAT: unknown key SOLVER.OPTIMIZER.LEARNING_RAT;'
        ' did you mean LEARNING_RATE?'
    ), line
    assert '[multirun]' not in res.stdout and not (tmp_path / 'multirun_summary.csv').exists()


def test_sweep_parsing_and_folder_names():
    assert split_values('1,[2,3],"a,b",{x: 1, y: 2}') == ['1', '[2,3]', '"a,b"', '{x: 1, y: 2}']
    sweeps = parse_sweeps(['A.B=1,2', 'C=x', 'D.E=p,q,r'])
    grid = expand_grid(sweeps)
    assert len(grid) == 6 and grid[0] == [('A.B', '1'), ('C', 'x'), ('D.E', 'p')] and grid[-1][2] == ('D.E', 'r')
    assert run_name(grid[1], ['A.B', 'D.E']) == 'A.B=1,D.E=q'
    assert run_name([('A', 'x/../y z')], ['A']) == 'A=x_.._y_z'
    long = run_name([('A', 'v' * 400)], ['A'])
    assert len(long) < 170 and long != run_name([('A', 'v' * 401)], ['A'])
    for bad in ('A.B=1,,2', 'A.B=', 'SOLVER.WORK_DIR=a,b'):
        with pytest.raises(ConfigError):
            parse_sweeps([bad])


def test_a_runs_summary_metrics_are_this_attempts_only(tmp_path):
    """A run that failed before training this time (WORK_DIR refused) shows no metrics, not an earlier, killed
    attempt's; a run that trained this time shows its history (a resumed one's earlier lines too)."""
    lines = [
        {'kind': 'start', 'step': 0, 'epoch': 1, 'time': 100.0, 'resumed_from': None},
        {'kind': 'eval', 'step': 45, 'epoch': 1, 'time': 110.0, 'values': {'accuracy': 0.95}},
    ]
    (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(line) + '\n' for line in lines))
    assert final_metrics(tmp_path, since=200.0) == {}
    assert final_metrics(tmp_path, since=50.0) == {'step': 45, 'eval/accuracy': 0.95}
    with open(tmp_path / 'metrics.jsonl', 'a') as f:  # a resumed attempt at 200 s
        f.write(json.dumps({'kind': 'start', 'step': 45, 'epoch': 2, 'time': 200.0, 'resumed_from': 'x'}) + '\n')
    assert final_metrics(tmp_path, since=200.0) == {'step': 45, 'eval/accuracy': 0.95}


def test_a_work_dir_referring_to_a_swept_key_is_an_error():
    """WORK_DIR was resolved once, with the unswept value: every run of MAX_EPOCHS=1,2 went under wd/e3/."""
    from scepter_like.multirun import check_work_dir_unswept

    raw = {'SOLVER': {'MAX_EPOCHS': 3, 'TAG': 'e${SOLVER.MAX_EPOCHS}'}}
    fixed = ['SOLVER.WORK_DIR=wd/${SOLVER.TAG}']
    with pytest.raises(ConfigError, match=r'^-m SOLVER.MAX_EPOCHS=1,2: SOLVER.WORK_DIR refers to the swept'):
        check_work_dir_unswept(Config(raw), fixed, parse_sweeps([*fixed, 'SOLVER.MAX_EPOCHS=1,2']))
    check_work_dir_unswept(Config(raw), fixed, parse_sweeps([*fixed, 'SOLVER.LR=1,2']))  # an unreferenced sweep
