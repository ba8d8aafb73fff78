"""SWAHook: stochastic weight averaging over a range of epochs (``torch.optim.swa_utils``).

At the end of every train epoch from START_EPOCH to END_EPOCH (1-based, as the log counts
them; END_EPOCH 0: to the last) the weights enter an equal-weight running average
(``AveragedModel``).  BatchNorm running statistics of the average are recomputed with
``update_bn`` over the train data whenever the average changed and is about to be used.
Evaluation, test and ``predict`` run with the average swapped in (``eval_weights``; in a session resumed
from a checkpoint from the resume on, whether or not it trains), and checkpoints carry
it as ``eval_model`` (so a best checkpoint chosen by it holds what was evaluated); at the end of
a successful run, once every hook's ``after_solve`` is done, the model keeps the average (so SAVE_LAST's
checkpoint holds the weights training ended with, and a run extended from it trains on from them); with
EXPORT it is written to ``WORK_DIR/swa/{EXPORT_NAME}.safetensors``.  SWA_LR > 0 hands the learning rate to
``SWALR`` from START_EPOCH on (it anneals over ANNEAL_EPOCHS, stepping once per epoch).
Under FSDP (``SOLVER.PARALLEL: fsdp``) it is a ConfigError before training: the average is
a deep copy of the whole model, which a sharded model does not allow.
"""

import os

import torch

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.eval_weights import swap_in_for_eval
from scepter_like.solver.hooks.hook import Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.parallel import is_fsdp
from scepter_like.utils.distributed import all_reduce_sum

PRIORITY_SWA = 250  # after LrHook (200) at after_epoch, so SWALR has the last word on the LR


