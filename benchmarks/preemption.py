"""Time from SIGTERM to exit for the digits MLP and ConvNet (docs/clusters.md).

Starts ``tools/run_train.py`` on each config, waits until its log shows training (the
first ``epoch 1/`` step line), sends SIGTERM, and times two moments from the signal:
the ``stopped by SIGTERM`` line (the step under way finishes and the checkpoint is
written: what a cluster's grace period must cover) and the process's exit (that plus the
teardown).  Checks the exit status (143) and that ``latest`` names the preempted
checkpoint.  Prints the median over the rounds and the range.

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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIGS = {
    'digits MLP': os.path.join(REPO, 'configs', 'cate_recognition', 'digits_mlp.yaml'),
    'digits ConvNet': os.path.join(REPO, 'configs', 'cate_recognition', 'digits_convnet.yaml'),
}


def one_round(cfg, work_dir):
    """(seconds to the stop line, seconds to the exit, checkpoint bytes) of one signalled run."""
    cmd = [sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', cfg, f'SOLVER.WORK_DIR={work_dir}']
    cmd += ['SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=1', 'SOLVER.TRAIN_HOOKS.1.PROGRESS=off']
    env = dict(os.environ, OMP_NUM_THREADS='1')
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if ' epoch 1/' in line and ' iter ' in line:
            break
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    stopped = None
    for line in proc.stdout:
        if stopped is None and 'stopped by SIGTERM' in line:
            stopped = time.perf_counter() - sent
    status = proc.wait()
    exited = time.perf_counter() - sent
    folder = os.path.join(work_dir, 'checkpoints')
    with open(os.path.join(folder, 'latest')) as f:
        latest = f.read().strip()
    if status != 128 + signal.SIGTERM or stopped is None or not latest.startswith('preempted-step-'):
        raise RuntimeError(f'{cfg}: exit {status}, latest {latest}, stop line seen: {stopped is not None}')
    return stopped, exited, os.path.getsize(os.path.join(folder, latest))


def summary(values):
    return f'median {statistics.median(values):.3f} s (range {min(values):.3f} to {max(values):.3f})'


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    print(f'SIGTERM during training, {args.rounds} round(s) each; times from the signal')
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, cfg) in enumerate(CONFIGS.items()):
            rounds = [one_round(cfg, os.path.join(tmp, f'work-{n}-{i}')) for i in range(args.rounds)]
            stops, exits, sizes = zip(*rounds)
            print(f'{name} (checkpoint {sizes[0] / 2**20:.2f} MiB):')
            print(f'  to the stop line (step + checkpoint): {summary(stops)}')
            print(f'  to the exit:                          {summary(exits)}')


if __name__ == '__main__':
    main()
