#!/usr/bin/env python
"""Start-up cost: process start to the first training step, and the import of the solver.

``python benchmarks/startup.py [--rounds 5] [--json FILE]``

1. The hand-written loop and ``tools/run_train.py`` (the MLP workload, a short run) in
   fresh processes, alternated: seconds from launching the process to the end of the
   first training step, as each run's own clock reports it.
2. ``import torch`` and then ``import scepter_like.solver`` in fresh processes: what the
   toolkit's import adds to torch's, and which modules it pulls in besides torch's.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

from runners import REPO, RUNNERS, child_env, prepare

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
    env = child_env()
    env['PYTHONPATH'] = REPO
    for _ in range(rounds):
        out = subprocess.run([sys.executable, '-c', IMPORT_PROBE], cwd=REPO, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        t_torch, t_solver, extra = out.stdout.split(' ')
        torch_s.append(float(t_torch))
        solver_s.append(float(t_solver))
    return {
        'import_torch_s': statistics.median(torch_s),
        'import_solver_over_torch_s': statistics.median(solver_s),
        'import_solver_over_torch_min_s': min(solver_s),
        'modules_beyond_torch': extra.strip().split(',') if extra.strip() else [],
    }


def first_step_times(rounds, steps, folder):
    data, _ = prepare('mlp', folder, steps)
    runs = {'hand': [], 'solver': []}
    for r in range(rounds):
        for name in ('hand', 'solver') if r % 2 == 0 else ('solver', 'hand'):
            runs[name].append(RUNNERS[name]('mlp', data, folder, f'startup-{r}', steps)['to_first_step_s'])
    medians = {n: statistics.median(v) for n, v in runs.items()}
    return {
        'to_first_step_s': medians,
        'to_first_step_extra_s': statistics.median(s - h for s, h in zip(runs['solver'], runs['hand'])),
        'runs': runs,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--steps', type=int, default=20, help='train steps of each short run')
    parser.add_argument('--json', default='', help='also write the results to this JSON file')
    args = parser.parse_args(argv)
    result = import_costs(args.rounds)
    print(f'import torch: {result["import_torch_s"]:.3f} s (median of {args.rounds})')
    print(
        f'import scepter_like.solver after torch: +{result["import_solver_over_torch_s"]:.3f} s'
        f' (min {result["import_solver_over_torch_min_s"]:.3f} s); modules beyond torch:'
        f' {", ".join(result["modules_beyond_torch"]) or "none"}'
    )
    with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
        result.update(first_step_times(args.rounds, args.steps, folder))
    firsts = result['to_first_step_s']
    print(
        f'process start -> end of first train step: hand {firsts["hand"]:.3f} s, solver {firsts["solver"]:.3f} s'
        f' (solver later by {result["to_first_step_extra_s"]:.3f} s, median of per-round differences)'
    )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
