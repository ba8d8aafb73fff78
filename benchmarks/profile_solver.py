#!/usr/bin/env python
"""cProfile of the solver's training loop on a benchmark workload (in this process).

``python benchmarks/profile_solver.py [--workload mlp] [--steps 3000] [--top 30] [--sort tottime]``

Builds the same config as ``overhead.py`` and runs it exactly as ``tools/run_train.py``
does, profiling only ``solve()``: what the profile shows beside torch's own ops
(forward, backward, optimizer) is the toolkit's per-step overhead.
"""

import argparse
import cProfile
import logging
import os
import pstats
import sys
import tempfile

from runners import REPO, prepare, solver_config

sys.path.insert(0, REPO)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workload', choices=('mlp', 'conv'), default='mlp')
    parser.add_argument('--steps', type=int, default=3000)
    parser.add_argument('--top', type=int, default=30)
    parser.add_argument('--sort', default='tottime')
    args = parser.parse_args(argv)
    import torch

    from scepter_like.config import Config
    from scepter_like.solver import SOLVERS
    from scepter_like.utils.imports import import_user_modules

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix='scepter_prof_') as folder:
        data, _ = prepare(args.workload, folder, args.steps)
        cfg = Config(
            solver_config(args.workload, data, os.path.join(folder, 'work'), os.path.join(folder, 't.json'), args.steps)
        )
        import_user_modules(cfg.IMPORTS)
        logger = logging.getLogger('scepter_like.profile')
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
        solver = SOLVERS.build(cfg.SOLVER, logger=logger)
        solver.set_up_pre()
        solver.set_up()
        profile = cProfile.Profile()
        profile.runcall(solver.solve)
        solver.close()
    pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == '__main__':
    sys.exit(main())
