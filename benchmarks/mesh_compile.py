#!/usr/bin/env python
"""Whole runs of configs/mesh_regression/mgn.yaml, eager against SOLVER.COMPILE, first compile included.

``python benchmarks/mesh_compile.py [--rounds 3] [--epochs 20] [--cache cold|warm] [--set KEY=VALUE ...] [--json FILE]``

Each round starts ``tools/run_train.py --cfg configs/mesh_regression/mgn.yaml`` twice, as a
user does, in fresh processes (one torch thread, the config's own): eager, and with
``SOLVER.COMPILE.ENABLED=true`` (plus ``--set`` overrides of the compiled run), alternating
which goes first; the dataset is generated beforehand.  Per run: the wall time from the
process's start to its exit, the first forward's time (the log line of SOLVER.COMPILE:
dynamo, AOT autograd and inductor's compile of the first graph), the graphs compiled after
the first (``TORCH_LOGS=recompiles``), the median step time of the run's second half (from
LogHook's lines) and the final validation and test RMSE.

Inductor keeps what it compiled in an on-disk cache.  ``--cache cold`` gives every compiled
run an empty one (a user's first run of a model); ``warm`` one shared cache, filled by a
compiled run before the rounds (every later run of the same model on the machine).

From the medians: the time a compiled step saves once compiled, what compiling costs in all
(the compiled run's extra wall time plus the steps' savings) and so the number of training
steps from which compiling pays.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
CONFIG = os.path.join(REPO, 'configs', 'mesh_regression', 'mgn.yaml')
FIRST_FORWARD = re.compile(r'torch\.compile: first forward of \w+ \(compile included\) took ([\d.]+) s')


def run(folder, tag, epochs, manifest, compiled, cache_dir, overrides):
    """One ``run_train.py`` process; its wall time, first compiled forward, recompiles and final RMSE."""
    work = os.path.join(folder, f'work-{tag}')
    cmd = [sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', CONFIG, f'SOLVER.WORK_DIR={work}']
    cmd += [f'SOLVER.MAX_EPOCHS={epochs}', f'SOLVER.LR_SCHEDULER.T_MAX={epochs}']
    cmd += [f'SOLVER.{split}.MANIFEST={manifest}' for split in ('TRAIN_DATA', 'EVAL_DATA', 'TEST_DATA')]
    if compiled:
        cmd += ['SOLVER.COMPILE.ENABLED=true', *overrides]
    env = dict(os.environ, OMP_NUM_THREADS='1', TORCHINDUCTOR_CACHE_DIR=cache_dir, TORCH_LOGS='recompiles')
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f'{" ".join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}')
    first = FIRST_FORWARD.search(res.stdout + res.stderr)
    if compiled and (first is None or 'runs eager' in res.stdout + res.stderr):
        raise RuntimeError(f'the compiled run did not compile:\n{res.stdout[-3000:]}')
    with open(os.path.join(work, 'metrics.jsonl')) as f:
        lines = [json.loads(line) for line in f]
    rmse = {kind: [r['values']['rmse'] for r in lines if r['kind'] == kind][-1] for kind in ('eval', 'test')}
    train = [r for r in lines if r['kind'] == 'train']
    return {
        'wall_s': wall,
        'late_step_ms': statistics.median(r['step_time'] for r in train[len(train) // 2 :]) * 1e3,
        'first_forward_s': float(first.group(1)) if first else None,
        'recompiles': (res.stdout + res.stderr).count('Recompiling function'),
        'train_steps': max(r['step'] for r in lines),
        'val_rmse': rmse['eval'],
        'test_rmse': rmse['test'],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=20)
    parser.add_argument('--cache', choices=['cold', 'warm'], default='cold')
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE', help='of the compiled run')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)

    from scepter_like.config import Config
    from tasks.mesh_regression.dataset import ensure_generated

    with tempfile.TemporaryDirectory(prefix='scepter_bench_mesh_compile_') as folder:
        data = Config(cfg_file=CONFIG).SOLVER.TRAIN_DATA
        data.MANIFEST = os.path.join(folder, 'data', 'manifest.csv')
        ensure_generated(data)
        shared_cache = os.path.join(folder, 'inductor-cache')

        def cache(tag):
            return shared_cache if args.cache == 'warm' else os.path.join(folder, f'inductor-{tag}')

        if args.cache == 'warm':
            run(folder, 'fill-cache', args.epochs, data.MANIFEST, True, shared_cache, args.set)
        runs = {'eager': [], 'compiled': []}
        for r in range(args.rounds):
            for kind in ('eager', 'compiled') if r % 2 == 0 else ('compiled', 'eager'):
                tag = f'{kind}-{r}'
                runs[kind].append(
                    run(folder, tag, args.epochs, data.MANIFEST, kind == 'compiled', cache(tag), args.set)
                )
            e, c = runs['eager'][-1], runs['compiled'][-1]
            print(
                f'  round {r + 1}/{args.rounds}: eager {e["wall_s"]:.1f} s, compiled {c["wall_s"]:.1f} s'
                f' (first forward {c["first_forward_s"]:.1f} s, {c["recompiles"]} recompiles)',
                file=sys.stderr,
            )
    eager, compiled = runs['eager'], runs['compiled']
    ratios = [c['wall_s'] / e['wall_s'] for e, c in zip(eager, compiled)]
    summary = {
        'cache': args.cache,
        'epochs': args.epochs,
        'train_steps': eager[0]['train_steps'],
        'eager_s': statistics.median(r['wall_s'] for r in eager),
        'compiled_s': statistics.median(r['wall_s'] for r in compiled),
        'ratio': statistics.median(ratios),
        'ratio_range': [min(ratios), max(ratios)],
        'first_forward_s': statistics.median(r['first_forward_s'] for r in compiled),
        'recompiles': statistics.median(r['recompiles'] for r in compiled),
        'val_rmse': {'eager': eager[0]['val_rmse'], 'compiled': compiled[0]['val_rmse']},
        'test_rmse': {'eager': eager[0]['test_rmse'], 'compiled': compiled[0]['test_rmse']},
        'runs': runs,
    }
    saving_ms = statistics.median(r['late_step_ms'] for r in eager) - statistics.median(
        r['late_step_ms'] for r in compiled
    )
    overhead_s = summary['compiled_s'] - summary['eager_s'] + summary['train_steps'] * saving_ms / 1e3
    summary['saving_per_step_ms'] = saving_ms
    summary['compile_overhead_s'] = overhead_s
    summary['pays_after_steps'] = overhead_s / (saving_ms / 1e3) if saving_ms > 0 else None
    print(
        f'{args.epochs} epochs ({summary["train_steps"]} steps), inductor cache {args.cache}:'
        f' eager {summary["eager_s"]:.1f} s, compiled {summary["compiled_s"]:.1f} s;'
        f' compiled / eager {summary["ratio"]:.3f} ({min(ratios):.3f}-{max(ratios):.3f});'
        f' first forward {summary["first_forward_s"]:.1f} s, {summary["recompiles"]:.0f} recompiles;'
        f' val RMSE eager {summary["val_rmse"]["eager"]:.4f}, compiled {summary["val_rmse"]["compiled"]:.4f}'
    )
    pays = summary['pays_after_steps']
    print(
        f'a compiled step saves {saving_ms:.1f} ms once compiled; compiling costs {overhead_s:.1f} s in all:'
        + (f' it pays from about {pays:.0f} training steps' if pays else ' it never pays')
    )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
