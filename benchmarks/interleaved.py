#!/usr/bin/env python
"""Solver vs hand-written loop in ONE process, alternating short chunks of steps.

``python benchmarks/interleaved.py [--workload mlp|conv|all] [--chunks 60] [--chunk-steps 50] [--json FILE]``

On a shared VM the speed of a whole process drifts by tens of percent from one run to
the next, which drowns a few-percent difference between two separate processes
(``overhead.py``).  Here both loops live in the same process and take turns every
CHUNK_STEPS steps, so they see the same machine at the same moments.  Each step's
duration is recorded (the end of one step to the end of the next; the first step of each
chunk is left out), and the summary is the ratio of the medians of those durations.

The solver side is the ``tools/run_train.py`` path (``SOLVERS.build``, ``set_up_pre``,
``set_up``, ``solve``) with the workload's config and default train hooks; each chunk is
one more ``solve()`` with MAX_STEPS raised by CHUNK_STEPS, which continues mid-epoch.
The hand side is ``hand_loop.py``'s model, optimizer, schedule and batching.
"""

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import torch  # noqa: E402
from hand_loop import build_model  # noqa: E402
from runners import prepare, solver_config  # noqa: E402
from workloads import LEARNING_RATE, SEED, plan  # noqa: E402

from scepter_like.config import Config  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402


class HandLoop:
    """``hand_loop.py``'s training loop, resumable in chunks of steps."""

    def __init__(self, workload, data):
        import numpy as np

        self.w, self.epochs, _ = plan(workload)
        with np.load(data) as arrays:
            self.x, self.y = torch.as_tensor(arrays['x']), torch.as_tensor(arrays['y'])
        torch.manual_seed(SEED)
        self.model = build_model(workload, self.w)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=self.epochs)
        self.done, self.perm = 0, None
        self.durations = []
        self.model.train()

    def run(self, steps):
        batch, spe, interval = self.w['batch'], self.w['steps_per_epoch'], self.w['log_interval']
        last = None
        for _ in range(steps):
            i = self.done % spe
            if i == 0:
                g = torch.Generator()
                g.manual_seed(SEED + self.done // spe)
                self.perm = torch.randperm(len(self.x), generator=g)
            idx = self.perm[i * batch : (i + 1) * batch]
            loss = torch.nn.functional.cross_entropy(
                self.model(self.x.index_select(0, idx)), self.y.index_select(0, idx)
            )
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.done += 1
            if self.done % interval == 0:
                print(f'step {self.done} loss {loss.item():.4f}', file=sys.stderr)
            if self.done % spe == 0:
                self.sched.step()
            now = time.perf_counter()
            if last is not None:
                self.durations.append(now - last)
            last = now


class SolverLoop:
    """The solver on the same workload, advanced CHUNK steps per ``solve()``."""

    def __init__(self, workload, data, folder):
        cfg = solver_config(workload, data, os.path.join(folder, 'work'), os.path.join(folder, 'timer.json'))
        cfg['SOLVER']['MAX_STEPS'] = 0
        cfg['SOLVER']['TRAIN_HOOKS'] = [h for h in cfg['SOLVER']['TRAIN_HOOKS'] if h['NAME'] != 'StepTimerHook']
        logger = logging.getLogger('scepter_like.bench')
        logger.addHandler(logging.StreamHandler(sys.stderr))
        logger.setLevel(int(os.environ.get('BENCH_LOG_LEVEL', logging.INFO)))
        self.solver = SOLVERS.build(Config(cfg).SOLVER, logger=logger)
        self.solver.set_up_pre()
        self.solver.set_up()
        self.durations, self._last = [], None
        self.solver.register_callback_on_iter_end(self._tick)

    def _tick(self, solver):
        now = time.perf_counter()
        if self._last is not None:
            self.durations.append(now - self._last)
        self._last = now

    def run(self, steps):
        self._last = None
        self.solver.max_steps = self.solver.total_iter + steps
        self.solver.solve()


def measure(workload, chunks, chunk_steps, folder):
    data, _ = prepare(workload, folder)
    loops = {'hand': HandLoop(workload, data), 'solver': SolverLoop(workload, data, folder)}
    for c in range(chunks):
        order = ('hand', 'solver') if c % 2 == 0 else ('solver', 'hand')
        for name in order:
            loops[name].run(chunk_steps)
    medians = {name: statistics.median(loop.durations) * 1e6 for name, loop in loops.items()}
    quartiles = {name: statistics.quantiles(loop.durations, n=4)[0] * 1e6 for name, loop in loops.items()}
    return {
        'workload': workload,
        'steps_each': chunks * chunk_steps,
        'median_step_us': medians,
        'p25_step_us': quartiles,
        'ratio_median': medians['solver'] / medians['hand'],
        'ratio_p25': quartiles['solver'] / quartiles['hand'],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv', 'all'), default='all')
    parser.add_argument('--chunks', type=int, default=60)
    parser.add_argument('--chunk-steps', type=int, default=50)
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = []
    for workload in ('mlp', 'conv') if args.workload == 'all' else (args.workload,):
        chunks, chunk_steps = (args.chunks, args.chunk_steps) if workload == 'mlp' else (20, 10)
        with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
            results.append(measure(workload, chunks, chunk_steps, folder))
    print(f'{"workload":8s} {"steps":>6s} {"hand µs":>9s} {"solver µs":>10s} {"ratio":>7s} {"p25 ratio":>9s}')
    for r in results:
        m = r['median_step_us']
        print(
            f'{r["workload"]:8s} {r["steps_each"]:6d} {m["hand"]:9.1f} {m["solver"]:10.1f}'
            f' {r["ratio_median"]:7.3f} {r["ratio_p25"]:9.3f}'
        )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
