#!/usr/bin/env python
"""Start-up cost: process start to the first training step, and the import of the solver.

``python benchmarks/startup.py [--rounds 5] [--steps 20]``

1. The hand-written loop and ``tools/run_train.py`` (the MLP workload, a short run) in
   fresh processes, alternated: seconds from launching the process to the end of the
   first training step, as each run's StepClock reports it.
2. ``import torch`` and then ``import scepter_like.solver`` in fresh processes: what the
   toolkit's import adds to torch's, and which modules it pulls in besides torch's.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from common import REPO, launch, prepare

IMPORT_PROBE = """
import sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
before = set(sys.modules)
import scepter_like.solver
t2 = time.perf_counter()
extra = sorted({m.split('.')[0] for m in set(sys.modules) - before} - {'scepter_like'})
print(t1 - t0, t2 - t1, ','.join(extra))
"""


def import_costs(rounds):
    torch_s, solver_s, extra = [], [], ''
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS='1')
    for _ in range(rounds):
        out = subprocess.run([sys.executable, '-c', IMPORT_PROBE], cwd=REPO, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        t_torch, t_solver, extra = out.stdout.split(' ')
        torch_s.append(float(t_torch))
        solver_s.append(float(t_solver))
    print(f'import torch: {statistics.median(torch_s):.3f} s (median of {rounds})')
    print(
        f'import scepter_like.solver after torch: +{statistics.median(solver_s):.3f} s (min {min(solver_s):.3f} s);'
        f' modules beyond torch: {extra.strip().replace(",", ", ") or "none"}'
    )


def first_step_times(rounds, steps, folder):
    data = prepare('mlp', folder, steps)
    runs = {'hand': [], 'solver': []}
    for r in range(rounds):
        for side in ('hand', 'solver') if r % 2 == 0 else ('solver', 'hand'):
            runs[side].append(launch(side, 'mlp', data, folder, f'startup-{r}', steps)['to_first_step_s'])
    extra = statistics.median(s - h for s, h in zip(runs['solver'], runs['hand']))
    print(
        f'process start -> end of first train step: hand {statistics.median(runs["hand"]):.3f} s,'
        f' solver {statistics.median(runs["solver"]):.3f} s (solver later by {extra:.3f} s, median of rounds)'
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--steps', type=int, default=20, help='train steps of each short run')
    args = parser.parse_args(argv)
    import_costs(args.rounds)
    with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
        first_step_times(args.rounds, args.steps, folder)
    return 0


if __name__ == '__main__':
    sys.exit(main())
