#!/usr/bin/env python
"""CPU instructions per training step, solver against hand loop: the overhead without the noise.

``python benchmarks/instructions.py [--workload mlp|conv] [--steps 200] [--warm 50]``

On a shared VM a time ratio moves by more than the few percent it is meant to show.  The
number of instructions a step executes does not: here each side runs under valgrind's
callgrind in its own process (both at once), with counting switched on only for
``--steps`` steps after ``--warm`` steps (``callgrind_control -i``), so imports and
set-up do not count.  The two sides are ``interleaved.py``'s: the hand-written loop, and
one ``solve()`` of the ``tools/run_train.py`` config with every default hook and log line.
Both sides tick ``interleaved.py``'s step clock once per step; the solver side's switch
is one more end-of-step callback, a call per step that the hand side does not pay (about
0.05 % of an MLP step).

Instructions are not time: Python between torch calls runs at a lower rate than the
torch kernels (a few times lower on the 2-vCPU VM of ``README.md``), so the time ratio
is larger than the instruction ratio; what the count gives is an exact before / after for
a change.  Needs ``valgrind`` (``apt install valgrind``); about four minutes per side.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _switch(on):
    # callgrind picks the command up within a few basic blocks; its output is read from the log
    cmd = ['callgrind_control', '-i', 'on' if on else 'off', str(os.getpid())]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)


def run_side(side, workload, steps, warm, folder):
    """In the child under callgrind: ``warm`` steps, counted ``steps`` steps, then the rest."""
    sys.path[:0] = [os.path.dirname(HERE), HERE]
    import torch
    from interleaved import HandLoop, SolverLoop
    from runners import prepare

    torch.set_num_threads(1)
    total = warm + steps + 10
    data, _ = prepare(workload, folder, total)
    hand = HandLoop(workload, data, 10**9, total)  # one chunk: the hand side never switches
    if side == 'hand':
        hand.run(warm)
        _switch(True)
        hand.run(steps)
        _switch(False)
        return
    loop = SolverLoop(workload, data, folder, hand, steps=total)

    def switch_at_window(solver):
        if solver.total_iter in (warm, warm + steps):
            _switch(solver.total_iter == warm)

    loop.solver.register_callback_on_iter_end(switch_at_window)
    loop.run()


def count(side, args, folder):
    """Start one side under callgrind; returns the process and its log path."""
    log = os.path.join(folder, f'{side}.log')
    cmd = ['valgrind', '--tool=callgrind', '--instr-atstart=no', f'--callgrind-out-file={folder}/{side}.out']
    cmd += [sys.executable, os.path.abspath(__file__), '--side', side, '--workload', args.workload]
    cmd += ['--steps', str(args.steps), '--warm', str(args.warm), '--folder', folder]
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
    with open(log, 'w') as f:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f, env=env), log


def collected(log):
    match = re.search(r'Collected : (\d+)', open(log).read())
    if not match:
        raise RuntimeError(f'no instruction count in {log}:\n{open(log).read()[-2000:]}')
    return int(match.group(1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv'), default='mlp')
    parser.add_argument('--steps', type=int, default=200, help='steps counted on each side')
    parser.add_argument('--warm', type=int, default=50, help='steps before counting starts')
    parser.add_argument('--side', choices=('hand', 'solver'), help=argparse.SUPPRESS)
    parser.add_argument('--folder', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        run_side(args.side, args.workload, args.steps, args.warm, args.folder)
        return 0
    if subprocess.run(['which', 'valgrind'], capture_output=True).returncode != 0:
        print('valgrind is not installed (apt install valgrind)', file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix='scepter_bench_') as folder:
        runs = {side: count(side, args, folder) for side in ('hand', 'solver')}
        for side, (proc, log) in runs.items():
            if proc.wait() != 0:
                raise RuntimeError(f'{side} failed under valgrind:\n{open(log).read()[-3000:]}')
        per_step = {side: collected(log) / args.steps for side, (_, log) in runs.items()}
    extra = per_step['solver'] - per_step['hand']
    header = ('workload', 'steps', 'hand instr/step', 'solver instr/step', 'extra', 'ratio')
    print(' '.join(f'{h:{w}s}' for h, w in zip(header, ('8', '>6', '>16', '>18', '>10', '>7'))))
    print(
        f'{args.workload:8s} {args.steps:6d} {per_step["hand"]:16,.0f} {per_step["solver"]:18,.0f}'
        f' {extra:10,.0f} {per_step["solver"] / per_step["hand"]:7.4f}'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
