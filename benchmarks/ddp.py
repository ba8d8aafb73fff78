#!/usr/bin/env python
"""2-process DDP (gloo) training throughput: the solver vs a hand-written DDP loop.

    python benchmarks/ddp.py [--rounds 7] [--epochs 3] [--nproc 2]

Relaunches itself under torchrun.  Both sides train the digits MLP
(``configs/cate_recognition/digits_mlp.yaml``, batch 16 per rank = 32 global, AdamW)
on the same dataset object and collate function, inside the same process group.
The solver side is the ``tools/run_train.py`` path (SOLVERS.build, set_up_pre, set_up,
solve) with the config's default train hooks (backward, log, LR, checkpoint, sampler)
and no eval / test data; the hand side is DistributedSampler + DataLoader + DDP +
forward / backward / step.  Rounds alternate which side runs first; a round's ratio
is solver samples/s over hand samples/s, and the median ratio is reported (>= 0.95
is the target).
"""

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CFG = os.path.join(REPO, 'configs', 'cate_recognition', 'digits_mlp.yaml')
BATCH = 16


def solver_round(epochs, work_dir):
    """Train with the solver; returns (samples, seconds)."""
    from argparse import Namespace

    from scepter_like.cli import load_config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.distributed import barrier
    from scepter_like.utils.logger import get_logger

    overrides = [
        f'SOLVER.WORK_DIR={work_dir}',
        f'SOLVER.MAX_EPOCHS={epochs}',
        f'SOLVER.LR_SCHEDULER.T_MAX={epochs}',
        f'SOLVER.TRAIN_DATA.BATCH_SIZE={BATCH}',
        'SOLVER.EVAL_DATA=null',
        'SOLVER.TEST_DATA=null',
        'SOLVER.TRAIN_HOOKS.3.SAVE_BEST=false',  # no eval data to pick a best by
    ]
    cfg = load_config(Namespace(cfg=CFG, overrides=overrides, imports=[]))
    logger = get_logger('scepter_like.bench', rank=int(os.environ['RANK']), stream=io.StringIO())
    solver = SOLVERS.build(cfg.SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    barrier()
    t0 = time.perf_counter()
    solver.solve()
    barrier()
    seconds = time.perf_counter() - t0
    solver.close()
    samples = solver.total_iter * BATCH * solver.world_size
    return samples, seconds


def hand_round(epochs, dataset):
    """The same training as a plain DDP loop; returns (samples, seconds)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    from scepter_like.config import Config
    from scepter_like.data.collate import collate
    from scepter_like.model.registry import MODELS

    torch.manual_seed(2024)
    model_cfg = Config(cfg_file=CFG).SOLVER.MODEL
    model = DistributedDataParallel(MODELS.build(model_cfg))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.002, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    sampler = DistributedSampler(dataset, shuffle=True, seed=2024)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, collate_fn=collate)
    model.train()
    dist.barrier()
    t0 = time.perf_counter()
    steps = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            loss = model(**batch)['loss']
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
        scheduler.step()
    dist.barrier()
    return steps * BATCH * dist.get_world_size(), time.perf_counter() - t0


def worker(args):
    import torch
    import torch.distributed as dist

    from scepter_like.data.registry import DATASETS
    from scepter_like.utils.imports import import_user_modules

    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    import_user_modules(['tasks.cate_recognition'])
    dataset = DATASETS.build(_train_data_cfg())
    rank = dist.get_rank()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds + 1):  # round 0 warms up both sides
            order = ('solver', 'hand') if r % 2 else ('hand', 'solver')
            rate = {}
            for side in order:
                if side == 'solver':
                    samples, seconds = solver_round(args.epochs, os.path.join(tmp, f'run{r}'))
                else:
                    samples, seconds = hand_round(args.epochs, dataset)
                rate[side] = samples / seconds
            if r == 0:
                continue
            ratios.append(rate['solver'] / rate['hand'])
            if rank == 0:
                print(
                    f'round {r}: solver {rate["solver"]:.0f} samples/s, hand {rate["hand"]:.0f} samples/s,'
                    f' ratio {ratios[-1]:.3f}',
                    flush=True,
                )
    if rank == 0:
        print(f'median ratio (solver / hand DDP loop) over {len(ratios)} rounds: {statistics.median(ratios):.3f}')
    dist.destroy_process_group()


def _train_data_cfg():
    from scepter_like.config import Config

    data = Config(cfg_file=CFG).SOLVER.TRAIN_DATA
    return Config({k: v for k, v in data.items() if k not in ('BATCH_SIZE', 'SHUFFLE')}, path='TRAIN_DATA')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--nproc', type=int, default=2)
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    cmd = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={args.nproc}', '--standalone']
    cmd += [os.path.abspath(__file__), '--worker', f'--rounds={args.rounds}', f'--epochs={args.epochs}']
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    return subprocess.call(cmd, env=env)


if __name__ == '__main__':
    sys.exit(main())
