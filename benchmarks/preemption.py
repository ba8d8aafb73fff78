"""Time from SIGTERM to exit: one training step plus one checkpoint write (docs/clusters.md).

Starts ``tools/run_train.py`` on a config, waits until its log shows training (the first
``epoch 1/`` line), sends SIGTERM, and times the exit; checks the exit status (143) and
that ``latest`` names the preempted checkpoint.  Prints the median over the rounds.

    python benchmarks/preemption.py [--rounds N]
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MLP_CFG = os.path.join(REPO, 'configs', 'cate_recognition', 'digits_mlp.yaml')
CONVNET = {'NAME': 'ConvNet', 'IN_CHANNELS': 1, 'CHANNELS': [32, 64], 'OUT_DIM': 10}


def write_configs(folder):
    """The digits MLP config, and the same job with digits_convnet.yaml's ConvNet backbone."""
    with open(MLP_CFG) as f:
        cfg = yaml.safe_load(f)
    cfg['SOLVER']['MODEL']['BACKBONE'] = CONVNET
    path = os.path.join(folder, 'digits_convnet.yaml')
    with open(path, 'w') as f:
        yaml.safe_dump(cfg, f)
    return {'digits MLP': MLP_CFG, 'digits ConvNet': path}


def one_round(cfg, work_dir):
    cmd = [sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', cfg, f'SOLVER.WORK_DIR={work_dir}']
    cmd += ['SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=1', 'SOLVER.TRAIN_HOOKS.1.PROGRESS=off']
    env = dict(os.environ, OMP_NUM_THREADS='1')
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if ' epoch 1/' in line and ' iter ' in line:
            break
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.stdout.read()
    status = proc.wait()
    seconds = time.perf_counter() - sent
    with open(os.path.join(work_dir, 'checkpoints', 'latest')) as f:
        latest = f.read().strip()
    if status != 128 + signal.SIGTERM or not latest.startswith('preempted-step-'):
        raise RuntimeError(f'{cfg}: exit {status}, latest {latest}')
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in write_configs(tmp).items():
            times = [one_round(cfg, os.path.join(tmp, f'work-{len(name)}-{i}')) for i in range(args.rounds)]
            rounds = ', '.join(f'{t:.3f}' for t in times)
            print(f'{name}: SIGTERM to exit, median {statistics.median(times):.3f} s (rounds: {rounds})')


if __name__ == '__main__':
    main()
