#!/usr/bin/env python
"""MeshGraphNet training steps, solver against a hand-written loop, at three model sizes, each in its own process.

``python benchmarks/mesh_step.py [--sizes small,64x6,128x15] [--rounds 5] [--steps N] [--solver-set KEY=VALUE ...]
[--solver-preload LIB] [--json FILE]``

Sizes (``SIZES``): ``small`` is ``configs/mesh_regression/mgn.yaml`` as shipped (HIDDEN 32,
3 blocks, 1-layer MLPs, batches of 4 meshes of 162 and 642 vertices); ``64x6`` is HIDDEN 64,
6 blocks, 2-layer MLPs, batches of 2 meshes of 642 vertices; ``128x15`` PhysicsNeMo's
MeshGraphNet defaults (HIDDEN 128, 15 blocks, 2-layer MLPs) on the same batches.  Every
MLP but the decoder ends in LayerNorm; sum aggregation; 8 features per vertex; Adam.

Each round runs the two sides in processes of their own, one torch thread each, taking
turns: every ``turn_steps`` steps a side hands the CPU to the other through a pipe (the
first turn alternates between rounds), so both see the machine in the same state and a
process-wide setting reaches one side only.

- solver: ``tools/run_train.py``'s way (``SOLVERS.build``, ``set_up_pre``, ``set_up``,
  ``solve``) on mgn.yaml with the size's model and batch, train data only, its train
  hooks (BackwardHook with gradient clipping, LogHook, LrHook, a checkpoint at the end),
  MAX_STEPS steps;
- hand: plain PyTorch around the same MeshGraphNet class, built from the same seed (the
  initial weights are compared), the same training graphs in the same order (``randperm``
  seeded with SEED + epoch, as the solver's sampler draws it), ``collate_graphs``, Adam,
  ``clip_grad_norm_``, a per-epoch cosine schedule and a ``loss.item()`` line every 10 steps.

Both tick a clock at the end of every step (the solver after all its hooks) that reads
the wall and CPU time, the process's minor page faults (``resource.getrusage``) and its
resident memory; the wait for a turn is left out, and so is the first turn (the heap and
the caches fill).  Per round: the median over pairs of turns of the ratio solver / hand
of the mean step time (wall and CPU).  Per size: the median of those over rounds and
their range, page faults per step, the resident memory (the largest at the end of a step,
and the process's peak, set-up included), and the validation RMSE (mm) both reach after
the same steps (one function scores both).

``--solver-set KEY=VALUE`` overrides the solver's config (e.g. ``ENV.KEEP_CPU_HEAP=false``),
``--solver-preload LIB`` runs the solver's process with ``LD_PRELOAD=LIB`` (jemalloc,
tcmalloc): the allocator choices of docs/cpu_memory.md were measured so.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from common import TurnTaker, end_turn, take_turns

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
CONFIG = os.path.join(REPO, 'configs', 'mesh_regression', 'mgn.yaml')
SEED = 0
LOG_INTERVAL = 10
PAGE = os.sysconf('SC_PAGE_SIZE')
WARMUP_TURNS = 1  # left out of the figures: the heap and the caches fill
GENERATE = {'SEED': 0, 'SUBJECTS': 48, 'PHASES': 3, 'PCA_MODES': 4, 'VAL_SUBJECTS': 4, 'TEST_SUBJECTS': 4}

# model keys, meshes per batch, icosphere levels (2: 162 vertices, 3: 642), steps per run and per turn
SIZES = {
    'small': {'model': {}, 'batch': 4, 'levels': [2, 3], 'steps': 120, 'turn_steps': 10},
    '64x6': {
        'model': {'HIDDEN': 64, 'PROCESSOR_BLOCKS': 6, 'MLP_LAYERS': 2},
        'batch': 2,
        'levels': [3],
        'steps': 60,
        'turn_steps': 5,
    },
    '128x15': {
        'model': {'HIDDEN': 128, 'PROCESSOR_BLOCKS': 15, 'MLP_LAYERS': 2},
        'batch': 2,
        'levels': [3],
        'steps': 24,
        'turn_steps': 2,
    },
}


class StepClock:
    """Each step's wall and CPU time and minor page faults, from the end of one step to the end of the next.

    Every ``turn_steps`` steps it hands over to the other side's process: it writes ``turn``
    on stdout and waits for a line on stdin; the wait is left out of the next step.
    """

    def __init__(self, turn_steps):
        self.turn_steps, self.turns, self.steps, self._last = turn_steps, [], 0, None
        self.rss_mib = 0.0  # the largest resident set at the end of a step

    def tick(self, _solver=None):
        now, cpu, faults = self._read()
        with open('/proc/self/statm') as f:
            self.rss_mib = max(self.rss_mib, int(f.read().split()[1]) * PAGE / 2**20)
        if self._last is not None:
            self.turns[-1].append([now - self._last[0], cpu - self._last[1], faults - self._last[2]])
        self.steps += 1
        if self.steps == 1 or self.steps % self.turn_steps == 0:
            end_turn(sys.stdin, sys.stdout)
            self.turns.append([])
            now, cpu, faults = self._read()
        self._last = (now, cpu, faults)

    @staticmethod
    def _read():
        return time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_config(size, steps, folder, overrides=()):
    """mgn.yaml at ``size``: its data in ``folder``, train data only, MAX_STEPS ``steps``, one checkpoint at the end."""
    from scepter_like.config import Config, apply_overrides

    spec = SIZES[size]
    cfg = Config(cfg_file=CONFIG)
    cfg.ENV.SEED = SEED
    solver = cfg.SOLVER
    solver.WORK_DIR = os.path.join(folder, f'work-{size}-{os.getpid()}')
    for key, value in spec['model'].items():
        solver.MODEL[key] = value
    data = solver.TRAIN_DATA
    data.BATCH_SIZE = spec['batch']
    data.GENERATE = {**GENERATE, 'LEVELS': spec['levels']}
    data.MANIFEST = os.path.join(folder, 'data-' + '-'.join(map(str, spec['levels'])), 'manifest.csv')
    steps_per_epoch = math.ceil(120 / spec['batch'])  # 40 training subjects x 3 phases
    solver.MAX_STEPS = steps
    solver.MAX_EPOCHS = solver.LR_SCHEDULER.T_MAX = math.ceil(steps / steps_per_epoch)
    solver.EVAL_DATA = solver.TEST_DATA = None
    solver.TRAIN_HOOKS = [
        {'NAME': 'BackwardHook', 'GRADIENT_CLIP': 1.0},
        {'NAME': 'LogHook', 'LOG_INTERVAL': LOG_INTERVAL},
        {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0},
        {'NAME': 'CheckpointHook', 'INTERVAL': solver.MAX_EPOCHS},
    ]
    apply_overrides(cfg, overrides)
    return cfg, data


def mesh_dataset(data_cfg, split):
    """The MeshDataset of ``split`` that the TRAIN_DATA config ``data_cfg`` reads from."""
    from scepter_like.data.registry import DATASETS

    keys = ('NAME', 'MANIFEST', 'GENERATE', 'COLLATE')
    return DATASETS.build({**{k: data_cfg.to_dict()[k] for k in keys}, 'SPLIT': split})


def validation_rmse(model, train_data_cfg):
    """RMSE (mm) over the validation split, one graph per forward: the same scoring for both sides."""
    import torch

    model.eval()
    sq, points = 0.0, 0
    with torch.no_grad():
        for item in mesh_dataset(train_data_cfg, 'val').items:
            pred = model(features=item['features'], edge_index=item['edge_index'])['pred']
            sq += float(((pred.double() - item['target'].double()) ** 2).sum())
            points += len(pred)
    return math.sqrt(sq / points)


def checksum(model):
    return float(sum(p.double().sum() for p in model.parameters()))


def run_solver(size, steps, folder, overrides, turn_steps):
    from scepter_like.cli import import_modules
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.logger import get_logger

    cfg, data_cfg = run_config(size, steps, folder, overrides)
    import_modules(cfg.IMPORTS)  # as tools/run_train.py does
    solver = SOLVERS.build(cfg.SOLVER, logger=get_logger('scepter_like.bench', stream=sys.stderr))
    solver.set_up_pre()
    solver.set_up()
    initial = checksum(solver.unwrapped_model)
    clock = StepClock(turn_steps)
    solver.register_callback_on_iter_end(clock.tick)  # after every hook of the step
    try:
        solver.solve()
    finally:
        solver.close()
    return clock, initial, solver.unwrapped_model, data_cfg


def run_hand(size, steps, folder, turn_steps):
    """The hand-written loop: plain PyTorch around the same model class and training graphs."""
    import torch

    from scepter_like.model.registry import MODELS
    from tasks.mesh_regression.collate import collate_graphs

    cfg, data_cfg = run_config(size, steps, folder)
    torch.set_num_threads(1)
    train = mesh_dataset(data_cfg, 'train')
    items, stats = train.items, train.normalisation_stats()
    batch = data_cfg.BATCH_SIZE
    steps_per_epoch = math.ceil(len(items) / batch)
    torch.manual_seed(SEED)
    model_cfg = cfg.SOLVER.MODEL.to_dict()
    model = MODELS.build({**model_cfg, 'STATS': stats.to_dict()})
    initial = checksum(model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.SOLVER.OPTIMIZER.LEARNING_RATE)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.SOLVER.LR_SCHEDULER.T_MAX)
    clock = StepClock(turn_steps)
    model.train()
    for done in range(steps):
        epoch, i = divmod(done, steps_per_epoch)
        if i == 0:
            g = torch.Generator()
            g.manual_seed(SEED + epoch)
            perm = torch.randperm(len(items), generator=g)
        graphs = collate_graphs([items[j] for j in perm[i * batch : (i + 1) * batch].tolist()])
        loss = model(**graphs)['loss']
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (done + 1) % LOG_INTERVAL == 0:
            print(f'step {done + 1} loss {loss.item():.4f}', file=sys.stderr)
        if (done + 1) % steps_per_epoch == 0:
            sched.step()
        clock.tick()
    return clock, initial, model, data_cfg


def worker(side, size, steps, folder, out, overrides):
    """One side's run, taking turns with the other; writes its turns, memory and validation RMSE to ``out``."""
    turn_steps = SIZES[size]['turn_steps']
    if side == 'hand':
        clock, initial, model, data_cfg = run_hand(size, steps, folder, turn_steps)
    else:
        clock, initial, model, data_cfg = run_solver(size, steps, folder, overrides, turn_steps)
    result = {
        'turns': [t for t in clock.turns if t],  # [wall s, cpu s, faults] per step
        'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        'step_rss_mib': clock.rss_mib,
        'initial_checksum': initial,
        'parameters': sum(p.numel() for p in model.parameters()),
        'val_rmse': validation_rmse(model, data_cfg),
    }
    with open(out, 'w') as f:
        json.dump(result, f)


