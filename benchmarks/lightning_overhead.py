#!/usr/bin/env python
"""Per-step cost of ``ENV.USE_PL`` against a plain LightningModule: the wrapper's own cost (issue 27).

``python benchmarks/lightning_overhead.py [--workload mlp|conv|all] [--rounds 7] [--steps N]
[--baseline lightning|lightning_manual] [--json FILE]``

Each round runs ``plain_lightning.py`` (the workload as a Lightning user writes it: automatic
optimization, a loss line every 10 steps) and ``tools/run_train.py ... ENV.USE_PL=true`` (the
solver's config of ``overhead.py``: its default train hooks, a log line every 10 steps) on the
same model, batches, optimizer, schedule and Trainer settings, each in a fresh process with
one torch thread, alternating which goes first.  Only the training steps are timed
(common.StepClock).  Prints the median over rounds of µs per step and of the per-round ratio
USE_PL / plain LightningModule.  ``--baseline lightning_manual`` takes the leanest plain module
instead (manual optimization: Lightning's loop as USE_PL drives it).  Needs the ``[lightning]`` extra.
"""

import argparse
import json
import os
import sys
import tempfile

from overhead import across_processes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv', 'all'), default='mlp')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=None, help='train steps per run (default: the workload’s)')
    parser.add_argument(
        '--baseline',
        choices=('lightning', 'lightning_manual'),
        default='lightning',
        help='the plain module: automatic optimization (what users write) or manual (the leanest loop)',
    )
    parser.add_argument('--json', default='', help='also write the results to this JSON file')
    args = parser.parse_args(argv)
    results = []
    for workload in ('mlp', 'conv') if args.workload == 'all' else (args.workload,):
        with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
            print(f'{workload}: {args.rounds} rounds, runs alternated, 1 torch thread')
            results.append(across_processes(workload, args.rounds, args.steps, folder, (args.baseline, 'solver_pl')))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'python': sys.version.split()[0], 'cpus': os.cpu_count(), 'results': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
