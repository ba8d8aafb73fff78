"""What a digits run leaves in WORK_DIR: config.yaml that reproduces it, metrics.jsonl across a
resume, a PNG from tools/plot_log.py, and a progress bar only on a terminal.

One module-scoped set of runs serves the digits tests: A trains 1 epoch, then resumes to 2 epochs;
B reruns A's first config.yaml into another WORK_DIR.  Every other shipped job's config.yaml is set up
again in this process.
"""

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import DIGITS_CFG, REPO, TOOLS, run_cli, run_tool, tool_env

from scepter_like import build_solver
from scepter_like.solver.run_records import resolved_config
from scepter_like.utils.metrics_log import MetricsLog, read_metrics

# trainval: the 1,437 training samples, 45 steps an epoch
COMMON = [
    'SOLVER.TRAIN_DATA.SPLIT=trainval',
    'SOLVER.LR_SCHEDULER.T_MAX=2',
    'SOLVER.TRAIN_HOOKS.3.SAVE_LAST=true',
    'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=10',
]


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('runs')
    a, b = tmp / 'a', tmp / 'b'
    first = run_cli('run_train.py', '--cfg', DIGITS_CFG, *COMMON, f'SOLVER.WORK_DIR={a}', 'SOLVER.MAX_EPOCHS=1')
    assert first.returncode == 0, first.stderr
    shutil.copy(a / 'config.yaml', tmp / 'config1.yaml')
    shutil.copy(a / 'checkpoints' / 'digits-last.pth', tmp / 'last1.pth')
    lines1 = (a / 'metrics.jsonl').read_text().splitlines()
    log1 = (a / 'std_log.txt').read_text()
    resumed = run_cli(
        'run_train.py',
        '--cfg',
        DIGITS_CFG,
        *COMMON,
        f'SOLVER.WORK_DIR={a}',
        'SOLVER.MAX_EPOCHS=2',
        'SOLVER.RESUME_FROM=auto',
    )
    assert resumed.returncode == 0, resumed.stderr
    # the rerun in a process of its own, as users rerun a run's config.yaml
    rerun = run_tool('run_train.py', '--cfg', tmp / 'config1.yaml', f'SOLVER.WORK_DIR={b}')
    assert rerun.returncode == 0, rerun.stderr
    return {'tmp': tmp, 'a': a, 'b': b, 'first': first, 'lines1': lines1, 'log1': log1}


def test_config_yaml_reproduces_the_run(runs):
    a_model = torch.load(runs['tmp'] / 'last1.pth', weights_only=True)['model']
    b_model = torch.load(runs['b'] / 'checkpoints' / 'digits-last.pth', weights_only=True)['model']
    assert a_model.keys() == b_model.keys()
    for key in a_model:
        assert torch.equal(a_model[key], b_model[key]), key
    a_values = [json.loads(line).get('values') for line in runs['lines1'] if '"start"' not in line]
    b_values = [r.get('values') for r in read_metrics(runs['b'] / 'metrics.jsonl') if r['kind'] != 'start']
    assert a_values == b_values and any(r and 'accuracy' in r for r in b_values)
    cfg_a = yaml.safe_load((runs['tmp'] / 'config1.yaml').read_text())
    cfg_b = yaml.safe_load((runs['b'] / 'config.yaml').read_text())
    assert cfg_b['SOLVER'].pop('WORK_DIR') == str(runs['b'])
    assert cfg_a['SOLVER'].pop('WORK_DIR') == str(runs['a'])
    assert cfg_a == cfg_b
    # the resume archived run 1's records and wrote its own
    env = json.loads((runs['a'] / 'env.json').read_text())
    assert env['resumed_from'].endswith('digits-last.pth')
    old = runs['a'] / env['previous_records'] / 'config.yaml'
    assert old.read_text() == (runs['tmp'] / 'config1.yaml').read_text()


def test_metrics_jsonl_parses_and_continues_across_the_resume(runs):
    lines = (runs['a'] / 'metrics.jsonl').read_text().splitlines()
    assert lines[: len(runs['lines1'])] == runs['lines1']  # appended, never rewritten
    records = [json.loads(line) for line in lines]
    starts = [r for r in records if r['kind'] == 'start']
    assert [(s['step'], s['resumed_from'] is None) for s in starts] == [(0, True), (45, False)]
    train = [r for r in records if r['kind'] == 'train']
    assert [r['step'] for r in train] == [10, 20, 30, 40, 45, 55, 65, 75, 85, 90]
    assert [r['epoch'] for r in train] == [1] * 5 + [2] * 5
    assert all(set(r['values']) == {'loss', 'lr'} and r['values']['loss'] > 0 for r in train)
    evals = [(r['kind'], r['epoch'], r['step']) for r in records if r['kind'] in ('eval', 'test')]
    assert evals == [('eval', 1, 45), ('test', 1, 45), ('eval', 2, 90), ('test', 2, 90)]
    assert read_metrics(runs['a'] / 'metrics.jsonl') == records  # nothing to drop after a clean resume


