"""Launch one benchmark run in a fresh process and read back its timings.

Both sides write the same JSON (``steps``, ``span_s``, ``us_per_step``,
``first_step_wall``): ``hand_loop.py`` itself, the solver through StepTimerHook.
"""

import json
import os
import subprocess
import sys
import time

import yaml
from workloads import LEARNING_RATE, SEED, plan, write_data

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def child_env():
    env = dict(os.environ)
    env['OMP_NUM_THREADS'] = '1'
    env['MKL_NUM_THREADS'] = '1'
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        env.pop(key, None)
    return env


def prepare(workload, folder, steps=None):
    """Write the workload's data once; returns (data path, total steps)."""
    w, _, total = plan(workload, steps)
    path = os.path.join(folder, f'{workload}-{total}.npz')
    if not os.path.exists(path):
        write_data(path, w)
    return path, total


def solver_config(workload, data, work_dir, out, steps=None):
    """The run_train config of the workload: the default train hooks, a checkpoint at the end only."""
    w, epochs, _ = plan(workload, steps)
    if workload == 'mlp':
        backbone = {'NAME': 'MLP', 'IN_DIM': w['shape'][0], 'HIDDEN_DIMS': w['hidden'], 'OUT_DIM': w['classes']}
    else:
        backbone = {'NAME': 'ConvNet', 'IN_CHANNELS': w['shape'][0], 'CHANNELS': w['channels'], 'OUT_DIM': w['classes']}
    return {
        'ENV': {'SEED': SEED, 'NUM_THREADS': 1},
        'IMPORTS': [os.path.join(HERE, 'step_timer.py')],
        'SOLVER': {
            'NAME': 'TrainValSolver',
            'WORK_DIR': work_dir,
            'MAX_EPOCHS': epochs,
            'MODEL': {'NAME': 'Classifier', 'BACKBONE': backbone},
            'OPTIMIZER': {'NAME': 'AdamW', 'LEARNING_RATE': LEARNING_RATE},
            'LR_SCHEDULER': {'NAME': 'CosineAnnealingLR', 'T_MAX': epochs},
            'TRAIN_DATA': {
                'NAME': 'NpzDataset',
                'PATH': data,
                'KEY_MAP': {'x': 'img', 'y': 'label'},
                'BATCH_SIZE': w['batch'],
                'SHUFFLE': True,
            },
            'TRAIN_HOOKS': [
                {'NAME': 'BackwardHook'},
                {'NAME': 'LogHook', 'LOG_INTERVAL': w['log_interval']},
                {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0},
                {'NAME': 'CheckpointHook', 'INTERVAL': epochs},
                {'NAME': 'DistSamplerHook'},
                {'NAME': 'StepTimerHook', 'OUTPUT': out},
            ],
        },
    }


def _launch(cmd, out):
    start = time.time()
    res = subprocess.run(cmd, cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise RuntimeError(f'{" ".join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}')
    with open(out) as f:
        result = json.load(f)
    result['process_start_wall'] = start
    result['to_first_step_s'] = result['first_step_wall'] - start
    return result


def run_hand(workload, data, folder, tag, steps=None):
    out = os.path.join(folder, f'hand-{tag}.json')
    cmd = [sys.executable, os.path.join(HERE, 'hand_loop.py'), '--workload', workload, '--data', data]
    cmd += ['--out', out, '--work-dir', folder]
    if steps:
        cmd += ['--steps', str(steps)]
    return _launch(cmd, out)


def run_solver(workload, data, folder, tag, steps=None):
    out = os.path.join(folder, f'solver-{tag}.json')
    work_dir = os.path.join(folder, f'work-{tag}')
    cfg_path = os.path.join(folder, f'solver-{tag}.yaml')
    with open(cfg_path, 'w') as f:
        yaml.safe_dump(solver_config(workload, data, work_dir, out, steps), f, sort_keys=False)
    return _launch([sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', cfg_path], out)


def _peer_runner(framework):
    def run_peer(workload, data, folder, tag, steps=None):
        out = os.path.join(folder, f'{framework}-{tag}.json')
        cmd = [sys.executable, os.path.join(HERE, 'peers.py'), '--framework', framework, '--workload', workload]
        cmd += ['--data', data, '--out', out, '--work-dir', os.path.join(folder, f'{framework}-work-{tag}')]
        if steps:
            cmd += ['--steps', str(steps)]
        return _launch(cmd, out)

    return run_peer


RUNNERS = {
    'hand': run_hand,
    'solver': run_solver,
    'mmengine': _peer_runner('mmengine'),
    'lightning': _peer_runner('lightning'),
}
