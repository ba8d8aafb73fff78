#!/usr/bin/env python
"""2-process DDP (gloo) training throughput: the solver against the hand-written loop under DDP, taking turns.

    python benchmarks/ddp.py [--rounds 15] [--steps 3000] [--turn-steps 150] [--nproc 2]
                             [--aa | [--no-agreement] [--no-log-line] [--bare-step]]

Relaunches itself under torchrun.  Both sides train the MLP workload (common.py: batch
64 per rank, AdamW, per-epoch cosine) on the same data, inside the same processes and
process group: the solver as ``tools/run_train.py`` runs it (``SOLVERS.build``,
``set_up_pre``, ``set_up``, ``solve``; the default train hooks), the hand side
``hand_loop.HandLoop`` (DistributedDataParallel, each rank every nproc-th sample, a log
line's loss all-reduced over the ranks as timm's train.py does).

The two take turns within one round: after every TURN_STEPS steps of the solver (an
after_iter hook, ``HandTurnsHook``), the hand loop trains its next TURN_STEPS steps.  A
round's figure is the hand loop's time for its steps over the solver's for the same steps
(the whole ``solve()`` less the hand's turns: set-up aside, the solver's fixed costs in
``solve()`` count), i.e. solver samples/s over hand samples/s; the median over rounds is
reported (target >= 0.97).  Turns a second apart see the same machine, so a burst of
outside load spoils a turn of both sides, not one side's whole run: whole runs in sequence
spread by ±10 % a round even hand against hand on a 2-vCPU machine, turns by about ±3 %.
Every other round the hand loop takes the first turn.

``--aa``: the hand loop against itself the same way (the candidate side is another
``HandLoop``): the method's own spread, to read the solver's figure against.
Controls, each the solver with one part of its step taken out (any of them together; none is a
way to train): the difference to a plain run is what that part costs under DDP.
``--no-agreement``: no stop-signal agreement (``StopSignals.agreed`` answers None without a
collective): what preemption costs.  ``--no-log-line``: LogHook still all-reduces its means at
each line, as the hand loop does, but writes nothing (no text, no log record, no metrics.jsonl
line).  ``--bare-step``: ``train_step`` cut to what the hand loop does (forward, zero_grad,
backward, optimizer step), then the count and the after_iter hooks: no step plan, stage
calls, updater, output detaching or agreement.
"""

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import REPO, StepClock, prepare, solver_config

sys.path.insert(0, REPO)


class Turns:
    """The hand loop's side of a round: ``take()`` trains its next ``steps`` steps and adds their time."""

    def __init__(self, data, steps, turn_steps):
        from hand_loop import HandLoop

        self.hand = HandLoop('mlp', data, steps, log=io.StringIO())
        self.turn_steps, self.seconds = turn_steps, 0.0

    def take(self):
        left = self.hand.total - self.hand.done
        if left:
            t0 = time.perf_counter()
            self.hand.run(min(self.turn_steps, left))
            self.seconds += time.perf_counter() - t0

    def clock(self):
        """The candidate's StepClock: it hands over to the hand loop every ``turn_steps`` steps."""
        return StepClock(self.turn_steps, on_turn_end=self.take)


def register_turns_hook():
    """HandTurnsHook: the solver's after_iter tick that hands over to the hand loop (built with the solver's hooks,
    so the hand loop is set up with the solver, outside the timing)."""
    from scepter_like.solver.hooks.hook import Hook
    from scepter_like.solver.hooks.registry import HOOKS

    @HOOKS.register_class()
    class HandTurnsHook(Hook):
        para_dict = {
            'PRIORITY': {'value': 100000, 'description': 'last of all after_iter hooks'},
            'DATA': {'value': '', 'description': 'the workload .npz'},
            'STEPS': {'value': 0, 'description': 'steps of one process'},
            'TURN_STEPS': {'value': 150, 'description': 'steps of a turn'},
            'HAND_FIRST': {'value': False, 'description': 'the hand loop takes the first turn'},
        }

        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger)
            self.turns, self.hand_first = Turns(cfg.DATA, cfg.STEPS, cfg.TURN_STEPS), cfg.HAND_FIRST
            self._clock = self.turns.clock()

        def before_solve(self, solver):
            if self.hand_first:
                self.turns.take()

        def after_iter(self, solver):
            self._clock.tick()


def solver_round(data, steps, turn_steps, hand_first, work_dir):
    """(solver seconds, hand seconds) of one round: ``solve()`` with the hand loop's turns inside it."""
    from scepter_like.config import Config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.distributed import barrier
    from scepter_like.utils.logger import get_logger

    cfg = solver_config('mlp', data, work_dir, steps)
    turns_cfg = {'DATA': data, 'STEPS': steps, 'TURN_STEPS': turn_steps, 'HAND_FIRST': hand_first}
    cfg['SOLVER']['TRAIN_HOOKS'].append({'NAME': 'HandTurnsHook', **turns_cfg})
    logger = get_logger('scepter_like.bench', rank=int(os.environ['RANK']), stream=io.StringIO())
    solver = SOLVERS.build(Config(cfg).SOLVER, logger=logger)
    solver.set_up_pre()
    solver.set_up()
    turns = next(h.turns for h in solver.hooks_dict['train'] if type(h).__name__ == 'HandTurnsHook')
    barrier()
    t0 = time.perf_counter()
    solver.solve()
    seconds = time.perf_counter() - t0
    barrier()
    solver.close()
    assert solver.progress.total_iter == turns.hand.done, 'both sides train the same steps'
    return seconds - turns.seconds, turns.seconds


