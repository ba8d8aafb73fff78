"""What every benchmark shares: the workloads, the step clock, the solver config, launching a run.

Imports no torch and nothing of the toolkit, so the hand-written side (``hand_loop.py``)
stays plain PyTorch and a process's start-up is its own.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from typing import IO, NamedTuple

import numpy as np
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SEED = 0
LEARNING_RATE = 1e-3

WORKLOADS = {
    # overhead-dominated: a tiny MLP, where every microsecond of framework shows
    'mlp': {'shape': (64,), 'hidden': [256, 256], 'steps': 3000, 'steps_per_epoch': 300},
    # compute-dominated: a ConvNet on 32x32 RGB inputs
    'conv': {'shape': (3, 32, 32), 'channels': [32, 64], 'steps': 200, 'steps_per_epoch': 20},
}
CLASSES, BATCH, LOG_INTERVAL = 10, 64, 10
TURNS_ENV = 'BENCH_TURNS'  # set by launch_taking_turns for a side: 'STEPS READ_FD WRITE_FD' (side_clock)


def plan(name, steps=None):
    """(workload dict, epochs, total steps): whole epochs only, so both loops end at an epoch's end."""
    w = dict(WORKLOADS[name])
    steps = steps or w['steps']
    w['steps_per_epoch'] = min(w['steps_per_epoch'], steps)
    epochs = max(1, steps // w['steps_per_epoch'])
    return w, epochs, epochs * w['steps_per_epoch']


def prepare(workload, folder, steps=None):
    """Random inputs and labels for one pass of the workload, written once as an .npz; returns its path."""
    w, _, total = plan(workload, steps)
    path = os.path.join(folder, f'{workload}-{total}.npz')
    if not os.path.exists(path):
        rng = np.random.default_rng(SEED)
        n = w['steps_per_epoch'] * BATCH
        x = rng.standard_normal((n, *w['shape']), dtype=np.float32)
        np.savez(path, x=x, y=rng.integers(0, CLASSES, size=n, dtype=np.int64))
    return path


def solver_config(workload, data, work_dir, steps=None, clock_output='', use_pl=False):
    """The run_train config of the workload: the default train hooks, one checkpoint at the end.

    With ``clock_output`` the run also ticks a StepClock (``clock_hook.py``) and writes its result there;
    ``use_pl``: the run is on Lightning's Trainer (ENV.USE_PL).
    """
    w, epochs, _ = plan(workload, steps)
    if workload == 'mlp':
        backbone = {'NAME': 'MLP', 'IN_DIM': w['shape'][0], 'HIDDEN_DIMS': w['hidden'], 'OUT_DIM': CLASSES}
    else:
        backbone = {'NAME': 'ConvNet', 'IN_CHANNELS': w['shape'][0], 'CHANNELS': w['channels'], 'OUT_DIM': CLASSES}
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LogHook', 'LOG_INTERVAL': LOG_INTERVAL},
        {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0},
        {'NAME': 'CheckpointHook', 'INTERVAL': epochs},
        {'NAME': 'DistSamplerHook'},
    ]
    cfg = {'ENV': {'SEED': SEED, 'NUM_THREADS': 1, 'USE_PL': use_pl}}
    if clock_output:
        cfg['IMPORTS'] = [os.path.join(HERE, 'clock_hook.py')]
        hooks.append({'NAME': 'StepClockHook', 'OUTPUT': clock_output})
    cfg['SOLVER'] = {
        'NAME': 'TrainValSolver',
        'WORK_DIR': work_dir,
        'MAX_EPOCHS': epochs,
        'MODEL': {'NAME': 'Classifier', 'BACKBONE': backbone},
        'OPTIMIZER': {'NAME': 'AdamW', 'LEARNING_RATE': LEARNING_RATE},
        'LR_SCHEDULER': {'NAME': 'CosineAnnealingLR', 'T_MAX': epochs},
        'TRAIN_DATA': {
            'NAME': 'NpzDataset',
            'PATH': data,
            'KEY_MAP': {'x': 'img', 'y': 'label'},
            'BATCH_SIZE': BATCH,
            'SHUFFLE': True,
        },
        'TRAIN_HOOKS': hooks,
    }
    return cfg


