"""SafetensorsHook: the model's weights as ``.safetensors`` files others can load safely.

Rank 0 writes ``WORK_DIR/safetensors/{prefix}-step-{S}.safetensors`` every INTERVAL train
steps (one due inside a gradient accumulation group at the end of that group, as
CheckpointHook does) and ``{prefix}-final.safetensors`` when training ends.  The weights are
those of the unwrapped model (no ``module.`` prefix; under FSDP the full tensors, gathered on
every rank); tensors that share memory (tied weights) are written as separate copies.  The
file's metadata (``solver.save_safetensors()``) holds the step, the epoch, the run's config and
the model's description (JSON: ``scepter_like.model.description``), so the tools can build the
model from the file alone.  Each file is written atomically (see ``utils/checkpoint.py``).
"""

import os

from scepter_like.solver.hooks.hook import PRIORITY_SAFETENSORS, Hook, SolverSurface, StepInterval
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.parallel import is_fsdp
from scepter_like.utils.checkpoint import remove_temp_files, save_safetensors

SAFETENSORS_DIR = 'safetensors'


@HOOKS.register_class()
class SafetensorsHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_SAFETENSORS, 'description': 'after BackwardHook (weights of this step)'},
        'INTERVAL': {'value': 1000, 'description': 'save every this many train steps (<= 0: only at the end)'},
        'SAVE_NAME_PREFIX': {'value': 'weights', 'description': "file name prefix (scepter's default is ldm_step)"},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.interval = cfg.INTERVAL
        self.prefix = cfg.SAVE_NAME_PREFIX
        self.folder = None
        self._steps = StepInterval(self.interval)

    def before_solve(self, solver: SolverSurface):
        self.folder = os.path.join(solver.work_dir, SAFETENSORS_DIR)
        if solver.is_main:
            os.makedirs(self.folder, exist_ok=True)
            remove_temp_files(self.folder)

    def after_iter(self, solver: SolverSurface):
        if self.interval > 0 and solver.mode == 'train' and self._steps.reached(solver):
            self.save(solver, f'{self.prefix}-step-{solver.progress.total_iter}.safetensors')

    def after_solve(self, solver: SolverSurface):
        if solver.failed is None and self.folder is not None and 'train' in solver.datas:
            self.save(solver, f'{self.prefix}-final.safetensors')

    def save(self, solver: SolverSurface, name):
        """Write the unwrapped model's weights to ``folder/name`` (rank 0); returns the path."""
        if not solver.is_main and not is_fsdp(solver.model):
            return None
        state_dict, metadata = solver.save_safetensors()  # under FSDP every rank takes part in the gather
        if not solver.is_main:
            return None
        path = os.path.join(self.folder, name)
        save_safetensors(state_dict, path, metadata=metadata)
        solver.logger.info(f'weights saved: {path}')
        return path
