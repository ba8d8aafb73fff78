"""Evaluate: ``python tools/run_eval.py --cfg FILE --checkpoint PATH [KEY.PATH=VALUE ...]``.

Runs METRICS over EVAL_DATA and TEST_DATA (whichever the config gives) with the weights
of PATH (a training checkpoint, a ``.safetensors`` file, or a folder whose ``latest``
names one), by the same loops as the evaluation inside training, so the numbers are the
same.  Prints a table and writes ``WORK_DIR/metrics.json`` (rank 0).  Works under torchrun.
"""

import json
import os
import sys

from scepter_like.cli import add_checkpoint_argument, load_config, make_parser, run
from scepter_like.errors import ConfigError

EVAL_RESULTS_FILE = 'metrics.json'


def make_eval_parser():
    parser = make_parser('Evaluate the METRICS of a config on its EVAL_DATA and TEST_DATA with given weights.')
    add_checkpoint_argument(parser)
    return parser


def format_table(results):
    """A plain-text table: one row per metric, one column per mode."""
    modes = list(results)
    names = list(dict.fromkeys(name for mode in modes for name in results[mode]))
    width = max([len('metric')] + [len(n) for n in names])
    lines = ['metric'.ljust(width) + ''.join(f'  {m:>10s}' for m in modes)]
    for name in names:
        cells = ''.join(f'  {results[m][name]:10.6f}' if name in results[m] else f'  {"-":>10s}' for m in modes)
        lines.append(name.ljust(width) + cells)
    return '\n'.join(lines)


def main(argv):
    args = make_eval_parser().parse_args(argv)
    cfg = load_config(args)
    if args.print_config:
        print(cfg.dump(), end='')
        return 0
    if cfg.SOLVER.get('EVAL_DATA') is None and cfg.SOLVER.get('TEST_DATA') is None:
        raise ConfigError('SOLVER: run_eval needs EVAL_DATA or TEST_DATA; add one (or set it by an override)')
    from scepter_like.solver.inference_solver import build_solver_with_weights, evaluate
    from scepter_like.utils.checkpoint import atomic_write_text, resolve_checkpoint
    from scepter_like.utils.launch_env import process_rank
    from scepter_like.utils.logger import get_logger

    logger = get_logger(rank=process_rank())
    weights = resolve_checkpoint(args.checkpoint)
    solver = build_solver_with_weights(cfg, weights, logger)
    try:
        results = evaluate(solver)
    finally:
        solver.close()
    if solver.is_main:
        path = os.path.join(solver.work_dir, EVAL_RESULTS_FILE)
        record = {'checkpoint': os.path.abspath(weights), **results}
        atomic_write_text(path, json.dumps(record, indent=2) + '\n')
        print(format_table(results))
        print(f'metrics written to {path}')
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
