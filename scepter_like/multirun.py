"""Multirun: ``run_train.py --cfg FILE -m A.B=1,2 C.D=x,y`` runs a grid of runs, one by one.

An override whose value lists several values, comma-separated (``A.B=1,2``; commas inside
``[...]``, ``{...}`` or quotes do not split), is swept; the grid is the cartesian product
of the sweeps, in the order given (the last key varies fastest). Every run is its own
subprocess of the same tool, writing into ``WORK_DIR/<swept overrides>/`` (a file-name
safe form of e.g. ``SOLVER.MAX_EPOCHS=1,SOLVER.OPTIMIZER.LEARNING_RATE=0.01``), so a run
that fails or exits does not stop the others. After each run the summary of all finished
runs — status, seconds, final step, last train loss, last eval and test metrics (from each
run's ``metrics.jsonl``) — is rewritten to ``WORK_DIR/multirun_summary.md`` and ``.csv``.
The exit status is 1 when any run failed, else 0.

A stop signal to the multirun (Ctrl-C, a cluster's SIGTERM or SIGUSR1) is passed on to the
run in progress (``utils/signal_relay.py``), which stops at a step boundary with a checkpoint,
as a run started alone does; no further run starts, the summary marks that run ``stopped``,
and the multirun ends with 128 + the signal. The same command with ``SOLVER.RESUME_FROM=auto``
goes on with the sweep.

A tracker hook in the config (MLflowLogHook, WandbLogHook) gets one parent for the sweep
(an MLflow run each run nests under; a W&B group), and each run its own child run, named
after its folder (``SweepTracking``, solver/hooks/tracking/sweep.py; docs/tracking.md).
"""

import copy
import csv
import hashlib
import io
import itertools
import os
import re
import signal
import subprocess
import sys
import time

from scepter_like.cli import tool_command
from scepter_like.config import Config, apply_overrides, resolve_references
from scepter_like.errors import ConfigError
from scepter_like.search.space import check_path
from scepter_like.utils.checkpoint import atomic_write_text
from scepter_like.utils.metrics_log import METRICS_FILE, read_metrics
from scepter_like.utils.signal_relay import SignalRelay

SUMMARY_NAME = 'multirun_summary'
_UNSAFE = re.compile(r'[^A-Za-z0-9._=,+-]')
MAX_NAME = 150
_PAIRS = {'[': ']', '{': '}'}