def test_read_metrics_drops_lines_a_killed_run_wrote_past_the_resume_point(tmp_path):
    path = tmp_path / 'metrics.jsonl'
    log = MetricsLog(str(path))
    log.write('start', 0, 1, resumed_from=None)
    for step in (10, 20, 30):
        log.write('train', step, 1, values={'loss': 1.0 / step})
    log.write('eval', 20, 1, values={'accuracy': 0.5})  # writes out the train lines before it
    with open(path, 'a') as f:
        f.write('{"kind": "train", "ep')  # torn by the kill
    log2 = MetricsLog(str(path))  # the resumed run, from the checkpoint at step 20
    log2.write('start', 20, 1, resumed_from='ckpt-20.pth')
    log2.write('eval', 20, 1, values={'accuracy': 0.6})
    log2.write('train', 30, 2, values={'loss': float('nan')})
    assert path.read_text().count('"start"') == 2 and '"epoch": 2' not in path.read_text()
    log2.flush()  # train lines wait for a flush (LogHook's after each batch it emits)
    got = [(r['kind'], r['step'], r.get('values')) for r in read_metrics(path)]
    assert got == [
        ('start', 0, None),
        ('train', 10, {'loss': 0.1}),
        ('train', 20, {'loss': 0.05}),
        ('start', 20, None),
        ('eval', 20, {'accuracy': 0.6}),
        ('train', 30, {'loss': 'nan'}),
    ]
    assert '"ep\n{"kind": "start"' in path.read_text()  # the torn line was sealed, not glued to the next


def test_piped_output_has_log_lines_and_no_progress_bar(runs):
    out = runs['first'].stdout
    assert 'iter 10/45' in out and 'iter 10/45' in runs['log1']
    assert '\r' not in out and '\r' not in runs['log1'] and 'it/s' not in out


def test_progress_bar_on_a_terminal(tmp_path):
    import pty

    work = tmp_path / 'tty'
    cmd = [sys.executable, os.path.join(TOOLS, 'run_train.py'), '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}']
    cmd += ['SOLVER.MAX_EPOCHS=2', 'SOLVER.MAX_STEPS=60', 'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=10']
    cmd += ['SOLVER.TRAIN_DATA.SPLIT=trainval']
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=tool_env())
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    screen = b''.join(chunks).decode()
    assert '\repoch 1/2 [' in screen and 'epoch 2/2 [' in screen and 'it/s' in screen and 'eta' in screen
    assert '45/45' in screen and '15/15' in screen  # MAX_STEPS=60 ends epoch 2 after 15 steps
    assert 'iter 10/45' not in screen  # the bar replaces the periodic lines on the terminal ...
    assert 'eval epoch' in screen  # ... but not the other messages
    log = (work / 'std_log.txt').read_text()
    assert 'iter 10/45' in log and '\r' not in log and 'it/s' not in log  # ... and the file keeps them


def test_progress_bar_is_tqdm_and_keeps_log_lines_off_its_line():
    import io
    import logging

    from tqdm import tqdm

    from scepter_like.utils.progress_bar import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    logger = logging.getLogger('scepter_like.test.progress')
    logger.propagate, logger.level = False, logging.INFO
    logger.addHandler(logging.StreamHandler(screen))
    bar = ProgressBar(screen)
    bar.attach(logger)
    try:
        bar.start('epoch 1/2', 45)
        assert isinstance(bar._bar, tqdm)  # a library bar, not a hand-written one
        bar.tick(10)
        logger.info('iter 10/45 loss 0.5', extra={'progress_line': True})  # the bar stands for these lines
        logger.info('a warning-worthy message')
        bar.set_postfix('loss 0.5')
        bar.finish(45)
    finally:
        bar.detach()
    text = screen.getvalue()
    assert 'iter 10/45' not in text and '\na warning-worthy message\n' in text.replace('\r', '\n')
    assert text.endswith('45/45, ' + text.rsplit('45/45, ', 1)[1]) and text.rstrip().endswith('loss 0.5')


def test_plot_log_writes_a_png(runs, tmp_path):
    out = tmp_path / 'curves.png'
    res = run_cli('plot_log.py', runs['a'], '--output', out)
    assert res.returncode == 0, res.stderr
    data = out.read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    width, height = struct.unpack('>II', data[16:24])
    assert width > 100 and height > 100 and len(data) > 5000
    from PIL import Image

    with Image.open(out) as img:
        img.verify()
    missing = run_cli('plot_log.py', tmp_path / 'nowhere')
    assert (
        missing.returncode == 2 and missing.stderr.startswith('error: ') and 'metrics.jsonl not found' in missing.stderr
    )


SHIPPED_CONFIGS = sorted(  # every shipped job (a search space is no job)
    os.path.relpath(os.path.join(folder, name), REPO)
    for folder, _, names in os.walk(os.path.join(REPO, 'configs'))
    for name in names
    if name.endswith('.yaml') and not name.endswith('_space.yaml')
)


@pytest.mark.parametrize('path', SHIPPED_CONFIGS)
def test_the_config_yaml_of_every_shipped_job_builds_the_same_job_again(path, tmp_path, monkeypatch):
    """config.yaml holds every default filled in (a point set's COMPONENTS: [0], FILE: '', ...): set up from it,
    the job is the same job, whatever keys its components check for having been written."""
    monkeypatch.chdir(REPO)  # the configs' relative paths (observations, image cache) are the repository's
    first = build_solver(path, [f'SOLVER.WORK_DIR={tmp_path / "a"}'])
    try:
        written = tmp_path / 'config.yaml'
        written.write_text(resolved_config(first.solver).dump())
    finally:
        first.close()
    again = build_solver(str(written), [f'SOLVER.WORK_DIR={tmp_path / "a"}'])
    try:
        assert resolved_config(again.solver).dump() == written.read_text()
    finally:
        again.close()
