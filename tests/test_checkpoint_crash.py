"""A crash while a checkpoint is being written never costs more than that checkpoint.

A run that saves a ~13 MB checkpoint after every step is first killed in the middle of
its third write, then (restarted) between its next write and the commit that moves it
into place (both deterministically, see ``ckpt_support``), then restarted with
``RESUME_FROM=auto`` and SIGKILLed at random moments.  After every kill ``latest`` names a
complete checkpoint that loads, and the next start removes the temporary file the killed
save left behind.
"""

import os
import random
import subprocess
import sys
import time

import torch
import yaml
from ckpt_support import COMMIT_ENV, TEAR_ENV
from conftest import REPO, TOOLS, tool_env
from helpers import write_blobs

from scepter_like.utils.checkpoint import TMP_PREFIX

ROUNDS = 3


def crash_config(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz', n=64, dim=8, classes=3)
    data = {'NAME': 'NpzDataset', 'PATH': npz, 'KEY_MAP': {'x': 'img', 'y': 'label'}, 'BATCH_SIZE': 16}
    cfg = {
        'ENV': {'SEED': 0, 'NUM_THREADS': 1},
        'SOLVER': {
            'NAME': 'TrainValSolver',
            'WORK_DIR': str(tmp_path / 'run'),
            'RESUME_FROM': 'auto',
            'MAX_EPOCHS': 10000,
            'MODEL': {'NAME': 'Classifier', 'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 8, 'HIDDEN_DIMS': [1024, 1024]}},
            'OPTIMIZER': {'NAME': 'AdamW', 'LEARNING_RATE': 0.001},
            'TRAIN_DATA': data,
            'TRAIN_HOOKS': [
                {'NAME': 'BackwardHook'},
                {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 1, 'KEEP_LAST': 2},
            ],
        },
    }
    path = tmp_path / 'crash.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return path


def wait_for_new_checkpoint(pointer, since, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(pointer) and os.stat(pointer).st_mtime_ns > since:
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.02)
    raise AssertionError('no checkpoint was written')


def check_latest(folder):
    """``latest`` names a complete step checkpoint that loads; returns its step."""
    name = (folder / 'latest').read_text().strip()
    ckpt = torch.load(folder / name, weights_only=True)
    assert {'model', 'optimizer', 'solver', 'rng'} <= ckpt.keys()
    assert name == f'checkpoint-step-{ckpt["solver"]["total_iter"]}.pth'
    return ckpt['solver']['total_iter']


def test_sigkill_while_saving_always_leaves_a_loadable_latest(tmp_path):
    cfg = crash_config(tmp_path)
    folder = tmp_path / 'run' / 'checkpoints'
    pointer = folder / 'latest'
    command = [sys.executable, os.path.join(TOOLS, 'run_train.py'), '--cfg', str(cfg)]

    # a kill in the middle of the third checkpoint write
    support = os.path.join(REPO, 'tests', 'ckpt_support.py')
    torn = subprocess.run(
        command + ['--import', support], cwd=REPO, env=tool_env(**{TEAR_ENV: 3}), capture_output=True, timeout=120
    )
    assert torn.returncode == -9
    left_behind = [name for name in os.listdir(folder) if name.startswith(TMP_PREFIX)]
    assert left_behind == ['.tmp.checkpoint-step-3.pth.' + left_behind[0].rsplit('.', 1)[1]]
    steps = [check_latest(folder)]
    assert steps == [2]

    # a kill after the next write (step 3 again, resumed from 2), before its fsync and move
    unsynced = subprocess.run(
        command + ['--import', support], cwd=REPO, env=tool_env(**{COMMIT_ENV: 1}), capture_output=True, timeout=120
    )
    assert unsynced.returncode == -9
    assert not any((folder / name).exists() for name in left_behind)  # the torn file went at the start
    left_behind = [name for name in os.listdir(folder) if name.startswith(TMP_PREFIX)]
    assert left_behind == ['.tmp.checkpoint-step-3.pth.' + left_behind[0].rsplit('.', 1)[1]]
    assert torch.load(folder / left_behind[0], weights_only=True)['solver']['total_iter'] == 3  # written, not committed
    steps.append(check_latest(folder))
    assert steps == [2, 2]

    rng = random.Random(0)
    for _ in range(ROUNDS):
        since = os.stat(pointer).st_mtime_ns
        proc = subprocess.Popen(command, cwd=REPO, env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_new_checkpoint(pointer, since, proc)
        # the temp file the previous kill left was removed when this run started
        assert not any((folder / name).exists() for name in left_behind)
        time.sleep(rng.uniform(0.0, 0.3))
        proc.kill()
        proc.wait()
        left_behind = [name for name in os.listdir(folder) if name.startswith(TMP_PREFIX)]
        steps.append(check_latest(folder))
    assert steps == sorted(steps) and steps[0] < steps[-1]  # every restart resumed and went on
