#!/usr/bin/env python
"""The Poisson PINN of ``configs/pinn/poisson2d.yaml``: a hand-written PyTorch script against the toolkit, one process.

``python benchmarks/pinn.py [--adam-steps N] [--lbfgs-steps N] [--chunk-steps N] [--hand-lbfgs] [--json FILE]``

Both sides use the same network (2 -> 4x64 tanh -> 1, Glorot normal, seeded by ENV.SEED:
the script checks the initial weights are equal), the same 2,000 + 400 collocation points
(the hand side takes the arrays of the config's CollocationPoints draw), full batch, and
the same 101x101 evaluation grid.  The hand side is plain PyTorch: ``autograd.grad`` for
the Laplacian, Adam steps, then ``torch.optim.LBFGS.step(closure)`` one iteration per step.

The toolkit side runs ``tools/run_train.py``'s path on the config (``load_config``,
``SOLVERS.build``, ``set_up_pre``, ``set_up``, ``solve``) with BackwardHook and LogHook,
evaluating once at the end.  The two sides take turns every CHUNK_STEPS steps under
``interleaved.StepClock`` (both see the same machine at the same moments), over the
phases in TOOLKIT_PHASES — the ones the toolkit can run today.  ``--hand-lbfgs`` then
runs the rest of the hand-written recipe alone (its L-BFGS phase) and reports its error.

Printed: the relative L2 error of both sides on the grid, the mean step times and the
ratio toolkit / hand (median over chunk pairs of their mean step times, and over all steps).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from argparse import Namespace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import torch  # noqa: E402
from interleaved import StepClock  # noqa: E402

from scepter_like.cli import load_config  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402
from scepter_like.utils.logger import get_logger  # noqa: E402

CFG = os.path.join(REPO, 'configs', 'pinn', 'poisson2d.yaml')
PHASE_STEPS = {'adam': 2000, 'lbfgs': 1000}
TOOLKIT_PHASES = ('adam',)  # add 'lbfgs' once the solver switches optimizers (its keys: toolkit_overrides)
LOG_INTERVAL = 100
# Closure evaluations per L-BFGS step (1 + the line search's).  torch's default, max_iter * 5 // 4,
# is 1 for max_iter=1: the line search gets no evaluation and every step after the first stalls.
LBFGS_MAX_EVAL = 25


def toolkit_overrides(work_dir, phases, steps):
    """run_train overrides: the phases' steps, evaluation at the end only, BackwardHook and LogHook."""
    total = sum(steps[p] for p in phases)
    return [
        f'SOLVER.WORK_DIR={work_dir}',
        f'SOLVER.MAX_EPOCHS={total}',
        f'SOLVER.EVAL_INTERVAL={total}',
        f'SOLVER.TRAIN_HOOKS=[{{NAME: BackwardHook}}, {{NAME: LogHook, LOG_INTERVAL: {LOG_INTERVAL}}}]',
        'SOLVER.EVAL_HOOKS=[]',
    ]


class HandPINN:
    """The hand-written PINN, resumable in chunks of steps: Adam steps, then one L-BFGS iteration per step."""

    def __init__(self, solver, steps):
        self.steps = steps
        data = solver.datas['train'].dataset.arrays
        boundary = data['on_boundary']
        self.x_int = data['x'][~boundary].clone().requires_grad_(True)
        self.x_bc = data['x'][boundary].clone()
        self.k_pi = solver.cfg.MODEL.K * torch.pi
        self.f = -2 * self.k_pi**2 * self.exact(self.x_int.detach())
        self.grid = solver.datas['eval'].dataset.arrays['x']
        torch.manual_seed(solver.seed)
        layers, width = [], 2
        for _ in range(4):
            layers += [torch.nn.Linear(width, 64), torch.nn.Tanh()]
            width = 64
        layers.append(torch.nn.Linear(width, 1))
        self.net = torch.nn.Sequential(*layers)
        for layer in self.net:
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.xavier_normal_(layer.weight)
                torch.nn.init.zeros_(layer.bias)
        self.adam = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.lbfgs = None
        self.done = 0
        self.clock = None

    def exact(self, x):
        return torch.sin(self.k_pi * x[:, 0]) * torch.sin(self.k_pi * x[:, 1])

    def loss(self):
        u = self.net(self.x_int)[:, 0]
        (du,) = torch.autograd.grad(u.sum(), self.x_int, create_graph=True)
        lap = sum(torch.autograd.grad(du[:, i].sum(), self.x_int, create_graph=True)[0][:, i] for i in range(2))
        return ((lap - self.f) ** 2).mean() + (self.net(self.x_bc) ** 2).mean()

    def closure(self):
        self.lbfgs.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        return loss

    def run(self, steps):
        for _ in range(steps):
            if self.done < self.steps['adam']:
                self.adam.zero_grad(set_to_none=True)
                loss = self.loss()
                loss.backward()
                self.adam.step()
            else:
                if self.lbfgs is None:
                    self.lbfgs = torch.optim.LBFGS(
                        self.net.parameters(),
                        lr=1.0,
                        max_iter=1,
                        max_eval=LBFGS_MAX_EVAL,
                        history_size=50,
                        line_search_fn='strong_wolfe',
                    )
                loss = self.lbfgs.step(self.closure)
            self.done += 1
            if self.done % LOG_INTERVAL == 0:
                print(f'hand step {self.done} loss {loss.item():.4g}', file=sys.stderr)
            if self.clock is not None:
                self.clock.tick()

    @torch.no_grad()
    def relative_l2(self):
        u, ref = self.net(self.grid)[:, 0].double(), self.exact(self.grid).double()
        return ((u - ref).norm() / ref.norm()).item()


