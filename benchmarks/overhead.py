#!/usr/bin/env python
"""Per-step cost of the solver against the hand-written loop.

``python benchmarks/overhead.py [--workload mlp|conv|all] [--rounds 9] [--steps N] [--interleaved]
[--taking-turns [--turn-steps N]] [--lightning auto|manual] [--aa] [--solver-override KEY=VALUE] [--json FILE]``

Across processes (the default, how the targets are stated): each round runs
``hand_loop.py`` and ``tools/run_train.py`` on the same model, data, optimizer and step
count, each in a fresh process with one torch thread, alternating which goes first.  Only
the training steps are timed (common.StepClock).  Prints the median over rounds of µs per
step and of the per-round ratio solver / hand.
The solver runs with its defaults, ENV.KEEP_CPU_HEAP included: on the ConvNet that alone
makes it faster than the hand loop, whose freed activations glibc gives back to the kernel and
page-faults in again every step; ``--solver-override ENV.KEEP_CPU_HEAP=false`` measures the
loop's own cost.

``--lightning auto|manual``: the solver with ``ENV.USE_PL`` against ``plain_lightning.py``, the
workload as a plain LightningModule (automatic optimization, what users write; or manual, the
leanest Lightning loop, which is how USE_PL drives it), the same way: the wrapper's own cost.
With ``--interleaved`` too, whole runs of both take turns in this process (a loaded machine
then spoils pairs of runs, not the comparison).

``--aa``: the hand loop against itself across processes, the same way: how far apart two identical
processes land on this machine, to read the solver's figure against (on the 2-vCPU machine of
2026-12-03 their per-round ratios spread over ±15 %).

``--taking-turns``: each round runs both sides at once, each in a process of its own, and they hand the CPU
to each other through pipes every 50 steps (10 for the ConvNet; ``--turn-steps``), the first turn alternating
between rounds: both see the machine of the same moments, as in ``--interleaved``, while each keeps its own
process (its heap, its caches, its imports).  Per round, the median over pairs of turns of the ratio of mean step
times (the first pair, which runs beside the other's set-up, left out); over rounds, the median and range.  With
``--aa`` or ``--lightning`` too, the same for those sides.  The most precise of the modes on a shared machine: the
hand loop against itself gave 0.998 (0.976-1.038) over 15 rounds on 2026-12-03, where whole alternated runs gave
1.030 (0.772-1.356) over 25.

``--interleaved``: both loops in this process, taking turns every 50 steps (10 for the
ConvNet), so they see the same machine at the same moments: the solver runs one
``solve()`` and its end-of-step callback runs the hand loop's next turn (common.summarize).
"""

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile

from common import REPO, StepClock, launch, launch_taking_turns, prepare, solver_config, summarize

LIGHTNING_BASELINES = {'auto': 'lightning', 'manual': 'lightning_manual'}  # --lightning: common.launch's sides
TURN_STEPS = {'mlp': 50, 'conv': 10}  # steps per turn where the two loops take turns
TIMINGS = {'us_per_step': 'wall (span / steps)', 'cpu_us_per_step': 'cpu', 'median_step_us': 'median step'}