class _BatchAsKwargs(torch.nn.Module):
    """Lets ``update_bn`` (which calls ``model(batch)``) drive a model that takes ``**batch``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, batch):
        return self.model(**batch)


@HOOKS.register_class()
class SWAHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_SWA, 'description': 'after LrHook (200)'},
        'START_EPOCH': {
            'value': 1,
            'description': 'first epoch (1-based) whose final weights enter the average',
            'min': 1,
        },
        'END_EPOCH': {'value': 0, 'description': 'last epoch (1-based) averaged; 0: the last epoch', 'min': 0},
        'SWA_LR': {'value': 0.0, 'description': '> 0: SWALR anneals the LR to this from START_EPOCH on'},
        'ANNEAL_EPOCHS': {'value': 1, 'description': 'SWALR anneal_epochs', 'min': 0},
        'ANNEAL_STRATEGY': {
            'value': 'cos',
            'description': "SWALR anneal_strategy: 'cos' | 'linear'",
            'choices': ['cos', 'linear'],
        },
        'UPDATE_BN': {'value': True, 'description': 'recompute BatchNorm statistics of the average on the train data'},
        'EVAL_WITH_SWA': {'value': True, 'description': 'evaluate and test with the averaged weights'},
        'EXPORT': {'value': False, 'description': 'write WORK_DIR/swa/{EXPORT_NAME}.safetensors at the end'},
        'EXPORT_NAME': {'value': 'model-swa', 'description': 'file name (without suffix) of the export'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.start_epoch = cfg.START_EPOCH
        self.end_epoch = cfg.END_EPOCH
        if self.end_epoch and self.end_epoch < self.start_epoch:
            raise ConfigError(
                f'{cfg.path_of("END_EPOCH")}: {self.end_epoch} is before START_EPOCH {self.start_epoch};'
                ' give START_EPOCH <= END_EPOCH, or END_EPOCH 0 for the last epoch'
            )
        self.swa_lr = float(cfg.SWA_LR)
        self.update_bn = cfg.UPDATE_BN
        self.eval_with_swa = cfg.EVAL_WITH_SWA
        self.export = cfg.EXPORT
        self.export_name = cfg.EXPORT_NAME
        self.averaged = None
        self.scheduler = None
        self._bn_stale = False
        self._loaded = None
        self._loaded_scheduler = None  # the checkpoint's SWALR state, until before_solve builds SWALR
        self._swap = None
        self._keeps_average = False  # the after_solve callback that leaves the average in the model is registered

    def before_solve(self, solver: SolverSurface):
        from torch.optim.swa_utils import SWALR

        if self.swa_lr > 0 and len(solver.updater.phases) > 1:
            raise ConfigError(
                f'{self.cfg.path_of("SWA_LR")}: SWALR anneals one optimizer, and SOLVER.OPTIMIZER_PHASES switches'
                ' optimizers; set SWA_LR: 0 (average only) or give one optimizer'
            )
        self._start(solver)
        if self.swa_lr > 0 and self.scheduler is None:
            self.scheduler = SWALR(
                solver.optimizer,
                swa_lr=self.swa_lr,
                anneal_epochs=self.cfg.ANNEAL_EPOCHS,
                anneal_strategy=self.cfg.ANNEAL_STRATEGY,
            )
            if self._loaded_scheduler is not None:
                self.scheduler.load_state_dict(self._loaded_scheduler)
        self._loaded_scheduler = None

    def after_load_checkpoint(self, solver: SolverSurface, checkpoint):
        # a session that resumes only to test or predict (no before_solve of train hooks) evaluates with the average
        self._start(solver)

    def _start(self, solver: SolverSurface):
        """The average in place (the checkpoint's, else empty) and, with EVAL_WITH_SWA, swapped in for evaluation,
        test and predict."""
        from torch.optim.swa_utils import AveragedModel

        if is_fsdp(solver.model):
            raise ConfigError(
                f'{self.cfg.path}: SWAHook averages a full copy of the model, and SOLVER.PARALLEL: fsdp shards it'
                ' (FSDP forbids the copy); use SOLVER.PARALLEL: ddp, or EMAHook, or remove SWAHook'
            )
        if self.averaged is None:
            self.averaged = AveragedModel(solver.unwrapped_model)
        if self._loaded is not None:
            self.averaged.load_state_dict(self._loaded['averaged'])
            self._loaded_scheduler = self._loaded.get('scheduler')
            self._bn_stale = self.n_averaged > 0
            self._loaded = None
        if self.eval_with_swa and self._swap is None:
            self._swap = swap_in_for_eval(solver, lambda: self.averaged_weights(solver))
        if not self._keeps_average:  # after every hook's after_solve, whatever the mode it runs in
            for mode in ('train', 'eval', 'test'):
                solver.register_stage_callback('after_solve', self._keep_average, mode=mode)
            self._keeps_average = True

    @property
    def n_averaged(self):
        return int(self.averaged.n_averaged) if self.averaged is not None else 0

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (not self.end_epoch or epoch <= self.end_epoch)

    def after_epoch(self, solver: SolverSurface):
        progress = solver.progress
        # an epoch MAX_STEPS or a stop (a signal, request_stop) cut short is averaged when a resumed run finishes it,
        # not twice
        if not progress.epoch_finished or not self._in_range(progress.epoch + 1):
            return
        self.averaged.update_parameters(solver.unwrapped_model)
        self._bn_stale = True
        if self.scheduler is not None:
            self.scheduler.step()

    def averaged_weights(self, solver: SolverSurface):
        """The average as a model state dict (BatchNorm statistics recomputed first); {} before any."""
        if self.n_averaged == 0:
            return {}
        if self._bn_stale and self.update_bn:
            self._recompute_bn(solver)
        self._bn_stale = False
        return self.averaged.module.state_dict()

    def before_save_checkpoint(self, solver: SolverSurface, checkpoint):
        # what evaluation uses (a best checkpoint chosen by it), for the test, run_eval and export; not when its
        # BatchNorm statistics are due to be recomputed (over the train data: not inside a checkpoint)
        if self.eval_with_swa and self.n_averaged > 0 and not (self._bn_stale and self._has_bn()):
            checkpoint['eval_model'] = self.averaged.module.state_dict()

    def _has_bn(self):
        return self.update_bn and any(
            isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.averaged.module.modules()
        )

    def _recompute_bn(self, solver: SolverSurface):
        """``update_bn`` over this rank's train batches; under DDP the statistics are averaged over ranks."""
        from torch.optim.swa_utils import update_bn

        module = self.averaged.module
        norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if not norms or 'train' not in solver.datas:
            return
        bundle, device = solver.datas['train'], solver.device
        batches = (solver.transfer_data_to_device(b) if device.type != 'cpu' else b for b in bundle.iterate())
        with torch.no_grad():
            update_bn(batches, _BatchAsKwargs(module))
            if solver.world_size > 1:
                for m in norms:
                    for buf in (m.running_mean, m.running_var):
                        if buf is not None:
                            buf.copy_(all_reduce_sum(buf.clone()) / solver.world_size)

    def after_solve(self, solver: SolverSurface):
        if self._swap is not None:
            self._swap.swap_back()
        if not self.export or solver.failed is not None or self.n_averaged == 0:
            return
        weights = self.averaged_weights(solver)  # every rank (recomputing BatchNorm statistics all-reduces)
        if solver.is_main:
            from scepter_like.model.description import save_described_weights

            path = os.path.join(solver.work_dir, 'swa', f'{self.export_name}.safetensors')
            save_described_weights(path, weights, solver.unwrapped_model, swa_epochs=self.n_averaged)
            solver.logger.info(f'SWA weights exported to {path}')

    def _keep_average(self, solver: SolverSurface):
        """A callback after every hook's ``after_solve``: the hooks' end-of-run work (SAVE_LAST's checkpoint, an
        export) saw the weights training ended with; from here on the model holds the average."""
        if solver.failed is None and self.n_averaged > 0:
            solver.unwrapped_model.load_state_dict(self.averaged_weights(solver))
            solver.logger.info(f'SWA: the model now holds the average of {self.n_averaged} epochs')

    def state_dict(self):
        if self.averaged is None:
            return {}
        return {
            'averaged': self.averaged.state_dict(),
            'scheduler': self.scheduler.state_dict() if self.scheduler is not None else None,
        }

    def load_state_dict(self, state):
        if state:
            self._loaded = state
