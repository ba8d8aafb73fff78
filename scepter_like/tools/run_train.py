"""Train: ``python tools/run_train.py --cfg FILE [--import M]... [--print-config] [-m] [KEY.PATH=VALUE ...]``.

``-m`` runs a grid of runs (``KEY=V1,V2`` sweeps), see ``scepter_like/multirun.py``.

Works alone and under ``torchrun`` (one or many nodes).
"""

import sys

from scepter_like.cli import load_config, make_parser, run


def main(argv):
    parser = make_parser('Train a model from a YAML config.')
    parser.add_argument('-m', '--multirun', action='store_true', help='run the grid of KEY=V1,V2 overrides, one by one')
    args = parser.parse_args(argv)
    if args.multirun:
        from scepter_like.multirun import run_multirun

        return run_multirun(args, tool='scepter_like.tools.run_train')
    cfg = load_config(args)
    if args.print_config:
        from scepter_like.config_check import checked_config

        print(checked_config(cfg).dump(), end='')
        return 0
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.launch_env import process_rank
    from scepter_like.utils.logger import get_logger

    logger = get_logger(rank=process_rank())
    solver = SOLVERS.build(cfg.SOLVER, logger=logger)
    with solver.stop_signals:  # a stop signal in set-up ends the run now; in training at a step boundary
        try:
            solver.set_up_pre()
            solver.set_up()
            solver.solve()
        finally:
            solver.close()
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