def hand_again_round(data, steps, turn_steps, hand_first):
    """(candidate seconds, hand seconds) of one round of the hand loop against another hand loop."""
    import torch.distributed as dist
    from hand_loop import HandLoop

    turns = Turns(data, steps, turn_steps)
    candidate = HandLoop('mlp', data, steps, clock=turns.clock(), log=io.StringIO())
    dist.barrier()
    t0 = time.perf_counter()
    if hand_first:
        turns.take()
    candidate.run(candidate.total)
    seconds = time.perf_counter() - t0
    dist.barrier()
    return seconds - turns.seconds, turns.seconds


def switch_off_agreement():
    """--no-agreement: no stop-signal agreement under DDP (signals and requests are then not acted on)."""
    from scepter_like.solver.preemption import StopSignals

    StopSignals.agreed = lambda self: None
    StopSignals.agreed_between_epochs = lambda self: None


def switch_off_log_lines():
    """--no-log-line: LogHook's lines keep only the all-reduce of their means (every rank still calls it)."""
    from scepter_like.solver.hooks.log import LogHook

    LogHook._write_line = lambda self, solver: self._scalars.take(solver.world_size)


def bare_train_step():
    """--bare-step: the hand loop's step on the solver's model, optimizer and batches, then count and after_iter."""
    from scepter_like.solver.base_solver import BaseSolver

    def train_step(self, batch, batch_idx, data_time=0.0):
        loss = self.model(**batch)['loss']
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step.outputs = {'loss': loss.detach()}
        self.progress.count_step('train', True)
        self.after_iter()

    BaseSolver.train_step = train_step


CONTROLS = {  # flag: (what the solver runs without, the switch)
    'no_agreement': ('the agreement', switch_off_agreement),
    'no_log_line': ('log lines', switch_off_log_lines),
    'bare_step': ('its step machinery', bare_train_step),
}


def worker(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    if not args.aa:
        register_turns_hook()
    controls = [(what, switch) for flag, (what, switch) in CONTROLS.items() if getattr(args, flag)]
    for _, switch in controls:
        switch()
    label = 'hand again' if args.aa else 'solver'
    if controls:
        label += ' without ' + ', '.join(what for what, _ in controls)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds + 1):  # round 0 warms up both sides
            hand_first = r % 2 == 1
            if args.aa:
                candidate, hand = hand_again_round(args.data, args.steps, args.turn_steps, hand_first)
            else:
                work_dir = os.path.join(tmp, f'run{r}')
                candidate, hand = solver_round(args.data, args.steps, args.turn_steps, hand_first, work_dir)
            if r == 0:
                continue
            ratios.append(hand / candidate)  # the same steps on both sides: the ratio of samples/s
            if dist.get_rank() == 0:
                print(
                    f'round {r}: {label} {candidate:.2f} s, hand {hand:.2f} s for the same steps,'
                    f' ratio {ratios[-1]:.3f}{" (hand first)" if hand_first else ""}',
                    flush=True,
                )
    if dist.get_rank() == 0:
        spread = ''
        if len(ratios) > 1:
            quartiles = statistics.quantiles(ratios, n=4)
            spread = f' (quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f})'
        print(
            f'median ratio ({label} / hand DDP loop, samples/s) over {len(ratios)} rounds:'
            f' {statistics.median(ratios):.3f}{spread}'
        )
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--steps', type=int, default=3000, help='steps of one process (each rank runs 1/nproc)')
    parser.add_argument('--turn-steps', type=int, default=150, help="steps of each side's turn")
    parser.add_argument('--nproc', type=int, default=2)
    parser.add_argument('--aa', action='store_true', help="the hand loop against itself: the method's own spread")
    parser.add_argument('--no-agreement', action='store_true', help='control: the solver without the stop agreement')
    parser.add_argument('--no-log-line', action='store_true', help="control: LogHook's lines reduced to the all-reduce")
    parser.add_argument('--bare-step', action='store_true', help="control: train_step cut to the hand loop's step")
    parser.add_argument('--data', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.aa and any(getattr(args, flag) for flag in CONTROLS):
        parser.error('--aa runs no solver: it takes none of the controls')
    if args.data:
        return worker(args)
    with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
        cmd = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={args.nproc}', '--standalone']
        cmd += [os.path.abspath(__file__), f'--rounds={args.rounds}', f'--steps={args.steps}']
        cmd += [f'--turn-steps={args.turn_steps}']
        cmd += ['--aa'] * args.aa + [f'--{flag.replace("_", "-")}' for flag in CONTROLS if getattr(args, flag)]
        cmd += [f'--data={prepare("mlp", folder, args.steps)}']
        env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
        return subprocess.call(cmd, env=env)


if __name__ == '__main__':
    sys.exit(main())