def measure(folder, phases, steps, chunk_steps, hand_lbfgs):
    logger = get_logger('scepter_like.bench', stream=sys.stderr)
    args = Namespace(cfg=CFG, overrides=toolkit_overrides(os.path.join(folder, 'work'), phases, steps), imports=[])
    solver = SOLVERS.build(load_config(args).SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    hand = HandPINN(solver, steps)
    same_init = all(torch.equal(a, b) for a, b in zip(hand.net.parameters(), solver.unwrapped_model.parameters()))
    hand.clock = StepClock(chunk_steps)
    clock = StepClock(chunk_steps, on_chunk_end=lambda: hand.run(chunk_steps))
    solver.register_callback_on_iter_end(clock.tick)
    solver.solve()
    solver.close()
    chunks = {'hand': hand.clock.timed_chunks(), 'toolkit': clock.timed_chunks()}
    every = {name: [d for chunk in c for d in chunk] for name, c in chunks.items()}
    means = {name: statistics.mean(d) * 1e3 for name, d in every.items()}
    pairs = [statistics.mean(t) / statistics.mean(h) for h, t in zip(chunks['hand'], chunks['toolkit'])]
    result = {
        'phases': list(phases),
        'steps_each': hand.done,
        'same_initial_weights': same_init,
        'relative_l2': {'hand': hand.relative_l2(), 'toolkit': solver.epoch_outputs['eval']['relative_l2']},
        'mean_step_ms': means,
        'ratio_chunk_means': statistics.median(pairs),
        'ratio_mean_step': means['toolkit'] / means['hand'],
    }
    if hand_lbfgs and hand.done < sum(steps.values()):
        hand.clock, start = None, time.perf_counter()
        hand.run(sum(steps.values()) - hand.done)
        result['hand_full_recipe'] = {
            'steps': hand.done,
            'relative_l2': hand.relative_l2(),
            'rest_wall_s': time.perf_counter() - start,
        }
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--adam-steps', type=int, default=PHASE_STEPS['adam'])
    parser.add_argument('--lbfgs-steps', type=int, default=PHASE_STEPS['lbfgs'])
    parser.add_argument('--chunk-steps', type=int, default=50, help='steps per turn')
    parser.add_argument('--hand-lbfgs', action='store_true', help='then run the hand side’s remaining phases alone')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    steps = {'adam': args.adam_steps, 'lbfgs': args.lbfgs_steps}
    with tempfile.TemporaryDirectory(prefix='scepter_bench_pinn_') as folder:
        r = measure(folder, TOOLKIT_PHASES, steps, args.chunk_steps, args.hand_lbfgs)
    m = r['mean_step_ms']
    print(f'phases {"+".join(r["phases"])}, {r["steps_each"]} steps each', end=', ')
    print(f'same initial weights: {r["same_initial_weights"]}')
    print(f'relative L2   hand {r["relative_l2"]["hand"]:.3e}   toolkit {r["relative_l2"]["toolkit"]:.3e}')
    print(f'mean step ms  hand {m["hand"]:.2f}   toolkit {m["toolkit"]:.2f}')
    print(f'wall-time ratio toolkit / hand: {r["ratio_chunk_means"]:.3f} (chunk pairs)', end='  ')
    print(f'{r["ratio_mean_step"]:.3f} (all steps)')
    if 'hand_full_recipe' in r:
        h = r['hand_full_recipe']
        print(f'hand full recipe ({h["steps"]} steps): relative L2 {h["relative_l2"]:.3e}', end=', ')
        print(f'the rest took {h["rest_wall_s"]:.1f} s')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
