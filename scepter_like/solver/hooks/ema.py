"""EMAHook: an exponential moving average of the weights, used for evaluation and export.

After every optimizer step (not every micro-batch) the hook updates

    ema = decay_t * ema + (1 - decay_t) * w

over the model's floating-point parameters and buffers (BatchNorm running statistics
are averaged too; integer buffers such as ``num_batches_tracked`` are copied).  With
DECAY_WARMUP the decay grows with the number of updates ``t`` done so far (0 first):
``decay_t = min(DECAY, (1 + t) / (10 + t))``, so early averages are not dominated by
the random initial weights.  Evaluation, test and ``predict`` run with the EMA weights swapped
in (see ``eval_weights``), also in a session resumed from a checkpoint that only tests or
predicts (the EMA is taken at ``after_load_checkpoint``); the EMA lives in the checkpoint as
this hook's state and, with EXPORT, is written to ``WORK_DIR/ema/{EXPORT_NAME}.safetensors``
at the end.  Under FSDP each rank averages its own shards; checkpoints and the export hold
the full tensors.
"""

import os

import torch

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.eval_weights import swap_in_for_eval
from scepter_like.solver.hooks.hook import Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.parallel import full_tensor, place_like

PRIORITY_EMA = 50  # after BackwardHook (0) has stepped the optimizer, before the log (100)


def averaged_state(model):
    """The model's state-dict entries split into (averaged float tensors, copied other tensors).

    A parameter that is not floating point cannot be averaged and is not a buffer that may
    simply be copied: it is a ConfigError, raised before any step runs.
    """
    bad = [f'{name} ({p.dtype})' for name, p in model.named_parameters() if not p.is_floating_point()]
    if bad:
        raise ConfigError(
            f'EMAHook: parameter {", ".join(bad)} is not floating point, so its moving average is undefined;'
            ' register it as a buffer (module.register_buffer) so the EMA copies it, or remove EMAHook from'
            ' SOLVER.TRAIN_HOOKS'
        )
    state = model.state_dict()
    floats = {k: v for k, v in state.items() if v.is_floating_point()}
    others = {k: v for k, v in state.items() if not v.is_floating_point()}
    return floats, others


