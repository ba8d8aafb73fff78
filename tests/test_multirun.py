"""``run_train.py -m``: a grid of digits runs, each in its own subprocess and folder, and the summary."""

import csv
import json

import pytest
from conftest import DIGITS_CFG, run_cli

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.multirun import expand_grid, final_metrics, parse_sweeps, run_name, split_values

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
