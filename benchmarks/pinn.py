#!/usr/bin/env python
"""The Poisson PINN of ``configs/pinn/poisson2d.yaml``: a hand-written PyTorch script against the toolkit, one process.

``python benchmarks/pinn.py [--adam-steps 2000] [--lbfgs-steps 1000] [--turn-steps 50] [--json FILE]``

Both sides run the config's whole recipe: Adam (lr 1e-3) then L-BFGS (one iteration per
step, strong-Wolfe line search, ``MAX_EVAL`` and ``HISTORY_SIZE`` as the config has them),
full batch, on the same network (2 -> 4x64 tanh -> 1, Glorot normal, seeded by ENV.SEED:
the script checks that the initial weights are equal) and the same 2,000 + 400 collocation
points (the hand side takes the arrays of the toolkit's CollocationPoints draw).  The hand
side is plain PyTorch: ``autograd.grad`` for the Laplacian, ``Adam.step()``, then
``LBFGS.step(closure)``.  The toolkit side is ``tools/run_train.py``'s path (``load_config``,
``SOLVERS.build``, ``set_up_pre``, ``set_up``, ``solve``) with BackwardHook and LogHook
(every 100 steps), the switch done by ``SOLVER.OPTIMIZER_PHASES``, one evaluation at the end.

The two take turns every TURN_STEPS steps under ``common.StepClock`` (both see the same
machine at the same moments).  Printed: the relative L2 error of both on the 101x101 grid,
the wall time of each side's steps, and the ratio toolkit / hand (total step time, and the
median over turn pairs of their mean step times), for each phase and in all.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from argparse import Namespace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import torch  # noqa: E402
from common import StepClock  # noqa: E402

from scepter_like.cli import load_config  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402
from scepter_like.utils.logger import get_logger  # noqa: E402

CFG = os.path.join(REPO, 'configs', 'pinn', 'poisson2d.yaml')
LOG_INTERVAL = 100


def toolkit_overrides(work_dir, adam_steps, lbfgs_steps):
    total = adam_steps + lbfgs_steps
    return [
        f'SOLVER.WORK_DIR={work_dir}',
        f'SOLVER.MAX_EPOCHS={total}',
        f'SOLVER.EVAL_INTERVAL={total}',
        f'SOLVER.OPTIMIZER_PHASES.0.AT_STEP={adam_steps}',
        f'SOLVER.TRAIN_HOOKS=[{{NAME: BackwardHook}}, {{NAME: LogHook, LOG_INTERVAL: {LOG_INTERVAL}}}]',
        'SOLVER.EVAL_HOOKS=[]',
        'SOLVER.CODE_SNAPSHOT=false',
    ]


class HandPINN:
    """The hand-written PINN, run in turns of steps: Adam steps, then one L-BFGS iteration per step."""

    def __init__(self, solver, adam_steps):
        self.adam_steps = adam_steps
        data = solver.datas['train'].dataset.arrays
        boundary = data['on_boundary']
        self.x_int = data['x'][~boundary].clone().requires_grad_(True)
        self.x_bc = data['x'][boundary].clone()
        self.k_pi = solver.cfg.MODEL.K * torch.pi
        self.f = -2 * self.k_pi**2 * self.exact(self.x_int.detach())
        self.grid = solver.datas['eval'].dataset.arrays['x']
        self.lbfgs_args = {k.lower(): v for k, v in solver.cfg.OPTIMIZER_PHASES[0].OPTIMIZER.items() if k != 'NAME'}
        self.lbfgs_args['lr'] = self.lbfgs_args.pop('learning_rate')
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
            if self.done < self.adam_steps:
                self.adam.zero_grad(set_to_none=True)
                loss = self.loss()
                loss.backward()
                self.adam.step()
            else:
                if self.lbfgs is None:
                    self.lbfgs = torch.optim.LBFGS(self.net.parameters(), **self.lbfgs_args)
                loss = self.lbfgs.step(self.closure)
            self.done += 1
            if self.done % LOG_INTERVAL == 0:
                print(f'hand step {self.done} loss {loss.item():.4g}', file=sys.stderr)
            self.clock.tick()

    @torch.no_grad()
    def relative_l2(self):
        u, ref = self.net(self.grid)[:, 0].double(), self.exact(self.grid).double()
        return ((u - ref).norm() / ref.norm()).item()


def phase_figures(hand_turns, toolkit_turns):
    """Total step seconds of each side and the ratios, over the given (paired) turns."""
    pairs = [(h, t) for h, t in zip(hand_turns, toolkit_turns) if h and t]
    hand_s, toolkit_s = sum(sum(h) for h, _ in pairs), sum(sum(t) for _, t in pairs)
    return {
        'turns': len(pairs),
        'hand_s': hand_s,
        'toolkit_s': toolkit_s,
        'ratio_total': toolkit_s / hand_s,
        'ratio_turn_means': statistics.median(statistics.mean(t) / statistics.mean(h) for h, t in pairs),
    }


def measure(folder, adam_steps, lbfgs_steps, turn_steps):
    logger = get_logger('scepter_like.bench', stream=sys.stderr)
    overrides = toolkit_overrides(os.path.join(folder, 'work'), adam_steps, lbfgs_steps)
    solver = SOLVERS.build(load_config(Namespace(cfg=CFG, overrides=overrides, imports=[])).SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    hand = HandPINN(solver, adam_steps)
    same_init = all(torch.equal(a, b) for a, b in zip(hand.net.parameters(), solver.unwrapped_model.parameters()))
    hand.clock = StepClock(turn_steps)
    clock = StepClock(turn_steps, on_turn_end=lambda: hand.run(turn_steps))
    solver.register_callback_on_iter_end(clock.tick)
    solver.solve()
    solver.close()
    adam_turns = adam_steps // turn_steps  # turn_steps divides adam_steps: no turn mixes the phases
    hand_turns, toolkit_turns = hand.clock.turns, clock.turns
    return {
        'steps_each': hand.done,
        'same_initial_weights': same_init,
        'relative_l2': {'hand': hand.relative_l2(), 'toolkit': solver.epoch_outputs['eval']['relative_l2']},
        'adam': phase_figures(hand_turns[:adam_turns], toolkit_turns[:adam_turns]),
        'lbfgs': phase_figures(hand_turns[adam_turns:], toolkit_turns[adam_turns:]),
        'all': phase_figures(hand_turns, toolkit_turns),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--adam-steps', type=int, default=2000)
    parser.add_argument('--lbfgs-steps', type=int, default=1000)
    parser.add_argument('--turn-steps', type=int, default=50, help='steps per turn (must divide --adam-steps)')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    if args.adam_steps % args.turn_steps:
        parser.error('--turn-steps must divide --adam-steps, so that no turn mixes the two phases')
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix='scepter_bench_pinn_') as folder:
        r = measure(folder, args.adam_steps, args.lbfgs_steps, args.turn_steps)
    print(f'{r["steps_each"]} steps each ({args.adam_steps} Adam + {args.lbfgs_steps} L-BFGS),', end=' ')
    print(f'same initial weights: {r["same_initial_weights"]}')
    print(f'relative L2   hand {r["relative_l2"]["hand"]:.3e}   toolkit {r["relative_l2"]["toolkit"]:.3e}')
    for name in ('adam', 'lbfgs', 'all'):
        p = r[name]
        print(
            f'{name:5s}  step time hand {p["hand_s"]:.1f} s  toolkit {p["toolkit_s"]:.1f} s'
            f'  ratio {p["ratio_total"]:.3f} (total)  {p["ratio_turn_means"]:.3f} (median of {p["turns"]} turn pairs)'
        )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
