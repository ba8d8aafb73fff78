#!/usr/bin/env python
"""Solver vs hand-written loop in ONE process, alternating short chunks of steps.

``python benchmarks/interleaved.py [--workload mlp|conv|all] [--steps N] [--chunk-steps N] [--json FILE]``

On a shared VM the speed of a whole process drifts by tens of percent from one run to
the next, which drowns a few-percent difference between two separate processes
(``overhead.py``).  Here both loops live in the same process and take turns every
CHUNK_STEPS steps, so they see the same machine at the same moments.  Each step's
duration is recorded (the end of one step to the end of the next; the first step of each
chunk is left out).  The summary is the median over chunk pairs of the ratio of their
mean step times (every step counts, log steps included; a burst of outside load spoils
one pair, not the median), beside the ratio of the median single steps.

The solver side is the ``tools/run_train.py`` path (``SOLVERS.build``, ``set_up_pre``,
``set_up``, ``solve``) with the workload's config and default train hooks, one whole
``solve()``; its clock, an end-of-step callback (after every hook), runs the next
CHUNK_STEPS steps of the hand side (``hand_loop.py``'s model, optimizer, schedule and
batching) after every CHUNK_STEPS-th step.  The hand loop calls the same clock code at
the end of each of its steps.
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
from hand_loop import build_model, load_tensors  # noqa: E402
from runners import prepare, solver_config  # noqa: E402
from workloads import LEARNING_RATE, SEED, plan  # noqa: E402

from scepter_like.config import Config  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402
from scepter_like.utils.logger import get_logger  # noqa: E402


class StepClock:
    """Each step's duration (the end of one step to the end of the next), in chunks of ``chunk_steps``.

    Both loops call ``tick`` once at the end of every step (the solver through an
    end-of-step callback), so both pay the same for being timed.  The step after a switch
    is left out: its span holds the other loop's chunk.
    """

    def __init__(self, chunk_steps, on_chunk_end=None):
        self.chunk_steps, self.on_chunk_end = chunk_steps, on_chunk_end
        self.chunks, self.steps, self._last = [[]], 0, None

    def tick(self, _solver=None):
        now = time.perf_counter()
        if self._last is not None:
            self.chunks[-1].append(now - self._last)
        self._last = now
        self.steps += 1
        if self.steps % self.chunk_steps == 0:
            if self.on_chunk_end is not None:
                self.on_chunk_end()
            self.chunks.append([])
            self._last = None

    def timed_chunks(self):
        return [c for c in self.chunks if c]


class HandLoop:
    """``hand_loop.py``'s training loop, resumable in chunks of steps."""

    def __init__(self, workload, data, chunk_steps, steps=None):
        self.w, self.epochs, _ = plan(workload, steps)
        self.x, self.y = load_tensors(data)
        torch.manual_seed(SEED)
        self.model = build_model(workload, self.w)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=self.epochs)
        self.done, self.perm = 0, None
        self.clock = StepClock(chunk_steps)
        self.model.train()

    def run(self, steps):
        batch, spe, interval = self.w['batch'], self.w['steps_per_epoch'], self.w['log_interval']
        tick = self.clock.tick
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
            tick()


class SolverLoop:
    """One whole ``solve()`` of the workload; at the end of a chunk its clock hands the CPU to the hand loop."""

    def __init__(self, workload, data, folder, hand, steps=None):
        work, timer = os.path.join(folder, 'work'), os.path.join(folder, 'timer.json')
        cfg = solver_config(workload, data, work, timer, steps)
        cfg['SOLVER']['TRAIN_HOOKS'] = [h for h in cfg['SOLVER']['TRAIN_HOOKS'] if h['NAME'] != 'StepTimerHook']
        logger = get_logger('scepter_like.bench', stream=sys.stderr)  # as run_train's, on stderr
        logger.setLevel(int(os.environ.get('BENCH_LOG_LEVEL', logging.INFO)))
        self.solver = SOLVERS.build(Config(cfg).SOLVER, logger=logger)
        self.solver.set_up_pre()
        self.solver.set_up()
        self.clock = StepClock(hand.clock.chunk_steps, on_chunk_end=lambda: hand.run(hand.clock.chunk_steps))
        self.solver.register_callback_on_iter_end(self.clock.tick)  # after every hook of the step

    def run(self):
        self.solver.solve()


def measure(workload, chunk_steps, folder, steps=None):
    data, _ = prepare(workload, folder, steps)
    hand = HandLoop(workload, data, chunk_steps, steps)
    solver = SolverLoop(workload, data, folder, hand, steps)
    solver.run()
    return {'workload': workload, 'steps_each': hand.done, **summarize(hand.clock, solver.clock)}


def summarize(hand_clock, solver_clock):
    """Step times of two StepClocks that took turns, and the solver / hand ratios (see the module docstring)."""
    chunks = {'hand': hand_clock.timed_chunks(), 'solver': solver_clock.timed_chunks()}
    steps = {name: [d for chunk in c for d in chunk] for name, c in chunks.items()}
    medians = {name: statistics.median(d) * 1e6 for name, d in steps.items()}
    means = {name: statistics.mean(d) * 1e6 for name, d in steps.items()}
    pair_ratios = [statistics.mean(s) / statistics.mean(h) for h, s in zip(chunks['hand'], chunks['solver'])]
    return {
        'median_step_us': medians,
        'mean_step_us': means,
        'ratio_chunk_means': statistics.median(pair_ratios),
        'ratio_chunk_means_quartiles': statistics.quantiles(pair_ratios, n=4)[::2],
        'ratio_mean_step': means['solver'] / means['hand'],
        'ratio_median_step': medians['solver'] / medians['hand'],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv', 'all'), default='all')
    parser.add_argument('--steps', type=int, default=None, help='train steps of each loop (default: the workload’s)')
    parser.add_argument('--chunk-steps', type=int, default=0, help='steps per turn (default: 50 MLP, 10 ConvNet)')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = []
    for workload in ('mlp', 'conv') if args.workload == 'all' else (args.workload,):
        chunk_steps = args.chunk_steps or (50 if workload == 'mlp' else 10)
        with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
            results.append(measure(workload, chunk_steps, folder, args.steps))
    print(f'{"workload":8s} {"steps":>6s} {"hand µs":>9s} {"solver µs":>10s} {"ratio":>7s} {"(q1-q3)":>13s}', end='')
    print(f' {"all steps":>9s} {"median step":>11s}')
    for r in results:
        m, (q1, q3) = r['mean_step_us'], r['ratio_chunk_means_quartiles']
        print(
            f'{r["workload"]:8s} {r["steps_each"]:6d} {m["hand"]:9.1f} {m["solver"]:10.1f}'
            f' {r["ratio_chunk_means"]:7.3f} {f"({q1:.3f}-{q3:.3f})":>13s}'
            f' {r["ratio_mean_step"]:9.3f} {r["ratio_median_step"]:11.3f}'
        )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
