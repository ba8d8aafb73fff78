#!/usr/bin/env python
"""PINN figures: the toolkit against what its users would otherwise run.

``python benchmarks/pinn.py burgers|poisson|recipe|heat|lines|all [--json FILE]``

- ``burgers [--steps 5000] [--turn-steps 1000]``: ``configs/pinn/burgers1d.yaml``'s Adam phase
  against DeepXDE 1.15's own Burgers example (``deepxde_burgers.py``: same point counts and
  sampling, network, optimizer, seed, one thread), in one process, taking turns of
  TURN_STEPS steps (the same moments of the machine for both); wall and CPU seconds of
  each side's steps, and the relative L2 error of both on the 201x101 grid against the
  Cole-Hopf solution.  DeepXDE's turns are ``model.train(iterations=TURN_STEPS)`` calls
  (with its default display every 1,000 steps, as one call of all the steps has).
- ``burgers-run [--steps 5000] [--rounds 1]``: whole processes as users start them, at the same
  time: ``tools/run_train.py --cfg configs/pinn/burgers1d.yaml`` cut to its Adam phase against
  ``deepxde_burgers.py`` (train, then the error on the same grid); wall and CPU seconds.
- ``poisson [--rounds 1]``: the whole process a user starts, ``tools/run_train.py --cfg
  configs/pinn/poisson2d.yaml`` (2,000 Adam steps and 1,000 L-BFGS iterations, six
  evaluations with their field plots, checkpoints), against ``pinn_hand_poisson.py``, the
  same recipe hand-written in plain PyTorch with DeepXDE's L-BFGS defaults (one
  ``step(closure)`` of 1,000 iterations, no line search).  Both processes of a round run at
  the same time, so both see the same machine; wall and CPU seconds (os.wait4) and the
  relative L2 error of each.
- ``recipe``: the whole shipped Burgers recipe (15,000 Adam steps, then L-BFGS) as run_train
  runs it; its relative L2 error.
- ``heat``: ``configs/pinn/heat_inverse.yaml`` as run_train runs it; the learned D against 0.1.
- ``lines``: the lines a user writes for Burgers and for the inverse heat problem (the model
  module and the config, blank and comment lines left out) beside DeepXDE's.
"""

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from argparse import Namespace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

CONFIGS = os.path.join(REPO, 'configs', 'pinn')
BURGERS_CFG = os.path.join(CONFIGS, 'burgers1d.yaml')
POISSON_CFG = os.path.join(CONFIGS, 'poisson2d.yaml')
HEAT_CFG = os.path.join(CONFIGS, 'heat_inverse.yaml')
DEEPXDE_BURGERS_LINES = 16  # examples/pinn_forward/Burgers.py up to model.train, blank lines left out
SEED = 2024


def clock():
    return time.perf_counter(), time.process_time()


def since(start):
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


class Turns:
    """Alternates the toolkit's train steps with the other side's turns; the wall and CPU time of each turn."""

    def __init__(self, turn_steps, other_turn):
        self.turn_steps, self.other_turn = turn_steps, other_turn
        self.toolkit, self.other = [], []
        self.steps, self.start = 0, clock()

    def tick(self, _solver=None):
        self.steps += 1
        if self.steps % self.turn_steps:
            return
        self.toolkit.append(since(self.start))
        other_start = clock()
        self.other_turn()
        self.other.append(since(other_start))
        self.start = clock()


def toolkit_solver(cfg_path, work_dir, overrides):
    from scepter_like.cli import load_config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.logger import get_logger

    overrides = [f'SOLVER.WORK_DIR={work_dir}', 'SOLVER.CODE_SNAPSHOT=false', *overrides]
    cfg = load_config(Namespace(cfg=cfg_path, overrides=overrides, imports=[]))
    solver = SOLVERS.build(cfg.SOLVER, logger=get_logger('scepter_like.bench', stream=sys.stderr))
    solver.set_up_pre()
    solver.set_up()
    return solver