class StepClock:
    """Times training steps: each step's duration, from the end of one step to the end of the next.

    Both loops call ``tick`` once at the end of every step (the solver after all its hooks),
    so both pay the same for being timed.  With ``turn_steps`` the clock hands over to the
    other loop (``on_turn_end``) after every that many steps, and leaves out the next
    step's duration, whose span holds the other loop's turn.
    """

    def __init__(self, turn_steps=0, on_turn_end=None):
        self.turn_steps, self.on_turn_end = turn_steps, on_turn_end
        self.turns, self.steps, self._last = [[]], 0, None
        self.first = self.last = None

    def tick(self, _solver=None):
        now, cpu = time.perf_counter(), time.process_time()
        if self.steps == 0:
            self.first = (now, cpu, time.time())
        elif self._last is not None:
            self.turns[-1].append(now - self._last)
        self._last, self.last = now, (now, cpu)
        self.steps += 1
        if self.turn_steps and self.steps % self.turn_steps == 0:
            if self.on_turn_end is not None:
                self.on_turn_end()
            self.turns.append([])
            self._last = None

    def result(self):
        """µs per step from the end of the first step to the end of the last (wall, CPU); the median step."""
        gaps = max(self.steps - 1, 1)
        durations = [d for turn in self.turns for d in turn]
        result = {
            'steps': self.steps,
            'us_per_step': (self.last[0] - self.first[0]) / gaps * 1e6,
            'cpu_us_per_step': (self.last[1] - self.first[1]) / gaps * 1e6,
            'median_step_us': statistics.median(durations) * 1e6,
            'first_step_wall': self.first[2],
        }
        if self.turn_steps:
            result['turns'] = self.turns  # each turn's step durations (s)
        return result


def side_clock():
    """The StepClock of a side in its own process: with TURNS_ENV set (``launch_taking_turns``), one that hands
    the CPU to the other side every STEPS steps."""
    spec = os.environ.get(TURNS_ENV)
    if not spec:
        return StepClock()
    steps, read_fd, write_fd = map(int, spec.split())
    reader, writer = os.fdopen(read_fd), os.fdopen(write_fd, 'w')
    return StepClock(steps, on_turn_end=lambda: end_turn(reader, writer))


def end_turn(reader, writer):
    """This side's turn is over: say so to the benchmark (``take_turns``) and wait until it says go."""
    writer.write('turn\n')
    writer.flush()
    reader.readline()


def summarize(hand_turns, solver_turns):
    """The turns of two StepClocks that took turns (lists of step durations): step times, solver / hand ratios.

    The main figure is the median, over pairs of turns, of the ratio of their mean step
    times (every step counts; a burst of outside load spoils one pair, not the median).
    """
    turns = {'hand': [t for t in hand_turns if t], 'solver': [t for t in solver_turns if t]}
    steps = {name: [d for turn in t for d in turn] for name, t in turns.items()}
    medians = {name: statistics.median(d) * 1e6 for name, d in steps.items()}
    means = {name: statistics.mean(d) * 1e6 for name, d in steps.items()}
    pairs = [statistics.mean(s) / statistics.mean(h) for h, s in zip(turns['hand'], turns['solver'])]
    return {
        'median_step_us': medians,
        'mean_step_us': means,
        'ratio_turn_means': statistics.median(pairs),
        'ratio_turn_means_quartiles': statistics.quantiles(pairs, n=4)[::2],
        'ratio_mean_step': means['solver'] / means['hand'],
        'ratio_median_step': medians['solver'] / medians['hand'],
    }


BASELINES = {  # side -> its script in benchmarks/, and the script's own options
    'hand': ['hand_loop.py'],
    'hand_again': ['hand_loop.py'],  # the same loop as a candidate: the method's own spread (overhead.py --aa)
    'lightning': ['plain_lightning.py'],
    'lightning_manual': ['plain_lightning.py', '--manual'],
}