def run_round(size, steps, folder, tag, overrides, preload, first):
    """Both sides in their own processes, taking turns (``first`` starts); their results."""
    runs = {}
    for side in ('hand', 'solver'):
        cmd = [sys.executable, os.path.abspath(__file__), '--worker', side, '--sizes', size, '--steps', str(steps)]
        cmd += ['--folder', folder, '--out', os.path.join(folder, f'{side}-{tag}.json')]
        for item in overrides:
            cmd += ['--solver-set', item]
        env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
        if preload and side == 'solver':
            env['LD_PRELOAD'] = preload
        log = open(os.path.join(folder, f'{side}-{tag}.log'), 'w+')
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        runs[side] = TurnTaker(proc, proc.stdout, proc.stdin, log)
    try:
        take_turns(runs, first)
    finally:
        for run in runs.values():
            run.log.close()
    results = {}
    for side in runs:
        with open(os.path.join(folder, f'{side}-{tag}.json')) as f:
            results[side] = json.load(f)
    return results


def summarize_round(hand, solver):
    """Per side: mean wall / CPU ms and faults per step; ratios solver / hand: the median over turn pairs."""
    pairs = list(zip(hand['turns'], solver['turns']))[WARMUP_TURNS:]
    summary = {}
    for side, run in (('hand', hand), ('solver', solver)):
        steps = [step for turn in run['turns'][WARMUP_TURNS:] for step in turn]
        summary[side] = {
            'step_ms': statistics.mean(s[0] for s in steps) * 1e3,
            'cpu_ms': statistics.mean(s[1] for s in steps) * 1e3,
            'faults_per_step': statistics.mean(s[2] for s in steps),
        }
    for index, key in ((0, 'wall'), (1, 'cpu')):
        summary[f'ratio_{key}'] = statistics.median(
            statistics.mean(s[index] for s in st) / statistics.mean(s[index] for s in ht) for ht, st in pairs
        )
    return summary