def across_processes(workload, rounds, steps, folder, sides=('hand', 'solver'), overrides=()):
    """``sides`` (baseline, candidate) in fresh processes, alternating which goes first; the median ratio.
    ``overrides`` go to the solver's runs."""
    data = prepare(workload, folder, steps)
    runs = {side: [] for side in sides}
    for r in range(rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            runs[side].append(launch(side, workload, data, folder, f'{workload}-{r}', steps, overrides))
        report_round(runs, sides, r, rounds)
    return compare(workload, rounds, runs, sides)


def report_round(runs, sides, r, rounds):
    base, cand = (runs[side][-1]['us_per_step'] for side in sides)
    print(f'  round {r + 1}/{rounds}: {sides[0]} {base:8.1f} us, {sides[1]} {cand:8.1f} us')


def compare(workload, rounds, runs, sides):
    """Medians over rounds of each timing and of the per-round ratio candidate / baseline (printed)."""
    base, cand = sides
    summary = {'workload': workload, 'steps': runs[base][0]['steps'], 'rounds': rounds, 'runs': runs}
    for key, label in TIMINGS.items():
        b, c = ([run[key] for run in runs[side]] for side in sides)
        ratios = [y / x for x, y in zip(b, c)]
        summary[key] = {base: statistics.median(b), cand: statistics.median(c)}
        summary[f'ratio_{key}'] = statistics.median(ratios)
        print(
            f'{workload} {label}: {base} {summary[key][base]:.1f} us, {cand} {summary[key][cand]:.1f} us;'
            f' {cand} / {base} {summary[f"ratio_{key}"]:.3f} (median of rounds; {min(ratios):.3f}-{max(ratios):.3f})'
        )
    return summary


def taking_turns(workload, rounds, steps, folder, sides=('hand', 'solver'), overrides=(), turn_steps=0):
    """``sides`` (baseline, candidate) in processes of their own that hand the CPU to each other every TURN_STEPS
    steps, the first turn alternating between rounds.  Per round: the median over pairs of turns of the ratio of
    mean step times, leaving out the first pair (it runs beside the other process's set-up); then the median and
    range over rounds."""
    data = prepare(workload, folder, steps)
    base, cand = sides
    rounds_out = []
    for r in range(rounds):
        first = sides[r % 2]
        runs = launch_taking_turns(
            sides,
            workload,
            data,
            folder,
            f'{workload}-{r}',
            steps,
            turn_steps or TURN_STEPS[workload],
            first,
            overrides,
        )
        s = summarize(runs[base]['turns'][1:], runs[cand]['turns'][1:])
        means = {base: s['mean_step_us']['hand'], cand: s['mean_step_us']['solver']}  # summarize's names
        ratio, (q1, q3) = s['ratio_turn_means'], s['ratio_turn_means_quartiles']
        rounds_out.append({'first': first, 'mean_step_us': means, 'ratio': ratio, 'quartiles': [q1, q3]})
        print(
            f'  round {r + 1}/{rounds}: {base} {means[base]:8.1f} us, {cand} {means[cand]:8.1f} us;'
            f' {cand} / {base} {ratio:.3f} (turn pairs {q1:.3f}-{q3:.3f})'
        )
    ratios = [x['ratio'] for x in rounds_out]
    summary = {'workload': workload, 'rounds': rounds_out, 'ratio': statistics.median(ratios)}
    print(
        f'{workload} taking turns: {cand} / {base} {summary["ratio"]:.3f}'
        f' (median of {rounds} rounds; {min(ratios):.3f}-{max(ratios):.3f})'
    )
    return summary


def lightning_in_one_process(baseline, workload, rounds, steps, folder):
    """``--lightning`` with ``--interleaved``: whole runs of the plain module and of the solver under ENV.USE_PL
    in this process, alternating which goes first, so both see the machine of the same minutes; only steps are
    timed (no process start-up, no import)."""
    import torch
    from plain_lightning import train_plain

    sys.path.insert(0, REPO)
    from scepter_like.config import Config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.logger import get_logger

    torch.set_num_threads(1)
    data = prepare(workload, folder, steps)
    logger = get_logger('scepter_like.bench', stream=sys.stderr)
    sides = (baseline, 'solver_pl')
    runs = {side: [] for side in sides}
    for r in range(rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            clock = StepClock()
            if side == baseline:
                train_plain(workload, data, steps, baseline == 'lightning_manual', clock)
            else:
                cfg = solver_config(workload, data, os.path.join(folder, f'work-{r}'), steps, use_pl=True)
                solver = SOLVERS.build(Config(cfg).SOLVER, logger)
                solver.set_up_pre()
                solver.set_up()
                solver.register_callback_on_iter_end(clock.tick)  # after every hook of the step
                try:
                    solver.solve()
                finally:
                    solver.close()
            runs[side].append(clock.result())
        report_round(runs, sides, r, rounds)
    return compare(workload, rounds, runs, sides)


def in_one_process(workload, steps, folder):
    import torch
    from hand_loop import HandLoop

    sys.path.insert(0, REPO)
    from scepter_like.config import Config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.logger import get_logger

    torch.set_num_threads(1)
    turn = TURN_STEPS[workload]
    data = prepare(workload, folder, steps)
    hand = HandLoop(workload, data, steps, StepClock(turn), log=sys.stderr)
    logger = get_logger('scepter_like.bench', stream=sys.stderr)  # as run_train's, on stderr
    logger.setLevel(int(os.environ.get('BENCH_LOG_LEVEL', logging.INFO)))
    solver = SOLVERS.build(Config(solver_config(workload, data, os.path.join(folder, 'work'), steps)).SOLVER, logger)
    solver.set_up_pre()
    solver.set_up()
    clock = StepClock(turn, on_turn_end=lambda: hand.run(turn))
    solver.register_callback_on_iter_end(clock.tick)  # after every hook of the step
    try:
        solver.solve()
    finally:
        solver.close()
    r = {'workload': workload, 'steps': hand.done, **summarize(hand.clock.turns, clock.turns)}
    m, (q1, q3) = r['mean_step_us'], r['ratio_turn_means_quartiles']
    print(
        f'{workload} interleaved, {hand.done} steps each: hand {m["hand"]:.1f} us, solver {m["solver"]:.1f} us;'
        f' solver / hand {r["ratio_turn_means"]:.3f} (median over turn pairs, quartiles {q1:.3f}-{q3:.3f});'
        f' all steps {r["ratio_mean_step"]:.3f}, median step {r["ratio_median_step"]:.3f}'
    )
    return r


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv', 'all'), default='all')
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('--steps', type=int, default=None, help='train steps per run (default: the workload’s)')
    parser.add_argument('--interleaved', action='store_true', help='both loops in this process, taking turns')
    parser.add_argument(
        '--lightning',
        choices=tuple(LIGHTNING_BASELINES),
        default='',
        help='ENV.USE_PL against a plain LightningModule (automatic or manual optimization), across processes',
    )
    parser.add_argument(
        '--solver-override',
        action='append',
        default=[],
        metavar='KEY=VALUE',
        help='a command-line override of the solver runs across processes (ENV.KEEP_CPU_HEAP=false: the loop alone)',
    )
    parser.add_argument('--aa', action='store_true', help='the hand loop against itself, across processes')
    parser.add_argument(
        '--taking-turns', action='store_true', help='both loops in processes of their own, taking turns through pipes'
    )
    parser.add_argument('--turn-steps', type=int, default=0, help='steps per turn (default: 50 for mlp, 10 for conv)')
    parser.add_argument('--json', default='', help='also write the results to this JSON file')
    args = parser.parse_args(argv)
    results = []
    for workload in ('mlp', 'conv') if args.workload == 'all' else (args.workload,):
        with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
            lightning = LIGHTNING_BASELINES.get(args.lightning)
            if args.interleaved and lightning:
                print(f'{workload}: {args.rounds} rounds in this process, runs alternated, 1 torch thread')
                results.append(lightning_in_one_process(lightning, workload, args.rounds, args.steps, folder))
            elif args.interleaved:
                results.append(in_one_process(workload, args.steps, folder))
            elif args.taking_turns:
                print(f'{workload}: {args.rounds} rounds, two processes taking turns, 1 torch thread')
                sides = (lightning, 'solver_pl') if lightning else ('hand', 'hand_again' if args.aa else 'solver')
                results.append(
                    taking_turns(
                        workload, args.rounds, args.steps, folder, sides, args.solver_override, args.turn_steps
                    )
                )
            else:
                print(f'{workload}: {args.rounds} rounds, runs alternated, 1 torch thread')
                sides = (lightning, 'solver_pl') if lightning else ('hand', 'hand_again' if args.aa else 'solver')
                results.append(across_processes(workload, args.rounds, args.steps, folder, sides, args.solver_override))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'python': sys.version.split()[0], 'cpus': os.cpu_count(), 'results': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
