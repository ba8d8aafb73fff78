"""Kill-and-resume equality: a run SIGKILLed at several points and resumed with
``RESUME_FROM=auto`` ends bit for bit where the same run left alone ends.

The job is tools/run_train.py on Gaussian blobs with a Dropout MLP (so the RNG state
matters), AdamW, a cosine schedule stepped per optimizer step, step and epoch checkpoints,
KEEP_LAST, SAVE_BEST, SAVE_LAST and a user hook with state.  The train dataset records
the batches it serves, which proves that a resumed run never loads the skipped ones.
"""

import math
import os
import re

import pytest
import torch
import yaml
from conftest import REPO, run_train_killed_at
from helpers import assert_same, write_blobs

SUPPORT = os.path.join(REPO, 'tests', 'ckpt_support.py')
STEPS_PER_EPOCH = 6  # 96 blobs / batch 16
EPOCHS = 3
TOTAL = STEPS_PER_EPOCH * EPOCHS


def job_config(tmp_path, workers):
    npz = write_blobs(tmp_path / 'blobs.npz', n=96, dim=8, classes=3)
    data = {'PATH': npz, 'KEY_MAP': {'x': 'img', 'y': 'label'}, 'BATCH_SIZE': 16, 'NUM_WORKERS': workers}
    cfg = {
        'ENV': {'SEED': 7, 'NUM_THREADS': 1, 'DETERMINISTIC': True},
        'SOLVER': {
            'NAME': 'TrainValSolver',
            'MAX_EPOCHS': EPOCHS,
            'MODEL': {
                'NAME': 'Classifier',
                'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 8, 'HIDDEN_DIMS': [32, 32], 'OUT_DIM': 3, 'DROPOUT': 0.3},
            },
            'OPTIMIZER': {'NAME': 'AdamW', 'LEARNING_RATE': 0.01},
            'LR_SCHEDULER': {'NAME': 'CosineAnnealingLR', 'T_MAX': TOTAL},
            'TRAIN_DATA': dict(data, NAME='RecordingNpzDataset'),
            'EVAL_DATA': dict(data, NAME='NpzDataset', SHUFFLE=False),
            'METRICS': [{'NAME': 'AccuracyMetric'}],
            'TRAIN_HOOKS': [
                {'NAME': 'BackwardHook'},
                {'NAME': 'LogHook', 'LOG_INTERVAL': 2},
                {'NAME': 'LrHook', 'WARMUP_EPOCHS': 1, 'SET_BY_EPOCH': False},
                {
                    'NAME': 'CheckpointHook',
                    'INTERVAL': 1,
                    'STEP_INTERVAL': 4,
                    'KEEP_LAST': 2,
                    'SAVE_LAST': True,
                    'SAVE_BEST_BY': '+accuracy',
                },
                {'NAME': 'DistSamplerHook'},
                {'NAME': 'CounterHook'},
                {'NAME': 'KillHook'},
            ],
            'EVAL_HOOKS': [{'NAME': 'KillHook'}],
        },
    }
    path = tmp_path / f'job{workers}.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return path


def train(cfg, work_dir, record, kill_at='', resume=False):
    args = ['--cfg', cfg, '--import', SUPPORT, f'SOLVER.WORK_DIR={work_dir}', f'SOLVER.TRAIN_DATA.RECORD={record}']
    if resume:
        args.append('SOLVER.RESUME_FROM=auto')
    return run_train_killed_at(kill_at, *args)


def served(record):
    with open(record) as f:
        return f.read().splitlines()


def latest_step(work_dir):
    folder = os.path.join(work_dir, 'checkpoints')
    with open(os.path.join(folder, 'latest')) as f:
        name = f.read().strip()
    ckpt = torch.load(os.path.join(folder, name), weights_only=True)
    return name, ckpt['solver']['total_iter']


def final_state(work_dir):
    ckpt = torch.load(os.path.join(work_dir, 'checkpoints', 'checkpoint-last.pth'), weights_only=True)
    ckpt.pop('meta')  # time, paths
    return ckpt


# (kill point, batches the killed run must have served): a kill in eval right after the
# epoch-1 checkpoint; mid-epoch between step checkpoints (last one at step 8); mid-epoch
# right after the step-16 checkpoint.
KILLS = {0: ['eval:6', 'train:9', 'train:16'], 2: ['train:9']}


@pytest.mark.parametrize('workers', [0, 2])
def test_kill_and_resume_is_bit_exact(tmp_path, workers):
    cfg = job_config(tmp_path, workers)
    alone, chain = tmp_path / 'alone', tmp_path / 'chain'
    res = train(cfg, alone, tmp_path / 'alone.rec')
    assert res.returncode == 0, res.stderr
    full = served(tmp_path / 'alone.rec')
    assert len(full) == TOTAL

    name, start = '', 0  # train steps completed at the checkpoint the next segment resumes from
    for i, kill in enumerate([*KILLS[workers], '']):
        record = tmp_path / f'chain{i}.rec'
        res = train(cfg, chain, record, kill_at=kill, resume=i > 0)
        if kill:
            assert res.returncode == -9, res.stderr  # SIGKILL: no cleanup ran
        else:
            assert res.returncode == 0, res.stderr
        if i > 0:
            assert re.search(rf'resumed from \S+{name} after step {start}: ', res.stdout)
        stop = int(kill.split(':')[1]) if kill else TOTAL
        got = served(record)
        if workers == 0:  # no prefetch: exactly the batches from the checkpoint to the kill
            assert got == full[start : stop + kill.startswith('train')]
        else:  # workers write in no fixed order and prefetch before a kill; the last segment loads just the rest
            assert set(got) <= set(full)
            if not kill:
                assert len(got) == len(set(got)) == TOTAL - start
        if kill:
            name, start = latest_step(chain)
            assert 0 < start <= stop, name

    assert_same(final_state(alone), final_state(chain))
    # pruning and best tracking came out the same across three resumes
    assert sorted(os.listdir(alone / 'checkpoints')) == sorted(os.listdir(chain / 'checkpoints'))
    assert_same(
        torch.load(alone / 'checkpoints' / 'checkpoint-best.pth', weights_only=True)['model'],
        torch.load(chain / 'checkpoints' / 'checkpoint-best.pth', weights_only=True)['model'],
    )


def test_resuming_before_a_per_epoch_schedule_steps_again_raises_no_torch_order_warning(tmp_path):
    """torch warns of lr_scheduler.step() before optimizer.step() when only the resumed process is seen."""
    import warnings

    from helpers import blob_solver_cfg, build_solver, write_blobs

    npz = write_blobs(tmp_path / 'blobs.npz')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'SAVE_BEST': False}]
    sched = {'NAME': 'CosineAnnealingLR', 'T_MAX': 3}
    first = build_solver(blob_solver_cfg(npz, tmp_path / 'a', hooks, MAX_EPOCHS=1, LR_SCHEDULER=sched))
    first.solve()
    first.close()
    resume = str(tmp_path / 'a' / 'checkpoints' / 'checkpoint-epoch-1.pth')
    second = build_solver(
        blob_solver_cfg(npz, tmp_path / 'b', hooks, MAX_EPOCHS=2, LR_SCHEDULER=sched, RESUME_FROM=resume)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        second.solve()
    second.close()
    assert not [w for w in caught if 'lr_scheduler.step()' in str(w.message)]
    assert second.optimizer.param_groups[0]['lr'] == pytest.approx(0.1 * (1 + math.cos(math.pi / 3)) / 2)
