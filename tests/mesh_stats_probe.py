"""Run under torchrun by test_mesh_regression: set up a MeshRegressionSolver (and begin its training), write this
rank's model statistics.

``python tests/mesh_stats_probe.py CONFIG.yaml OUT_DIR`` writes ``OUT_DIR/rank{r}.json``
with the normalisation buffers the rank's model holds after set-up.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tasks.mesh_regression  # noqa: E402,F401
from scepter_like.config import Config  # noqa: E402
from scepter_like.solver import SOLVERS  # noqa: E402
from scepter_like.utils.distributed import destroy_distributed  # noqa: E402


def main(cfg_path, out_dir):
    solver = SOLVERS.build(Config(cfg_file=cfg_path).SOLVER)
    try:
        solver.set_up_pre()
        solver.set_up()
        solver.before_solve()  # training begins: rank 0 writes WORK_DIR/stats.json
        stats = solver.unwrapped_model.normaliser.stats().to_dict()
        with open(os.path.join(out_dir, f'rank{solver.rank}.json'), 'w') as f:
            json.dump(stats, f)
    finally:
        solver.close()
        destroy_distributed()


if __name__ == '__main__':
    main(*sys.argv[1:])
