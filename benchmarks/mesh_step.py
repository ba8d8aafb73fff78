#!/usr/bin/env python
"""MeshGraphNet training steps: the solver against a hand-written loop on the same batches, in one process;
then the same with SOLVER.COMPILE on, for eager against compiled.

``python benchmarks/mesh_step.py [--epochs N] [--chunk-steps N] [--backend inductor] [--no-compile] [--json FILE]``

The method of ``overhead.py --interleaved`` (common.StepClock and common.summarize): the solver runs one whole
``solve()`` of ``configs/mesh_regression/mgn.yaml`` (train data only, its train hooks:
BackwardHook with gradient clipping, LogHook, LrHook, one checkpoint at the end), and its
end-of-step callback runs the next CHUNK_STEPS steps of the hand-written loop after every
CHUNK_STEPS-th step.  The hand loop is plain PyTorch around the same MeshGraphNet class:
the same dataset object, the same per-epoch permutation (``randperm`` seeded with
SEED + epoch, as the solver's sampler draws it), so step k of both loops trains on the
same graphs; ``collate_graphs`` batches them, Adam, ``clip_grad_norm_``, a per-epoch
cosine schedule, a ``loss.item()`` line every 10 steps.

Eager against ``SOLVER.COMPILE`` (``--backend``, default inductor; DYNAMIC true, so the
graphs of every vertex count share one compiled graph): a second run, the solver compiled
and the hand loop eager as before.  Both runs are measured against the same eager hand
loop, so ``compile_ratio`` = (compiled solver / hand) / (eager solver / hand) cancels
much of the machine's drift between the runs; ``compile_s`` is how much later the
compiled run ends its first step than the eager one (dynamo, AOT autograd and the
backend's compile of the forward and backward graphs).
"""

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import torch  # noqa: E402
from common import SEED, StepClock, summarize  # noqa: E402

import tasks.mesh_regression  # noqa: E402,F401
from scepter_like.config import Config  # noqa: E402
from scepter_like.model.registry import MODELS  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402
from scepter_like.utils.logger import get_logger  # noqa: E402
from tasks.mesh_regression.collate import collate_graphs  # noqa: E402

CONFIG = os.path.join(REPO, 'configs', 'mesh_regression', 'mgn.yaml')
LOG_INTERVAL = 10


def solver_config(folder, epochs, backend=''):
    """mgn.yaml with its data in ``folder``, train data only, one checkpoint at the end; compiled with ``backend``."""
    cfg = Config(cfg_file=CONFIG)
    cfg.ENV.SEED = SEED
    solver = cfg.SOLVER
    solver.WORK_DIR = os.path.join(folder, f'work-{backend or "eager"}')
    if backend:
        solver.COMPILE = {'ENABLED': True, 'BACKEND': backend, 'DYNAMIC': True}
    solver.MAX_EPOCHS = solver.LR_SCHEDULER.T_MAX = epochs
    solver.TRAIN_DATA.MANIFEST = os.path.join(folder, 'data', 'manifest.csv')
    solver.EVAL_DATA = solver.TEST_DATA = None
    solver.TRAIN_HOOKS = [
        {'NAME': 'BackwardHook', 'GRADIENT_CLIP': 1.0},
        {'NAME': 'LogHook', 'LOG_INTERVAL': LOG_INTERVAL},
        {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0},
        {'NAME': 'CheckpointHook', 'INTERVAL': epochs},
    ]
    return cfg