def measure(size, rounds, steps, folder, overrides, preload):
    import tasks.mesh_regression  # noqa: F401  (registrations)
    from tasks.mesh_regression.dataset import ensure_generated

    cfg, data_cfg = run_config(size, steps, folder)
    ensure_generated(data_cfg)  # once, before the two processes read it
    per_round, runs = [], []
    for r in range(rounds):
        run = run_round(size, steps, folder, f'{size}-{r}', overrides, preload, 'hand' if r % 2 == 0 else 'solver')
        if run['hand']['initial_checksum'] != run['solver']['initial_checksum']:
            raise RuntimeError(f'{size}: the two sides start from different weights')
        per_round.append(summarize_round(run['hand'], run['solver']))
        runs.append(run)
        h, s = per_round[-1]['hand'], per_round[-1]['solver']
        print(
            f'  {size} round {r + 1}/{rounds}: hand {h["step_ms"]:7.1f} ms {h["faults_per_step"]:6.0f} faults,'
            f' solver {s["step_ms"]:7.1f} ms {s["faults_per_step"]:6.0f} faults;'
            f' wall {per_round[-1]["ratio_wall"]:.3f}, cpu {per_round[-1]["ratio_cpu"]:.3f}',
            file=sys.stderr,
        )
    result = {'size': size, 'parameters': runs[0]['hand']['parameters'], 'steps': steps, 'rounds': rounds}
    for side in ('hand', 'solver'):
        result[side] = {key: statistics.median(r[side][key] for r in per_round) for key in per_round[0][side]}
        for key in ('peak_rss_mib', 'step_rss_mib'):
            result[side][key] = statistics.median(run[side][key] for run in runs)
        result[side]['val_rmse'] = runs[0][side]['val_rmse']
    for key in ('wall', 'cpu'):
        ratios = [r[f'ratio_{key}'] for r in per_round]
        result[f'ratio_{key}'] = {'median': statistics.median(ratios), 'range': [min(ratios), max(ratios)]}
    result['runs'] = runs
    return result