def split_values(text):
    """``'1,[2,3],"a,b"'`` -> ``['1', '[2,3]', '"a,b"']``: commas at the top level split."""
    items, current, stack, quote = [], [], [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in '\'"':
            quote = ch
        elif ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif ch == ',' and not stack:
            items.append(''.join(current))
            current = []
            continue
        current.append(ch)
    items.append(''.join(current))
    return items


def parse_sweeps(overrides):
    """[(key, [value texts])] of the ``-m`` overrides; an empty value list or item is an error."""
    sweeps = []
    for text in overrides:
        key, sep, raw = text.partition('=')
        if not sep or not key:
            raise ConfigError(f"override '{text}' has no KEY=; write KEY.PATH=V1,V2,...")
        values = [v.strip() for v in split_values(raw)]
        if any(not v for v in values):
            raise ConfigError(f'-m {text}: empty value in the list; write {key}=V1,V2,... with no empty item')
        if key.upper() == 'SOLVER.WORK_DIR' and len(values) > 1:
            raise ConfigError(f'-m {text}: WORK_DIR cannot be swept; each run gets WORK_DIR/<overrides>/')
        sweeps.append((key, values))
    return sweeps


def expand_grid(sweeps):
    """Every run's overrides, as ``[[(key, value), ...], ...]`` (cartesian product, in order)."""
    return [list(zip([k for k, _ in sweeps], combo)) for combo in itertools.product(*[v for _, v in sweeps])]


def run_name(pairs, swept_keys):
    """A file-name-safe folder name from the swept ``key=value`` pairs of one run."""
    text = ','.join(f'{k}={v}' for k, v in pairs if k in swept_keys) or 'run'
    name = _UNSAFE.sub('_', text)
    if len(name) > MAX_NAME:
        name = name[:MAX_NAME] + '-' + hashlib.sha1(text.encode()).hexdigest()[:8]
    return name


def final_metrics(work_dir, since):
    """{'step', 'train/<name>', 'eval/<name>', 'test/<name>'} from the last lines of a run's metrics.jsonl; nothing
    when the run wrote no ``start`` line at or after ``since`` (unix seconds): this attempt did not train (it failed
    before), and the lines there are an earlier attempt's (a killed sweep's)."""
    path = os.path.join(work_dir, METRICS_FILE)
    if not os.path.isfile(path):
        return {}
    records = read_metrics(path)
    if not any(r['kind'] == 'start' and r.get('time', 0) >= since for r in records):
        return {}
    out = {}
    for record in records:
        if record['kind'] in ('train', 'eval', 'test'):
            out['step'] = record['step']
            for name, value in record.get('values', {}).items():
                if record['kind'] != 'train' or name == 'loss' or name.startswith('loss_'):
                    out[f'{record["kind"]}/{name}'] = value
    return out


def _cell(value):
    if isinstance(value, float):
        return f'{value:.6g}'
    return str(value).replace('|', '\\|').replace('\n', ' ')


def write_summary(base_dir, rows, swept_keys):
    """Rewrite multirun_summary.md and .csv (one row per finished run) atomically."""
    metric_cols = sorted(
        {k for row in rows for k in row['metrics'] if k != 'step'},
        key=lambda k: (['train', 'eval', 'test'].index(k.split('/')[0]), k),
    )
    header = ['run', *swept_keys, 'status', 'exit', 'seconds', 'step', *metric_cols, 'work_dir', 'error']
    table = [
        [
            row['index'],
            *[row['values'].get(k, '') for k in swept_keys],
            row['status'],
            row['exit'],
            round(row['seconds'], 1),
            row['metrics'].get('step', ''),
            *[row['metrics'].get(k, '') for k in metric_cols],
            row['name'],
            row['error'],
        ]
        for row in rows
    ]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator='\n')
    writer.writerow(header)
    writer.writerows(table)
    atomic_write_text(os.path.join(base_dir, SUMMARY_NAME + '.csv'), buf.getvalue())
    md = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    md += ['| ' + ' | '.join(_cell(v) for v in line) + ' |' for line in table]
    text = '\n'.join(md) + '\n'
    atomic_write_text(os.path.join(base_dir, SUMMARY_NAME + '.md'), text)
    return text


def _last_error_line(stderr):
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if 'error' in line.lower()]
    return (errors or lines or [''])[-1][:300]


def base_config(args, sweeps):
    """The config with the unswept overrides and its WORK_DIR (checks the config loads)."""
    import argparse

    from scepter_like.cli import load_config
    from scepter_like.solver.base_solver import BaseSolver

    fixed = [f'{k}={values[0]}' for k, values in sweeps if len(values) == 1]
    cfg = load_config(argparse.Namespace(**{**vars(args), 'overrides': fixed}))
    check_work_dir_unswept(Config(cfg_file=args.cfg), fixed, sweeps)
    return cfg, cfg.SOLVER.get('WORK_DIR') or BaseSolver.para_dict['WORK_DIR']['value']


def check_work_dir_unswept(raw, fixed, sweeps):
    """A WORK_DIR that refers (through any chain of ``${...}``) to a swept key is an error, as sweeping WORK_DIR is.

    The sweep has one WORK_DIR, holding every run's folder and the summary; it would be
    resolved once, with the unswept value of the key.  ``raw``: the config file's, unresolved.
    """
    apply_overrides(raw, fixed)
    for key, values in sweeps:
        dirs = {
            resolve_references(apply_overrides(copy.deepcopy(raw), [f'{key}={value}'])).SOLVER.get('WORK_DIR')
            for value in values
        }
        if len(dirs) > 1:
            raise ConfigError(
                f'-m {key}={",".join(values)}: SOLVER.WORK_DIR refers to the swept {key}, but a sweep has one'
                ' WORK_DIR (each run gets WORK_DIR/<overrides>/, named after the swept values): take the'
                ' reference out of WORK_DIR'
            )


