#!/usr/bin/env python
"""Per-step cost of the solver against a hand-written loop.

``python benchmarks/overhead.py [--workload mlp|conv|all] [--rounds 5] [--steps N] [--json FILE] [--peers]``

Each round runs the hand-written loop (``hand_loop.py``) and ``tools/run_train.py`` on
the same model, data, optimizer and step count, each in a fresh process with one torch
thread, alternating which goes first.  Only the training steps are timed (the span
between the end of the first and of the last step), by the wall clock and by the
process's CPU time, and as the median single-step duration of each run (robust to bursts
of outside load on a shared VM).  Prints µs per step and the median over rounds of the
per-round ratio solver / hand.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

from runners import RUNNERS, prepare

TIMINGS = {'us_per_step': 'wall (span / steps)', 'cpu_us_per_step': 'cpu', 'median_step_us': 'median step'}


def measure(workload, rounds, steps, folder, names=('hand', 'solver'), log=print):
    """Alternated rounds of each runner; medians of µs per step (wall and CPU) and of the per-round ratios."""
    data, total = prepare(workload, folder, steps)
    runs = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else tuple(reversed(names))
        for name in order:
            runs[name].append(RUNNERS[name](workload, data, folder, f'{workload}-{r}', steps))
        log(
            f'  round {r + 1}/{rounds}: '
            + '  '.join(
                f'{n} {runs[n][-1]["us_per_step"]:8.1f} us (cpu {runs[n][-1]["cpu_us_per_step"]:8.1f})' for n in names
            )
        )
    summary = {'workload': workload, 'steps': total, 'rounds': rounds, 'runs': runs}
    for key in TIMINGS:
        if not all(key in run for v in runs.values() for run in v):
            continue
        base = [run[key] for run in runs[names[0]]]
        summary[f'median_{key}'] = {n: statistics.median(run[key] for run in v) for n, v in runs.items()}
        summary[f'median_ratio_{key}'] = {
            n: statistics.median(run[key] / b for run, b in zip(v, base)) for n, v in runs.items()
        }
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv', 'all'), default='all')
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--steps', type=int, default=None, help='train steps per run (default: the workload’s)')
    parser.add_argument('--json', default='', help='also write the results to this JSON file')
    parser.add_argument('--peers', action='store_true', help='also run mmengine and Lightning when installed')
    args = parser.parse_args(argv)
    names = ['hand', 'solver']
    if args.peers:
        from peers import available_peers

        found, missing = available_peers()
        for name, why in missing.items():
            print(f'skipping {name}: {why} (pip install ".[bench]" in a separate environment)')
        names += found
    workloads = ('mlp', 'conv') if args.workload == 'all' else (args.workload,)
    results = []
    with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
        for workload in workloads:
            print(f'{workload}: {args.rounds} rounds, runs alternated, 1 torch thread')
            results.append(measure(workload, args.rounds, args.steps, folder, tuple(names)))
    for key, label in TIMINGS.items():
        if not all(f'median_{key}' in s for s in results):
            continue
        print(f'\n{label}: median us/step (median per-round ratio to hand)')
        print(f'{"workload":8s} {"steps":>6s} ' + ' '.join(f'{n:>20s}' for n in names))
        for s in results:
            cols = ' '.join(f'{s[f"median_{key}"][n]:10.1f} ({s[f"median_ratio_{key}"][n]:6.3f}x)' for n in names)
            print(f'{s["workload"]:8s} {s["steps"]:6d} {cols}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'python': sys.version.split()[0], 'cpus': os.cpu_count(), 'results': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
