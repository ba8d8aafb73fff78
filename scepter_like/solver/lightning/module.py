"""``SolverModule``: the LightningModule whose steps are the solver's and whose hooks run the solver's stages.

Lightning runs the loops; each stage of the solver's loop runs at the same moment and
through the same solver method as in the native loop (solver/base_solver.py)::

    Lightning                          the solver
    on_train_epoch_start               begin_train_epoch (before_epoch), start_train_iters (before_all_iter)
    training_step(dataloader_iter)     train_step: before_iter, run_step_train, the updater's update, after_iter;
                                       after the epoch's last step (or a stop): finish_train_iters
                                       (after_all_iter), after_epoch, the checkpoint of a signalled stop
    validation loop, when due          begin_pass, start_pass_iters, pass_step(run_step_eval)..., end_pass
    on_train_epoch_end                 the next epoch; Trainer.should_stop once training is finished
    test loop (trainer.test)           the same as validation, with run_step_test

Manual optimization: the solver's ``WeightUpdater`` takes the step, so the arithmetic is the
native loop's and ``after_backward`` hooks run where they do there; only the backward goes
through ``manual_backward``, where Lightning's strategy all-reduces the gradients (DDP's
``no_sync`` on accumulation micro-steps).  The training step pulls its batch itself
(``dataloader_iter``): nothing is fetched ahead, so the epoch ends right after its last step,
before Lightning's validation, as the native loop's does.
"""

import contextlib
import time

from torch.nn.parallel import DistributedDataParallel

from scepter_like.solver.checkpoint_state import save_preempted
from scepter_like.solver.lightning.library import import_lightning

pl = import_lightning()


class TrainBatches:
    """The train 'dataloader' Lightning iterates: each epoch the batches ``start_train_iters`` planned, until
    the epoch closes (its last step, or a stop) -- no batch is loaded after that."""

    def __init__(self):
        self._batches = iter(())
        self._open = False

    def start(self, batches):
        self._batches, self._open = batches, True

    def close(self):
        self._open = False

    def __iter__(self):
        while self._open:
            batch = next(self._batches, None)  # batches are dicts, never None
            if batch is None:
                return
            yield batch


class PassBatches:
    """The eval or test 'dataloader': the mode's batches when its pass is due (``due``), else none."""

    def __init__(self, bundle):
        self.bundle = bundle
        self.due = False

    def __iter__(self):
        return self.bundle.iterate() if self.due and self.bundle is not None else iter(())


class SolverModule(pl.LightningModule):
    """The solver's model, steps and stages as a LightningModule (see the module docstring)."""

    def __init__(self, solver):
        super().__init__()
        self.automatic_optimization = False
        self.solver = solver
        self.net = solver.unwrapped_model  # a submodule: Lightning places it and wraps the module in DDP
        self.train_batches = TrainBatches()
        self.passes = {mode: PassBatches(solver.datas.get(mode)) for mode in ('eval', 'test')}
        self._previous_mode = 'train'
        solver.updater.backward_fn = self.backward_loss

    # -- what Lightning asks of a LightningModule ------------------------------------------------
    def configure_optimizers(self):
        # stepped by the updater; listed so that Lightning places its state (after a switch of
        # SOLVER.OPTIMIZER_PHASES the solver's ``optimizer`` is the one in use, not trainer.optimizers[0])
        return self.solver.optimizer

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # the solver's steps move batches as they do in the native loop (transfer_data_to_device)

    def backward_loss(self, loss):
        """The updater's backward: Lightning's, so its strategy all-reduces the gradients (not on a micro-step)."""
        wrapper = self.trainer.strategy.model
        micro_step = not self.solver.step.sync_grads and isinstance(wrapper, DistributedDataParallel)
        with wrapper.no_sync() if micro_step else contextlib.nullcontext():
            self.manual_backward(loss)

    # -- training --------------------------------------------------------------------------------
    def on_train_start(self):
        self.solver.stop_signals.reinstall()

    def on_train_epoch_start(self):
        self.solver.begin_train_epoch()
        self.train_batches.start(self.solver.start_train_iters())

    def training_step(self, dataloader_iter):
        solver, progress = self.solver, self.solver.progress
        t0 = time.perf_counter()
        try:
            batch = next(dataloader_iter)[0]
        except StopIteration:  # no step left in this epoch (a run resumed at its end): it ends here
            self._end_train_epoch()
            raise
        solver.train_step(batch, progress.iters['train'], time.perf_counter() - t0)
        if progress.stop_reason is not None or progress.iters['train'] >= progress.train_stop:
            self._end_train_epoch()
            next(dataloader_iter, None)  # the batches end with this step: so does Lightning's epoch

    def _end_train_epoch(self):
        solver = self.solver
        self.train_batches.close()
        solver.finish_train_iters()
        solver.after_epoch()
        if solver.progress.stop_signal:
            raise save_preempted(solver)
        self.passes['eval'].due = solver.eval_due()

    def on_train_epoch_end(self):
        progress = self.solver.progress
        if progress.epoch_finished:  # not when MAX_STEPS or a stop cut the epoch short
            progress.next_epoch()
        if progress.train_finished() or self.solver._agree_on_stop(between_epochs=True):
            self.trainer.should_stop = True

    # -- evaluation and test ---------------------------------------------------------------------
    def on_validation_start(self):
        self.solver.stop_signals.reinstall()

    def on_validation_epoch_start(self):
        self._begin_pass('eval')

    def validation_step(self, batch, batch_idx):
        self.solver.pass_step(self.solver.run_step_eval, batch, batch_idx)

    def on_validation_epoch_end(self):
        self._end_pass('eval')

    def on_test_start(self):
        self.solver.stop_signals.reinstall()

    def on_test_epoch_start(self):
        self._begin_pass('test')

    def test_step(self, batch, batch_idx):
        self.solver.pass_step(self.solver.run_step_test, batch, batch_idx)

    def on_test_epoch_end(self):
        self._end_pass('test')

    def _begin_pass(self, mode):
        if self.passes[mode].due:
            self._previous_mode = self.solver.mode
            self.solver.begin_pass(mode)
            self.solver.start_pass_iters()

    def _end_pass(self, mode):
        if self.passes[mode].due:
            self.passes[mode].due = False
            self.solver.finish_pass_iters()
            self.solver.end_pass()
            self.solver.mode = self._previous_mode