def run_multirun(args, tool):
    """Run the tool module ``tool`` (``scepter_like.tools.run_train``) once per grid point of ``args.overrides``
    into ``WORK_DIR/<name>/``; returns 0 or 1."""
    if int(os.environ.get('WORLD_SIZE', '1') or 1) > 1:
        raise ConfigError('-m runs every job as its own process; start the multirun without torchrun')
    if args.print_config:
        raise ConfigError("--print-config with -m: print one run's config by giving its values without -m")
    from scepter_like.solver.hooks.tracking.sweep import SweepTracking

    sweeps = parse_sweeps(args.overrides)
    cfg, base_dir = base_config(args, sweeps)
    for key, values in sweeps:  # a misspelt swept key: one line before any run, as run_search checks its space
        if len(values) > 1:
            check_path(cfg, key.removesuffix('+'), f'-m {key}')
    base_dir = os.path.abspath(base_dir)
    extra_args = [word for module in args.imports for word in ('--import', module)]
    extra_args += ['--debug'] if args.debug else []
    swept_keys = [k for k, values in sweeps if len(values) > 1]
    grid = expand_grid(sweeps)
    os.makedirs(base_dir, exist_ok=True)
    print(f'[multirun] {len(grid)} run(s) into {base_dir}', flush=True)
    sweep_name = f'{os.path.basename(base_dir)}-multirun-{time.strftime("%Y%m%d-%H%M%S")}'
    tracking = SweepTracking(cfg, sweep_name, {k: ','.join(values) for k, values in sweeps if k in swept_keys})
    try:
        with SignalRelay() as relay:
            rows, table = _run_grid(args, tool, grid, swept_keys, base_dir, extra_args, tracking, relay)
    except BaseException:
        tracking.close('KILLED')
        raise
    summary = [os.path.join(base_dir, SUMMARY_NAME + ext) for ext in ('.md', '.csv')]
    if relay.signum and (len(rows) < len(grid) or rows[-1]['status'] == 'stopped'):  # (else every run ended anyway)
        tracking.close('KILLED', files=summary)
        stopped = f' (#{rows[-1]["index"]} stopped)' if rows and rows[-1]['status'] == 'stopped' else ''
        print(
            f'[multirun] stopped by {signal.Signals(relay.signum).name}: {len(rows)} of {len(grid)} run(s) started'
            f'{stopped}; summary in {base_dir}/{SUMMARY_NAME}.md; to go on with the sweep, run the same'
            ' command with SOLVER.RESUME_FROM=auto',
            flush=True,
        )
        return 128 + relay.signum
    failed = sum(row['status'] != 'ok' for row in rows)
    tracking.close('FAILED' if failed else 'FINISHED', files=summary)
    print(f'[multirun] {len(rows) - failed} ok, {failed} failed; summary in {base_dir}/{SUMMARY_NAME}.md\n{table}')
    return 1 if failed else 0


def _run_grid(args, tool, grid, swept_keys, base_dir, extra_args, tracking, relay):
    """Run each grid point as its own process (started by ``relay``, a SignalRelay), until the grid ends or a stop
    signal came; returns the summary rows and the last table."""
    command, env = tool_command(tool)
    names, rows, table = set(), [], ''
    for index, pairs in enumerate(grid):
        if relay.signum:
            break
        name = run_name(pairs, swept_keys)
        if name in names:
            name = f'{name}-{index}'
        names.add(name)
        run_dir = os.path.join(base_dir, name)
        words = [f'{k}={v}' for k, v in pairs]
        cmd = [*command, '--cfg', args.cfg, *extra_args, *words, *tracking.child_overrides(name)]
        cmd.append(f'SOLVER.WORK_DIR={run_dir}')
        print(f'[multirun] #{index}: {" ".join(words)} -> {run_dir}', flush=True)
        start, started_at = time.perf_counter(), time.time()
        run = relay.start(cmd, stderr=subprocess.PIPE, text=True, env=env)
        _, stderr = run.communicate()
        returncode, seconds = run.returncode, time.perf_counter() - start
        sys.stderr.write(stderr)
        status = 'ok' if returncode == 0 else 'stopped' if relay.signum else 'failed'
        rows.append(
            {
                'index': index,
                'values': dict(pairs),
                'name': name,
                'status': status,
                'exit': returncode,
                'seconds': seconds,
                'metrics': final_metrics(run_dir, since=started_at),
                'error': _last_error_line(stderr) if status == 'failed' else '',
            }
        )
        if status == 'failed':
            print(f'[multirun] #{index} failed (exit {returncode}); going on with the next run', flush=True)
        table = write_summary(base_dir, rows, swept_keys)
    return rows, table