def side_command(side, workload, data, folder, tag, steps=None, overrides=()):
    """``(command, its result file)`` of one side's run: 'hand' / 'hand_again' (``hand_loop.py``), 'lightning' /
    'lightning_manual' (``plain_lightning.py``: a plain LightningModule), 'solver' (``tools/run_train.py``) or
    'solver_pl' (the same with ENV.USE_PL).  ``overrides``: command-line overrides of a solver run."""
    out = os.path.join(folder, f'{side}-{tag}.json')
    if side in BASELINES:
        script, *options = BASELINES[side]
        return [sys.executable, os.path.join(HERE, script), *options, workload, data, out, str(steps or 0)], out
    cfg_path = os.path.join(folder, f'{side}-{tag}.yaml')
    cfg = solver_config(workload, data, os.path.join(folder, f'work-{side}-{tag}'), steps, out, side == 'solver_pl')
    with open(cfg_path, 'w') as f:
        yaml.safe_dump(cfg, f)
    return [sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', cfg_path, *overrides], out


def side_env():
    """A side's environment: one thread, not a torch.distributed rank even when the benchmark is one."""
    env = {k: v for k, v in os.environ.items() if k not in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR')}
    env.update(OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
    return env


def launch(side, workload, data, folder, tag, steps=None, overrides=()):
    """One side's run (``side_command``) in a fresh process, one torch thread.

    Returns its StepClock result, plus the seconds from launching the process to the end of its first step.
    """
    cmd, out = side_command(side, workload, data, folder, tag, steps, overrides)
    start = time.time()
    # the run's console goes to a file, not a pipe: a pipe would wake this process at every log line
    with open(os.path.join(folder, f'{side}-{tag}.stderr'), 'w+') as err:
        res = subprocess.run(cmd, cwd=REPO, env=side_env(), stdout=subprocess.DEVNULL, stderr=err)
        if res.returncode != 0:
            err.seek(0)
            raise RuntimeError(f'{" ".join(cmd)} failed ({res.returncode}):\n{err.read()[-3000:]}')
    with open(out) as f:
        result = json.load(f)
    result['to_first_step_s'] = result['first_step_wall'] - start
    return result


def launch_taking_turns(sides, workload, data, folder, tag, steps, turn_steps, first, overrides=()):
    """Both ``sides`` (``side_command``), each in a process of its own, handing the CPU to each other every
    ``turn_steps`` steps through pipes (``side_clock``), ``first`` starting; their StepClock results, with the
    step times of each turn."""
    runs, outs = {}, {}
    try:
        for side in sorted(sides, key=lambda side: side != first):  # the first to run starts first
            cmd, outs[side] = side_command(side, workload, data, folder, tag, steps, overrides)
            (side_reads, we_write), (we_read, side_writes) = os.pipe(), os.pipe()
            env = dict(side_env(), **{TURNS_ENV: f'{turn_steps} {side_reads} {side_writes}'})
            log = open(os.path.join(folder, f'{side}-{tag}.stderr'), 'w+')
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log, pass_fds=(side_reads, side_writes)
            )
            os.close(side_reads)
            os.close(side_writes)
            runs[side] = TurnTaker(proc, os.fdopen(we_read), os.fdopen(we_write, 'w'), log)
        take_turns(runs, first)
    finally:
        for run in runs.values():
            for f in (run.reader, run.writer, run.log):
                f.close()
    results = {}
    for side, out in outs.items():
        with open(out) as f:
            results[side] = json.load(f)
    return results


class TurnTaker(NamedTuple):
    """A side's process as ``take_turns`` drives it: its 'turn' arrives on ``reader``, its 'go' goes to ``writer``."""

    process: subprocess.Popen
    reader: IO[str]
    writer: IO[str]
    log: IO[str]  # its stderr, opened w+: shown when it fails


def take_turns(runs, first):
    """Let side processes run one at a time until each has exited: ``runs`` {name: TurnTaker}.

    Their first turns (set-up included) run at once; then one at a time, ``first`` starting.
    A side that exits non-zero raises RuntimeError with the tail of its log.
    """

    def still_running(name):
        run = runs[name]
        if run.reader.readline() == 'turn\n':
            return True
        if run.process.wait() != 0:  # it ran its last steps and finished, or failed
            run.log.seek(0)
            raise RuntimeError(f'the {name} run failed ({run.process.returncode}):\n{run.log.read()[-3000:]}')
        return False

    try:
        active = [name for name in sorted(runs, key=lambda name: name != first) if still_running(name)]
        while active:
            for name in list(active):
                runs[name].writer.write('go\n')
                runs[name].writer.flush()
                if not still_running(name):
                    active.remove(name)
    finally:
        for run in runs.values():
            run.process.kill()
            run.process.wait()