class HandLoop:
    """The same training in plain PyTorch, resumable in chunks of steps."""

    def __init__(self, solver, chunk_steps):
        cfg = solver.cfg
        self.dataset = solver.datas['train'].dataset
        self.batch = cfg.TRAIN_DATA.BATCH_SIZE
        self.steps_per_epoch = math.ceil(len(self.dataset) / self.batch)
        torch.manual_seed(SEED)
        self.model = MODELS.build(cfg.MODEL.to_dict())  # MODEL.STATS: the statistics the solver computed
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.OPTIMIZER.LEARNING_RATE)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=cfg.MAX_EPOCHS)
        self.done, self.perm = 0, None
        self.clock = StepClock(chunk_steps)
        self.model.train()

    def run(self, steps):
        batch, spe, items = self.batch, self.steps_per_epoch, self.dataset.items
        tick = self.clock.tick
        for _ in range(steps):
            i = self.done % spe
            if i == 0:
                g = torch.Generator()
                g.manual_seed(SEED + self.done // spe)
                self.perm = torch.randperm(len(items), generator=g)
            graphs = collate_graphs([items[j] for j in self.perm[i * batch : (i + 1) * batch].tolist()])
            loss = self.model(**graphs)['loss']
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.done += 1
            if self.done % LOG_INTERVAL == 0:
                print(f'step {self.done} loss {loss.item():.4f}', file=sys.stderr)
            if self.done % spe == 0:
                self.sched.step()
            tick()


def measure(epochs, chunk_steps, folder, backend=''):
    """The solver (compiled with ``backend``, or eager) against the eager hand loop; plus the time to its first step."""
    logger = get_logger('scepter_like.bench', stream=sys.stderr)
    logger.setLevel(int(os.environ.get('BENCH_LOG_LEVEL', logging.INFO)))
    solver = SOLVERS.build(solver_config(folder, epochs, backend).SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    hand = HandLoop(solver, chunk_steps)
    clock = StepClock(chunk_steps, on_turn_end=lambda: hand.run(chunk_steps))
    solver.register_callback_on_iter_end(clock.tick)  # after every hook of the step
    start = time.perf_counter()
    try:
        solver.solve()
    finally:
        solver.close()
    compiled = backend and solver.model._compiled_call_impl is not None  # not when it fell back to eager
    result = {
        'workload': f'mesh_mgn_{backend}' if compiled else 'mesh_mgn',
        'steps_each': hand.done,
        'to_first_step_s': clock.first[0] - start,
        **summarize(hand.clock, clock),
    }
    if compiled:  # graphs dynamo compiled (a recompile for a new shape or guard counts too), slowest steps
        from torch._dynamo.utils import counters

        result['compiled_graphs'] = counters['stats']['unique_graphs']
        result['slowest_steps_ms'] = sorted((d * 1e3 for turn in clock.turns for d in turn), reverse=True)[:3]
    return result


def print_row(r):
    m, (q1, q3) = r['mean_step_us'], r['ratio_turn_means_quartiles']
    print(
        f'{r["workload"]:18s} {r["steps_each"]:6d} {m["hand"] / 1e3:8.1f} {m["solver"] / 1e3:9.1f}'
        f' {r["ratio_turn_means"]:6.3f} {f"({q1:.3f}-{q3:.3f})":>13s}'
        f' {r["ratio_mean_step"]:9.3f} {r["ratio_median_step"]:11.3f} {r["to_first_step_s"]:10.1f}'
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=4, help='passes over the 120 training graphs (30 steps each)')
    parser.add_argument('--chunk-steps', type=int, default=10, help='steps per turn')
    parser.add_argument('--backend', default='inductor', help='torch.compile backend of the compiled run')
    parser.add_argument('--no-compile', action='store_true', help='only the eager solver against the hand loop')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix='scepter_bench_mesh_') as folder:
        runs = [measure(args.epochs, args.chunk_steps, folder)]
        if not args.no_compile:
            runs.append(measure(args.epochs, args.chunk_steps, folder, args.backend))
    print(f'{"workload":18s} {"steps":>6s} {"hand ms":>8s} {"solver ms":>9s} {"ratio":>6s} {"(q1-q3)":>13s}', end='')
    print(f' {"all steps":>9s} {"median step":>11s} {"1st step s":>10s}')
    for r in runs:
        print_row(r)
    result = {'runs': runs}
    if len(runs) == 2:
        eager, compiled = runs
        result['compile_ratio'] = compiled['ratio_turn_means'] / eager['ratio_turn_means']
        result['compile_ratio_mean_step'] = compiled['mean_step_us']['solver'] / eager['mean_step_us']['solver']
        result['compile_s'] = compiled['to_first_step_s'] - eager['to_first_step_s']
        print(
            f'{compiled["workload"]} / eager solver: {result["compile_ratio"]:.3f} (against the hand loop each),'
            f' {result["compile_ratio_mean_step"]:.3f} (mean step); compile time {result["compile_s"]:.1f} s'
            + ('' if compiled['workload'] != 'mesh_mgn' else ' (the compile FAILED: the solver ran eager)')
        )
        if 'compiled_graphs' in compiled:
            slowest = ', '.join(f'{ms:.0f}' for ms in compiled['slowest_steps_ms'])
            print(
                f'graphs compiled: {compiled["compiled_graphs"]}; slowest compiled steps after the first: {slowest} ms'
            )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