def ratios(toolkit, other):
    """Total and median-of-turns ratios toolkit / other, wall (index 0) and CPU (index 1)."""
    out = {}
    for i, kind in enumerate(('wall', 'cpu')):
        mine, theirs = [t[i] for t in toolkit], [t[i] for t in other]
        out[kind] = {
            'toolkit_s': sum(mine),
            'other_s': sum(theirs),
            'ratio_total': sum(mine) / sum(theirs),
            'ratio_median_turn': statistics.median(m / t for m, t in zip(mine, theirs)),
        }
    return out


def burgers(steps, turn_steps, folder):
    import numpy as np
    import torch
    from deepxde_burgers import build

    torch.set_num_threads(1)
    model = build(SEED)
    overrides = [f'SOLVER.MAX_EPOCHS={steps}', f'SOLVER.EVAL_INTERVAL={steps}', 'SOLVER.OPTIMIZER_PHASES=[]']
    solver = toolkit_solver(BURGERS_CFG, os.path.join(folder, 'burgers'), overrides)
    turns = Turns(turn_steps, lambda: model.train(iterations=turn_steps, display_every=1000))
    solver.register_callback_on_iter_end(turns.tick)
    turns.start = clock()
    solver.solve()
    end_of_run = since(turns.start)  # the toolkit's evaluation, field plot and checkpoint after its last step
    solver.close()
    grid = solver.datas['eval'].dataset.arrays
    reference = grid['u_exact'].double().numpy()
    theirs = model.predict(grid['x'].numpy()).astype(np.float64)
    return {
        'steps': steps,
        'turn_steps': turn_steps,
        'turns': len(turns.toolkit),
        'relative_l2': {
            'toolkit': solver.epoch_outputs['eval']['relative_l2'],
            'deepxde': float(np.linalg.norm(theirs - reference) / np.linalg.norm(reference)),
        },
        'steps_time': ratios(turns.toolkit, turns.other),
        'toolkit_end_of_run_wall_s': end_of_run[0],
    }


def run_concurrently(commands, logs):
    """Start every command at once; ``{name: (wall s, cpu s, exit status)}`` as each ends (os.wait4)."""
    start, procs = time.perf_counter(), {}
    for name, cmd in commands.items():
        with open(logs[name], 'w') as log:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        procs[proc.pid] = name
    done = {}
    while len(done) < len(procs):
        pid, status, usage = os.wait4(-1, 0)
        if pid in procs:
            done[procs[pid]] = (time.perf_counter() - start, usage.ru_utime + usage.ru_stime, status)
    return done


def compare_processes(name, commands, rounds, folder):
    """Each round runs ``commands`` ({'toolkit': argv, other: argv}; ``{work}`` in an argument: the round's
    WORK_DIR) at once; their times, the ratios and each side's relative L2 error."""
    other = next(k for k in commands if k != 'toolkit')
    results = []
    for r in range(rounds):
        work = os.path.join(folder, f'{name}-{r}')
        logs = {side: f'{work}-{side}.log' for side in commands}
        done = run_concurrently(
            {side: [a.replace('{work}', work) for a in argv] for side, argv in commands.items()}, logs
        )
        if any(status for _, _, status in done.values()):
            raise RuntimeError(f'a {name} run failed: {done}; see {logs}')
        with open(logs[other]) as f:
            theirs = json.loads(f.read().strip().splitlines()[-1])
        results.append(
            {
                'wall_s': {side: done[side][0] for side in done},
                'cpu_s': {side: done[side][1] for side in done},
                'ratio_wall': done['toolkit'][0] / done[other][0],
                'ratio_cpu': done['toolkit'][1] / done[other][1],
                'relative_l2': {'toolkit': last_eval(work, 'relative_l2'), other: theirs['relative_l2']},
            }
        )
    return {
        'rounds': results,
        'ratio_wall_median': statistics.median(r['ratio_wall'] for r in results),
        'ratio_cpu_median': statistics.median(r['ratio_cpu'] for r in results),
    }


