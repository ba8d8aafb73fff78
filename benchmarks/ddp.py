#!/usr/bin/env python
"""2-process DDP (gloo) training throughput: the solver against the hand-written loop under DDP.

    python benchmarks/ddp.py [--rounds 15] [--steps 3000] [--nproc 2] [--aa]

Relaunches itself under torchrun.  Both sides train the MLP workload (common.py: batch
64 per rank, AdamW, per-epoch cosine) on the same data, inside the same process group:
the solver as ``tools/run_train.py`` runs it (``SOLVERS.build``, ``set_up_pre``,
``set_up``, ``solve``; the default train hooks), the hand side ``hand_loop.HandLoop``
(DistributedDataParallel, each rank every nproc-th sample, a log line's loss all-reduced over
the ranks as timm's train.py does).  Rounds alternate which side
goes first after a warm-up round; a round's ratio is solver samples/s over hand
samples/s, and the median over rounds is reported (target >= 0.97).  Single rounds spread by
±10-15 % on a 2-vCPU machine, even hand against hand, hence 15 rounds by default (about 7 minutes).

``--aa``: the hand loop against itself the same way (the candidate side runs ``HandLoop``
too): how far apart two identical runs land on this machine, to read the solver's figure
against.
"""

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import BATCH, REPO, prepare, solver_config

sys.path.insert(0, REPO)


def solver_rate(data, steps, work_dir):
    from scepter_like.config import Config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.distributed import barrier
    from scepter_like.utils.logger import get_logger

    logger = get_logger('scepter_like.bench', rank=int(os.environ['RANK']), stream=io.StringIO())
    solver = SOLVERS.build(Config(solver_config('mlp', data, work_dir, steps)).SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    barrier()
    t0 = time.perf_counter()
    solver.solve()
    barrier()
    seconds = time.perf_counter() - t0
    solver.close()
    return solver.progress.total_iter * BATCH * solver.world_size / seconds


def hand_rate(data, steps):
    import torch.distributed as dist
    from hand_loop import HandLoop

    loop = HandLoop('mlp', data, steps, log=io.StringIO())
    dist.barrier()
    t0 = time.perf_counter()
    loop.run(loop.total)
    dist.barrier()
    return loop.total * BATCH * loop.world / (time.perf_counter() - t0)


def worker(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    ratios, label = [], 'hand again' if args.aa else 'solver'
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds + 1):  # round 0 warms up both sides
            rate = {}
            for side in ('solver', 'hand') if r % 2 else ('hand', 'solver'):
                if side == 'solver' and not args.aa:
                    rate[side] = solver_rate(args.data, args.steps, os.path.join(tmp, f'run{r}'))
                else:
                    rate[side] = hand_rate(args.data, args.steps)
            if r == 0:
                continue
            ratios.append(rate['solver'] / rate['hand'])
            if dist.get_rank() == 0:
                print(
                    f'round {r}: {label} {rate["solver"]:.0f} samples/s, hand {rate["hand"]:.0f} samples/s,'
                    f' ratio {ratios[-1]:.3f}',
                    flush=True,
                )
    if dist.get_rank() == 0:
        print(f'median ratio ({label} / hand DDP loop) over {len(ratios)} rounds: {statistics.median(ratios):.3f}')
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--steps', type=int, default=3000, help='steps of one process (each rank runs 1/nproc)')
    parser.add_argument('--nproc', type=int, default=2)
    parser.add_argument('--aa', action='store_true', help="the hand loop against itself: the method's own spread")
    parser.add_argument('--data', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data:
        return worker(args)
    with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
        cmd = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={args.nproc}', '--standalone']
        cmd += [os.path.abspath(__file__), f'--rounds={args.rounds}', f'--steps={args.steps}']
        cmd += ['--aa'] if args.aa else []
        cmd += [f'--data={prepare("mlp", folder, args.steps)}']
        env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
        return subprocess.call(cmd, env=env)


if __name__ == '__main__':
    sys.exit(main())