def print_table(results):
    print(
        f'{"size":8s} {"params":>8s} {"steps":>5s} {"hand ms":>8s} {"solver ms":>9s} {"wall ratio (range)":>22s}'
        f' {"cpu ratio (range)":>22s} {"faults hand":>11s} {"solver":>7s} {"RSS MiB hand":>12s} {"solver":>7s}'
        f' {"peak hand":>9s} {"solver":>7s}'
        f' {"val RMSE hand":>13s} {"solver":>7s}'
    )
    for r in results:
        h, s = r['hand'], r['solver']
        wall, cpu = r['ratio_wall'], r['ratio_cpu']
        print(
            f'{r["size"]:8s} {r["parameters"]:8d} {r["steps"]:5d} {h["step_ms"]:8.1f} {s["step_ms"]:9.1f}'
            f' {wall["median"]:6.3f} ({wall["range"][0]:.3f}-{wall["range"][1]:.3f})'
            f' {cpu["median"]:6.3f} ({cpu["range"][0]:.3f}-{cpu["range"][1]:.3f})'
            f' {h["faults_per_step"]:11.0f} {s["faults_per_step"]:7.0f} {h["step_rss_mib"]:12.0f}'
            f' {s["step_rss_mib"]:7.0f} {h["peak_rss_mib"]:9.0f} {s["peak_rss_mib"]:7.0f}'
            f' {h["val_rmse"]:13.4f} {s["val_rmse"]:7.4f}'
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', default=','.join(SIZES), help=f'comma-separated, of {", ".join(SIZES)}')
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--steps', type=int, default=0, help="steps per run (0: the size's own)")
    parser.add_argument('--solver-set', action='append', default=[], metavar='KEY=VALUE')
    parser.add_argument('--solver-preload', default='', metavar='LIB', help="LD_PRELOAD of the solver's process")
    parser.add_argument('--json', default='')
    parser.add_argument('--worker', choices=['hand', 'solver'], help=argparse.SUPPRESS)
    parser.add_argument('--folder', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = args.sizes.split(',')
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f'unknown sizes {unknown}; choose from {list(SIZES)}')
    if args.worker:
        import tasks.mesh_regression  # noqa: F401  (registrations)

        worker(args.worker, sizes[0], args.steps, args.folder, args.out, args.solver_set)
        return 0
    with tempfile.TemporaryDirectory(prefix='scepter_bench_mesh_') as folder:
        results = [
            measure(size, args.rounds, args.steps or SIZES[size]['steps'], folder, args.solver_set, args.solver_preload)
            for size in sizes
        ]
    print_table(results)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
