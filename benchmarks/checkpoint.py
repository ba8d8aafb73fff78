#!/usr/bin/env python
"""Saving and loading a full solver checkpoint against bare ``torch.save`` / ``torch.load``.

    python benchmarks/checkpoint.py [--hidden 2048] [--rounds 7] [--dir FOLDER]

The model is an MLP (64 -> hidden -> hidden -> 10; 2048 gives 4.4M parameters, 17.6 MB)
after one AdamW step, so the optimizer holds two more tensors per parameter (~53 MB in
all).  Each round times, in alternating order:

- ours, save: what training waits for when CheckpointHook saves (the default) — the state
  collected (model, optimizer, scheduler, hook, progress and RNG state plus meta) and
  ``torch.save``d into a temp file; the fsync, ``os.replace``, folder fsync and
  ``latest`` then run in the hook's background thread, waited for outside the timing;
- ours, async save: the same with ``ASYNC_SAVE: true`` — training waits only for the
  state to be collected and copied to CPU memory;
- ours, sync save: ``solver.save_checkpoint`` — all of it, durable at the path on return
  (a reference: what a save costs with its durability paid on the spot);
- bare, save: ``torch.save({'model', 'optimizer', 'lr_scheduler'})`` to a new file (no fsync);
- bare+fsync, save: the same, then ``fsync`` of the file: the cost of durability alone,
  which ours pays and a bare save does not (a reference, not a target);
- ours, load: ``solver.load_checkpoint`` (``weights_only=True``, key checks, restore all);
- bare, load: ``torch.load(weights_only=True)`` and ``load_state_dict`` of model and optimizer.

It prints the median of each and the median over rounds of the per-round ratios
(targets: save <= 1.2x, load <= 1.2x).  Run it on an idle machine, with FOLDER on the
disk checkpoints will go to (a tmpfs makes fsync free).
"""

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

from common import REPO, prepare, solver_config

sys.path.insert(0, REPO)

import torch  # noqa: E402

from scepter_like.config import Config  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402
from scepter_like.utils.checkpoint import fsync_file  # noqa: E402


def build_solver(folder, hidden):
    """The MLP workload's solver, widened to ``hidden``, after one step; its CheckpointHooks save on demand only."""
    cfg = solver_config('mlp', prepare('mlp', folder, 1), os.path.join(folder, 'run'), steps=1)
    cfg['SOLVER'].update(LOG_FILE='', MAX_STEPS=1)
    cfg['SOLVER']['MODEL']['BACKBONE']['HIDDEN_DIMS'] = [hidden] * 2
    cfg['SOLVER']['TRAIN_HOOKS'] = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'ASYNC_SAVE': True},
    ]
    logger = logging.getLogger('bench')
    logger.setLevel(logging.WARNING)
    solver = SOLVERS.build(Config(cfg).SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    solver.solve()  # one step: the optimizer now holds its moments
    return solver


def bare_save(solver, path):
    state = {
        'model': solver.unwrapped_model.state_dict(),
        'optimizer': solver.optimizer.state_dict(),
        'lr_scheduler': solver.lr_scheduler.state_dict(),
    }
    torch.save(state, path)


def bare_save_fsync(solver, path):
    bare_save(solver, path)
    fsync_file(path)


def bare_load(solver, path):
    state = torch.load(path, map_location='cpu', weights_only=True)
    solver.unwrapped_model.load_state_dict(state['model'])
    solver.optimizer.load_state_dict(state['optimizer'])
    solver.lr_scheduler.load_state_dict(state['lr_scheduler'])


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--hidden', type=int, default=2048, help='MLP width (model size grows as its square)')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--dir', default='.', help='folder to write in (default: the current one)')
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = tempfile.mkdtemp(prefix='ckpt_bench_', dir=args.dir)
    try:
        solver = build_solver(folder, args.hidden)
        ours_path, bare_path = os.path.join(folder, 'ours.pth'), os.path.join(folder, 'bare.pth')
        solver.save_checkpoint(ours_path)  # warm-up (file system, allocator)
        bare_save(solver, bare_path)
        hook, async_hook = [h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CheckpointHook']
        saves = [  # each hook's _save returns once training may go on
            ('ours save', lambda: hook._save(solver, 'default.pth', periodic=False)),
            ('ours async save', lambda: async_hook._save(solver, 'async.pth', periodic=False)),
            ('ours sync save', lambda: solver.save_checkpoint(ours_path)),
            ('bare save', lambda: bare_save(solver, bare_path)),
            ('bare+fsync save', lambda: bare_save_fsync(solver, bare_path)),
        ]
        loads = [
            ('ours load', lambda: solver.load_checkpoint(ours_path)),
            ('bare load', lambda: bare_load(solver, bare_path)),
        ]
        times = {name: [] for name, _ in saves + loads}
        for r in range(args.rounds):  # alternate the order, so drift in the machine's load hits both
            for group in (saves, loads):
                for name, fn in group if r % 2 == 0 else group[::-1]:
                    if name.startswith('bare') and name.endswith('save') and os.path.exists(bare_path):
                        os.remove(bare_path)  # a new file each time, as ours writes a new temp file
                    times[name].append(timed(fn))
                    hook.writer.wait()  # a background write never overlaps the next timing,
                    async_hook.writer.wait()
                    os.sync()  # nor does the kernel's writeback of what a bare save left dirty
        params = sum(p.numel() for p in solver.unwrapped_model.parameters())
        print(
            f'model {params / 1e6:.1f}M parameters; checkpoint {os.path.getsize(ours_path) / 2**20:.1f} MiB'
            f' (bare {os.path.getsize(bare_path) / 2**20:.1f} MiB); {args.rounds} rounds in {folder}'
        )
        med = {k: statistics.median(v) for k, v in times.items()}
        for key in times:
            print(f'  {key}: median {med[key] * 1e3:8.1f} ms  (min {min(times[key]) * 1e3:.1f})')

        def ratio(ours, bare):  # per round (both timed moments apart), then the median over rounds
            return statistics.median(o / b for o, b in zip(times[ours], times[bare]))

        for op in ('save', 'async save', 'sync save', 'load'):
            value = ratio(f'ours {op}', f'bare {op.split()[-1]}')
            print(f'  {op} ratio ours/bare: {value:.2f}x (median of rounds; target <= 1.20x for save and load)')
        print(
            f'  sync save ratio ours/bare+fsync: {ratio("ours sync save", "bare+fsync save"):.2f}x'
            ' (durability priced in)'
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == '__main__':
    main()
