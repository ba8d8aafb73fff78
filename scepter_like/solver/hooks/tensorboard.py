"""TensorboardLogHook: train scalars, learning rates and eval / test metrics as TensorBoard events.

Per step it only adds the step's scalar outputs to running sums on their device (like
LogHook); every LOG_INTERVAL train steps, counted as LogHook counts them (within each epoch
at least that long, across shorter ones), and at the end of each epoch it reads them
once — one all-reduce under DDP, so every rank takes part — and rank 0 writes their
means as ``train/{name}`` plus ``train/lr`` (``train/lr_group{i}`` for further param
groups) at the train step count.  Eval and test metrics go out as ``eval/{metric}`` /
``test/{metric}`` after each pass, at the train step count; a hook's epoch scalars (``log_scalar``
outside a step) as ``{mode}/{name}``.  Only rank 0 opens a writer;
it is flushed and closed in ``after_solve``, which also runs when training fails.

One hook writes all of that, wherever it is listed: a second TensorboardLogHook (scepter's
configs list one in EVAL_HOOKS too) stands aside and says so, where it would write every
scalar twice into a second event file.  Listed only in EVAL_HOOKS or TEST_HOOKS, it writes
the metrics, the learning rate aside (no train steps reach it).
"""

import os

from scepter_like.solver.hooks.hook import PRIORITY_LOG, Hook, SolverSurface, model_state
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.loop_state import MODES
from scepter_like.utils.scalars import ScalarSums


@HOOKS.register_class()
class TensorboardLogHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_LOG, 'description': 'after BackwardHook'},
        'LOG_DIR': {'value': '', 'description': "event folder; '': WORK_DIR/tensorboard"},
        'LOG_INTERVAL': {'value': 1000, 'description': 'train steps between scalar writes; <= 0: only per epoch'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.log_dir = cfg.LOG_DIR
        self.interval = cfg.LOG_INTERVAL
        self.writer = None
        self._scalars = ScalarSums()
        self._attached = False
        self._writes_train = True  # listed in TRAIN_HOOKS (before_solve): the train steps' scalars are its to write

    def before_solve(self, solver: SolverSurface):
        self._writes_train = self in solver.hooks_dict['train']
        first = next(h for mode in MODES for h in solver.hooks_dict[mode] if isinstance(h, TensorboardLogHook))
        if first is not self:
            if not self._attached:
                solver.logger.info('a TensorboardLogHook listed again writes nothing: the first one writes every mode')
                self._attached = True
            return
        self.log_dir = self.log_dir or os.path.join(solver.work_dir, 'tensorboard')
        if solver.is_main and self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=self.log_dir)
            solver.logger.info(
                f'TensorBoard events in {self.log_dir}; view them with: tensorboard --logdir {self.log_dir}'
            )
        if not self._attached:  # eval / test metrics: this hook sits in TRAIN_HOOKS, so it adds callbacks
            for mode in ('eval', 'test'):
                solver.register_stage_callback('after_all_iter', self._write_metrics, mode=mode)
            solver.epoch_scalars.subscribe(self._write_epoch_scalars)
            self._attached = True

    def implements(self, stage):
        if stage in ('after_iter', 'after_all_iter'):  # an instance in EVAL_HOOKS / TEST_HOOKS: none per step
            return self._writes_train
        return super().implements(stage)

    def after_iter(self, solver: SolverSurface):
        self._scalars.add(solver.step.outputs)
        if solver.progress.log_interval_ends(self.interval):  # LogHook's steps (metrics.jsonl's) for the same interval
            self._write_train(solver)

    def after_all_iter(self, solver: SolverSurface):
        if self._scalars.count:
            self._write_train(solver)

    def _write_train(self, solver: SolverSurface):
        means = self._scalars.take(solver.world_size)  # every rank: a collective under DDP
        if self.writer is None:
            return
        step = solver.progress.total_iter
        for name, value in {**means, **model_state(solver)}.items():
            self.writer.add_scalar(f'train/{name}', value, step)
        if solver.optimizer is not None:
            for i, group in enumerate(solver.optimizer.param_groups):
                self.writer.add_scalar('train/lr' if i == 0 else f'train/lr_group{i}', group['lr'], step)

    def _write_metrics(self, solver: SolverSurface):
        if self.writer is None:
            return
        for name, value in solver.epoch_outputs.get(solver.mode, {}).items():
            self.writer.add_scalar(f'{solver.mode}/{name}', value, solver.progress.total_iter)
        self.writer.flush()

    def _write_epoch_scalars(self, solver: SolverSurface, values):
        if self.writer is None:
            return
        for name, value in values.items():
            self.writer.add_scalar(f'{solver.mode}/{name}', value, solver.progress.total_iter)

    def after_solve(self, solver: SolverSurface):
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None