def burgers_run(steps, rounds, folder):
    toolkit = [sys.executable, 'tools/run_train.py', '--cfg', BURGERS_CFG, 'SOLVER.WORK_DIR={work}']
    toolkit += [f'SOLVER.MAX_EPOCHS={steps}', f'SOLVER.EVAL_INTERVAL={steps}', 'SOLVER.OPTIMIZER_PHASES=[]']
    deepxde = [sys.executable, os.path.join(HERE, 'deepxde_burgers.py'), '--steps', str(steps), '--seed', str(SEED)]
    return compare_processes('burgers-run', {'toolkit': toolkit, 'deepxde': deepxde}, rounds, folder)


def last_eval(work_dir, key):
    with open(os.path.join(work_dir, 'metrics.jsonl')) as f:
        evals = [r for r in map(json.loads, f) if r['kind'] == 'eval']
    return evals[-1]['values'][key]


def poisson(rounds, folder):
    toolkit = [sys.executable, 'tools/run_train.py', '--cfg', POISSON_CFG, 'SOLVER.WORK_DIR={work}']
    hand = [sys.executable, os.path.join(HERE, 'pinn_hand_poisson.py'), '--seed', str(SEED)]
    return compare_processes('poisson', {'toolkit': toolkit, 'hand': hand}, rounds, folder)


def run_train(cfg_path, work):
    """``tools/run_train.py --cfg cfg_path`` into ``work``, as a user starts it; its wall seconds."""
    start = time.perf_counter()
    res = subprocess.run(
        [sys.executable, 'tools/run_train.py', '--cfg', cfg_path, f'SOLVER.WORK_DIR={work}'],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return time.perf_counter() - start


def recipe(folder):
    work = os.path.join(folder, 'burgers-recipe')
    wall = run_train(BURGERS_CFG, work)
    return {'relative_l2': last_eval(work, 'relative_l2'), 'wall_s': wall}


def heat(folder):
    work = os.path.join(folder, 'heat')
    wall = run_train(HEAT_CFG, work)
    with open(os.path.join(work, 'metrics.jsonl')) as f:
        trains = [r for r in map(json.loads, f) if r['kind'] == 'train']
    learned = trains[-1]['values']['D']
    return {
        'learned_D': learned,
        'relative_error_of_D': abs(learned - 0.1) / 0.1,
        'relative_l2': last_eval(work, 'relative_l2'),
        'wall_s': wall,
    }


def code_lines(text):
    """Lines that are neither blank nor comments."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith('#'))


def lines():
    import tasks.pinn.burgers as burgers_module
    import tasks.pinn.heat as heat_module

    imports = 3  # math (Burgers' NU) / torch, PhysicsInformedModel, MODELS
    out = {'deepxde_burgers': DEEPXDE_BURGERS_LINES}
    for name, cls, cfg in (
        ('burgers', burgers_module.BurgersPINN, BURGERS_CFG),
        ('heat_inverse', heat_module.HeatPINN, HEAT_CFG),
    ):
        with open(cfg) as f:
            config = code_lines(f.read())
        python = imports + code_lines(inspect.getsource(cls))
        out[name] = {'python': python, 'config': config, 'total': python + config}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('what', choices=['burgers', 'burgers-run', 'poisson', 'recipe', 'heat', 'lines', 'all'])
    parser.add_argument('--steps', type=int, default=5000, help='burgers: Adam steps each')
    parser.add_argument('--turn-steps', type=int, default=1000, help='burgers: steps per turn')
    parser.add_argument('--rounds', type=int, default=1, help='burgers-run, poisson: concurrent pairs of runs')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    chosen = ['burgers', 'burgers-run', 'poisson', 'recipe', 'heat', 'lines'] if args.what == 'all' else [args.what]
    results = {}
    with tempfile.TemporaryDirectory(prefix='scepter_bench_pinn_') as folder:
        for what in chosen:
            if what == 'burgers':
                results[what] = burgers(args.steps, args.turn_steps, folder)
            elif what == 'burgers-run':
                results[what] = burgers_run(args.steps, args.rounds, folder)
            elif what == 'poisson':
                results[what] = poisson(args.rounds, folder)
            elif what == 'recipe':
                results[what] = recipe(folder)
            elif what == 'heat':
                results[what] = heat(folder)
            else:
                results[what] = lines()
            print(json.dumps({what: results[what]}, indent=1), flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