@HOOKS.register_class()
class EMAHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_EMA, 'description': 'after BackwardHook (0), before the log (100)'},
        'DECAY': {'value': 0.9999, 'description': 'EMA decay per update, in [0, 1)', 'min': 0.0, 'below': 1.0},
        'DECAY_WARMUP': {'value': False, 'description': 'decay_t = min(DECAY, (1 + t) / (10 + t)), t = updates so far'},
        'UPDATE_INTERVAL': {'value': 1, 'description': 'update every this many optimizer steps', 'min': 1},
        'START_STEP': {'value': 0, 'description': 'before this many optimizer steps the EMA copies the weights'},
        'EVAL_WITH_EMA': {'value': True, 'description': 'evaluate and test with the EMA weights'},
        'EXPORT': {'value': False, 'description': 'write WORK_DIR/ema/{EXPORT_NAME}.safetensors at the end'},
        'EXPORT_NAME': {'value': 'model-ema', 'description': 'file name (without suffix) of the export'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.decay = float(cfg.DECAY)
        self.decay_warmup = cfg.DECAY_WARMUP
        self.update_interval = cfg.UPDATE_INTERVAL
        self.start_step = cfg.START_STEP
        self.eval_with_ema = cfg.EVAL_WITH_EMA
        self.export = cfg.EXPORT
        self.export_name = cfg.EXPORT_NAME
        self.ema = {}  # state-dict key -> averaged tensor (floats) or copy (integer buffers)
        self.updates = 0
        self._seen_steps = 0
        self._loaded = None
        self._floats = self._model_floats = self._others = None
        self._swap = None
        self._full = (None, None)  # (optimizer steps, the EMA's full tensors) of the state_dict() just taken

    def decay_at(self, t):
        """The decay of update number ``t`` (0-based)."""
        return min(self.decay, (1 + t) / (10 + t)) if self.decay_warmup else self.decay

    def before_solve(self, solver: SolverSurface):
        floats, others = self._start(solver)
        self._model_floats = list(floats.values())
        self._floats = [self.ema[k] for k in floats]
        self._others = [(self.ema[k], v) for k, v in others.items()]
        self._seen_steps = solver.progress.optimizer_steps
        self._full = (None, None)

    def after_load_checkpoint(self, solver: SolverSurface, checkpoint):
        # a session that resumes only to test or predict (no before_solve of train hooks) evaluates with the EMA too
        self._start(solver)

    def _start(self, solver: SolverSurface):
        """The EMA in place (the checkpoint's, else a copy of the weights) and, with EVAL_WITH_EMA, swapped in for
        evaluation, test and predict; returns ``averaged_state`` of the model."""
        floats, others = averaged_state(solver.unwrapped_model)
        if self._loaded is not None:
            missing = sorted((set(floats) | set(others)) - set(self._loaded))
            if missing:
                raise ConfigError(f'EMAHook: the checkpoint holds no EMA of {missing[:5]}; resume with the same model')
            self.ema = {k: place_like(self._loaded[k], v) for k, v in {**floats, **others}.items()}
            self._loaded = None
        elif not self.ema:
            self.ema = {k: v.detach().clone() for k, v in {**floats, **others}.items()}
        if self.eval_with_ema and self._swap is None:
            self._swap = swap_in_for_eval(solver, lambda: self.ema)
        return floats, others

    def after_iter(self, solver: SolverSurface):
        if solver.progress.optimizer_steps == self._seen_steps:
            return
        self._seen_steps = steps = solver.progress.optimizer_steps
        if steps <= self.start_step:
            for ema, value in zip(self._floats, self._model_floats):
                ema.copy_(value)
        elif steps % self.update_interval == 0:
            torch._foreach_lerp_(self._floats, self._model_floats, 1.0 - self.decay_at(self.updates))
            self.updates += 1
        else:
            return
        for ema, value in self._others:
            ema.copy_(value)

    def after_solve(self, solver: SolverSurface):
        if self._swap is not None:
            self._swap.swap_back()
        if self.export and solver.failed is None and self.ema:
            weights = self.full_ema()  # a collective under FSDP: every rank takes part
            if not solver.is_main:
                return
            from scepter_like.model.description import save_described_weights

            path = os.path.join(solver.work_dir, 'ema', f'{self.export_name}.safetensors')
            save_described_weights(
                path,
                weights,
                solver.unwrapped_model,
                ema_updates=self.updates,
                decay=self.decay,
                optimizer_steps=solver.progress.optimizer_steps,
            )
            solver.logger.info(f'EMA weights ({self.updates} updates) exported to {path}')

    def full_ema(self):
        """The EMA with full tensors: under FSDP it holds each rank's shards, gathered here (a collective)."""
        return {k: full_tensor(v) for k, v in self.ema.items()}  # without FSDP: the EMA's own tensors

    def before_save_checkpoint(self, solver: SolverSurface, checkpoint):
        # what evaluation uses, for run_eval / export; the same tensors as the hook state, stored once
        steps, full = self._full
        self._full = (None, None)  # not kept past the checkpoint (under FSDP: a gathered copy)
        if self.eval_with_ema and self.ema:
            checkpoint['eval_model'] = full if full is not None and steps == self._seen_steps else self.full_ema()

    def state_dict(self):
        full = self.full_ema()
        self._full = (self._seen_steps, full)  # the checkpoint's eval_model (before_save_checkpoint comes next)
        return {'ema': dict(full), 'updates': self.updates}

    def load_state_dict(self, state):
        self._loaded = state['ema']
        self.updates = state['updates']
