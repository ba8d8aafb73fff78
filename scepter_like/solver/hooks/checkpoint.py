"""CheckpointHook: periodic, best and last checkpoints, written so no crash can tear one.

Files live in ``WORK_DIR/checkpoints/``: ``{prefix}-epoch-{E}.pth`` every INTERVAL
epochs, ``{prefix}-step-{S}.pth`` every STEP_INTERVAL train steps, ``{prefix}-best.pth``
when SAVE_BEST_BY improves (with SAVE_TOP_K = k > 1 also ``{prefix}-top-epoch-{E}.pth`` of
the k best evaluations, a displaced one removed once its successor is complete),
``{prefix}-last.pth`` at the end with SAVE_LAST.  Each is
written atomically; then the ``latest`` pointer moves to it (every kind: each holds the state of
the moment it is written, so ``latest`` names the newest training state, a best file too);
only then are periodic checkpoints beyond KEEP_LAST pruned.  A run that ends after its newest
checkpoint (no SAVE_LAST) says which step and file that is.  A step checkpoint due inside a gradient
accumulation group is taken at the end of that group (checkpoints never hold
half-accumulated gradients).  Step and epoch checkpoints are taken by callbacks that run
after every hook of ``after_iter`` / ``after_epoch``, so each hook's state in the file is
that of the end of the step or epoch, whatever its PRIORITY.

Training waits for the state to be collected and serialized into a temp file; a
background thread then makes it durable (fsync), moves it into place, moves ``latest``
and prunes, so the disk's flush overlaps the next steps.  With ASYNC_SAVE training waits
only for a CPU copy of the state, and the serialization moves to that thread too.  One
save is in flight at a time: the next save and the end of training wait for it, and a
failure there is raised on the training thread.  A crash before the move leaves the
previous checkpoint and ``latest`` as they were, and a temp file the next start removes.

Full-batch training makes every epoch one train step; there ``INTERVAL: 1`` (the default)
saves every FULL_BATCH_INTERVAL epochs (= steps) instead of every step, which would write
thousands of files.  STEP_INTERVAL saves at any step count, 1 included.

Resuming is the solver's (RESUME_FROM, at the end of ``set_up``), so every hook's
``before_solve`` already sees the resumed state.
"""

import math
import os

import torch

from scepter_like.errors import CheckpointError, ConfigError, TrainingError
from scepter_like.solver.hooks.hook import (
    PRIORITY_CHECKPOINT,
    Hook,
    SolverSurface,
    StepInterval,
    eval_metric,
    greater_is_better,
    unknown_eval_metric,
)
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.checkpoint import (
    BEST_SUFFIX,
    CHECKPOINT_DIR,
    BackgroundWriter,
    commit_temp,
    cpu_snapshot,
    latest_checkpoint,
    remove_temp_files,
    torch_save_temp,
    write_latest_pointer,
)
from scepter_like.utils.distributed import all_reduce_max

FULL_BATCH_INTERVAL = 1000  # epochs between epoch checkpoints at INTERVAL 1 when an epoch is one step


def refuse_nonfinite_weights(solver: SolverSurface, name):
    """A TrainingError, before ``name`` is written, when the weights hold NaN or inf: such a file would become
    ``latest`` (or best) and ``RESUME_FROM: auto`` would resume it.  One flag all-reduced, so every rank
    (each holding a shard under FSDP) decides alike."""
    params = [p.detach() for p in solver.unwrapped_model.parameters()]
    if not params:
        return
    shards = [p.to_local() if hasattr(p, 'to_local') else p for p in params]  # FSDP: each rank's own DTensor shard
    bad = torch.stack([~torch.isfinite(p).all() for p in shards]).any().to(torch.int32)
    if int(all_reduce_max(bad)):
        raise TrainingError(
            f'the model weights hold NaN or inf after step {solver.progress.total_iter}; {name} is not written,'
            ' so latest and best stay finite; lower the learning rate, clip gradients (BackwardHook'
            " GRADIENT_CLIP) or check the data (BackwardHook NONFINITE_POLICY: 'off' saves such weights)"
        )


def parse_best_by(text):
    """'+metric' -> (metric, True: greater is better); '-metric' -> (metric, False); 'metric' -> (metric, None:
    as the metric says, ``greater_is_better``)."""
    if text.startswith('-'):
        return text[1:], False
    if text.startswith('+'):
        return text[1:], True
    return text, None


@HOOKS.register_class()
class CheckpointHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_CHECKPOINT, 'description': 'after the LR and log hooks'},
        'INTERVAL': {
            'value': 1,
            'description': f'save every this many epochs (<= 0: no epoch checkpoints); 1 with one-step epochs (full'
            f' batch): every {FULL_BATCH_INTERVAL}',
        },
        'STEP_INTERVAL': {'value': 0, 'description': 'save every this many train steps (0: off)', 'min': 0},
        'SAVE_NAME_PREFIX': {'value': 'checkpoint', 'description': "file name prefix (scepter's default is ldm_step)"},
        'DISABLE_SNAPSHOT': {
            'value': False,
            'description': "scepter's: true writes no step checkpoints (STEP_INTERVAL off); epoch, best and last"
            ' checkpoints are still written, as in scepter',
        },
        'SAVE_LAST': {'value': False, 'description': 'save {prefix}-last.pth when training ends'},
        'SAVE_BEST': {'value': True, 'description': 'keep {prefix}-best.pth (needs SAVE_BEST_BY)'},
        'SAVE_BEST_BY': {'value': '', 'description': "eval metric; '+name' greater is better, '-name' less"},
        'KEEP_LAST': {'value': 0, 'description': 'periodic checkpoints to keep (0: all); best is kept apart', 'min': 0},
        'SAVE_TOP_K': {
            'value': 1,
            'description': 'with SAVE_BEST_BY: also keep {prefix}-top-epoch-{E}.pth of the k best evaluations'
            ' (1: only {prefix}-best.pth)',
            'min': 1,
        },
        'ASYNC_SAVE': {
            'value': False,
            'description': 'serialize in the background too (training waits for a CPU copy of the state)',
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.interval = cfg.INTERVAL
        self.step_interval = 0 if cfg.DISABLE_SNAPSHOT else cfg.STEP_INTERVAL
        self.prefix = cfg.SAVE_NAME_PREFIX
        self.best_name = f'{self.prefix}{BEST_SUFFIX}'
        self.save_last = cfg.SAVE_LAST
        self.best_metric, self.greater_is_better = parse_best_by(cfg.SAVE_BEST_BY)
        self.save_best = cfg.SAVE_BEST and bool(self.best_metric)
        self.keep_last = cfg.KEEP_LAST
        self.top_k = cfg.SAVE_TOP_K if self.save_best else 1
        self.top = []  # [value, epoch (1-based), file name] of the kept top-k checkpoints, best first
        self.async_save = cfg.ASYNC_SAVE
        self.writer = BackgroundWriter()
        self.folder = None
        self.saved = []  # periodic checkpoints, oldest first
        self.best_value = None
        self.best_epoch = None
        self.best_step = None  # the train step the best checkpoint holds: a test of the file checks it is that one
        self.checked_eval = -1  # the last_eval_epoch considered (-1: none; an epoch cut short records none)
        self._steps = StepInterval(self.step_interval)
        self._registered = False
        self._newest = None  # (train step, path) of the newest checkpoint this run wrote or resumed from

    def before_solve(self, solver: SolverSurface):
        self.writer.wait()  # a save of an earlier solve() lands before its temp files are swept
        self.folder = os.path.join(solver.work_dir, CHECKPOINT_DIR)
        if solver.is_main:
            os.makedirs(self.folder, exist_ok=True)
            removed = remove_temp_files(self.folder)
            if removed:
                solver.logger.warning(
                    f'removed {len(removed)} temporary file(s) of an interrupted save in {self.folder}'
                )
        if self.cfg.INTERVAL == 1 and solver.progress.epoch_iters['train'] == 1:
            self.interval = FULL_BATCH_INTERVAL
            solver.logger.info(
                f'CheckpointHook: an epoch is one step (full batch), so INTERVAL 1 saves every {FULL_BATCH_INTERVAL}'
                ' epochs; STEP_INTERVAL: 1 would save every step'
            )
        if self.save_best and (why := unknown_eval_metric(solver, self.best_metric)):
            raise ConfigError(f'{self.cfg.path_of("SAVE_BEST_BY")}: {why}')
        if self.save_best and self.greater_is_better and not greater_is_better(solver, self.best_metric):
            raise ConfigError(  # '+' would keep the worst checkpoint as best, silently
                f'{self.cfg.path_of("SAVE_BEST_BY")}: {self.cfg.SAVE_BEST_BY!r}, but its metric says less'
                f' {self.best_metric} is better; write {self.best_metric!r} or {"-" + self.best_metric!r}'
            )
        if self.save_best and self.greater_is_better is None:
            self.greater_is_better = greater_is_better(solver, self.best_metric)
            if not self.greater_is_better:
                solver.logger.info(f'CheckpointHook keeps the least {self.best_metric} as best (its metric says so)')
        epochs = solver.progress.max_epochs
        if 0 < epochs < self.interval and not self.step_interval:
            kept = self.save_best or self.save_last  # a run that keeps its best or last checkpoint: no warning
            (solver.logger.info if kept else solver.logger.warning)(
                f'{self.cfg.path_of("INTERVAL")}: {self.interval} epochs is more than the run has ({epochs}), so no'
                + (' epoch checkpoint is written, only the best / last' if kept else ' checkpoint is written at all')
                + "; STEP_INTERVAL saves every so many steps (scepter's INTERVAL counted steps too)"
            )
        if self._newest is None and solver.resumed_from:
            self._newest = (solver.progress.total_iter, solver.resumed_from)
        if not self._registered:  # after the hooks of the stage; none per step when STEP_INTERVAL is 0
            if self.step_interval > 0:
                solver.register_stage_callback('after_iter', self._after_train_step)
            if self.interval > 0:
                solver.register_stage_callback('after_epoch', self._after_train_epoch)
            self._registered = True

    def _save(self, solver: SolverSurface, name, periodic=True, dropped=()):
        """Save to ``name``; once it is complete, ``dropped`` (names of files it replaces) are removed."""
        self.writer.wait()  # one save in flight; a failed background write surfaces here
        if solver.updater.settings.nonfinite_policy != 'off':
            refuse_nonfinite_weights(solver, name)
        if periodic:  # recorded before the state is collected, so a resumed run prunes this file in turn
            if name in self.saved:
                self.saved.remove(name)
            self.saved.append(name)
        path = os.path.join(self.folder, name)
        self._newest = (solver.progress.total_iter, path)  # best and top-k files too: the pointer moves to each
        ckpt = solver.training_state()  # a collective: every rank takes part
        if not solver.is_main:
            return path
        if self.async_save:
            snapshot = cpu_snapshot(ckpt)
            self.writer.submit(lambda: self._publish(solver, torch_save_temp(snapshot, path), name, periodic, dropped))
        else:
            tmp = torch_save_temp(ckpt, path)
            self.writer.submit(lambda: self._publish(solver, tmp, name, periodic, dropped))
        return path

    def _publish(self, solver: SolverSurface, tmp, name, periodic, dropped=()):
        """The file, then the ``latest`` pointer, then pruning: each only after the one before is complete."""
        path = os.path.join(self.folder, name)
        commit_temp(tmp, path)
        write_latest_pointer(self.folder, name)
        if periodic:
            self._prune()
        for old in dropped:
            old_path = os.path.join(self.folder, old)
            if os.path.exists(old_path):
                os.remove(old_path)
        solver.logger.info(f'checkpoint saved: {path}')

    def _prune(self):
        if self.keep_last <= 0:
            return
        while len(self.saved) > self.keep_last:
            old = self.saved.pop(0)
            old_path = os.path.join(self.folder, old)
            if os.path.exists(old_path):
                os.remove(old_path)

    def _after_train_step(self, solver: SolverSurface):
        if self._steps.reached(solver):
            self._save(solver, f'{self.prefix}-step-{solver.progress.total_iter}.pth')

    def _after_train_epoch(self, solver: SolverSurface):
        progress = solver.progress
        if (progress.epoch + 1) % self.interval == 0 and progress.iters['train'] == progress.epoch_iters['train']:
            self._save(solver, f'{self.prefix}-epoch-{progress.epoch + 1}.pth')

    def before_epoch(self, solver: SolverSurface):
        self._check_best(solver)

    def before_save_checkpoint(self, solver: SolverSurface, checkpoint):
        self.writer.wait()  # any checkpoint (the solver's own too) comes after this hook's pending commit

    def _check_best(self, solver: SolverSurface):
        """Consider the newest eval results once; save the best checkpoint when they improve."""
        if not self.save_best or 'eval' not in solver.epoch_outputs:
            return
        if self.checked_eval == solver.progress.last_eval_epoch:
            return
        self.checked_eval = solver.progress.last_eval_epoch
        value = eval_metric(solver, self.best_metric, self.cfg.path_of('SAVE_BEST_BY'))
        if value is None or not math.isfinite(value):
            return
        if self.top_k > 1:
            self._keep_top(solver, value)
        better = self.best_value is None or self._better(value, self.best_value)
        if better:
            self.best_value, self.best_epoch, self.best_step = value, solver.progress.epoch, solver.progress.total_iter
            self._save(solver, self.best_name, periodic=False)
            solver.logger.info(f'new best {self.best_metric}: {value:.6g}')

    def best_checkpoint(self, solver: SolverSurface):
        """The path of the best checkpoint once it is complete (the newest evaluation considered), or None.

        Every rank calls it (a new best is a save); the file is found in WORK_DIR after an
        earlier run too.
        """
        if not self.save_best:
            return None
        if self.folder is not None:  # inside a solve: the last evaluation may not have been considered yet
            self._check_best(solver)
        self.writer.wait()
        path = os.path.join(solver.work_dir, CHECKPOINT_DIR, self.best_name)
        return path if os.path.isfile(path) else None

    def check_best_file(self, solver: SolverSurface, path, held):
        """A CheckpointError when the best file ``path``, holding train step ``held`` (None: the file does not say),
        is not the one this session saved (or resumed knowing of): another session in this WORK_DIR (a later one's
        RESUME_FROM) wrote it over, and a test of it would score that session's weights and record them under this
        one's step.  A session that neither trained nor resumed tests the run's best as it finds it."""
        own = self.best_step
        if held is None or held == own or (own is None and self.best_value is not None):
            return  # (a best resumed from a checkpoint older than best_step: nothing to check against)
        if own is None and not (solver.progress.total_iter or solver.resumed_from):
            return
        saved = (
            f"this session's best checkpoint holds step {own}"
            if own is not None
            else f'this session (at step {solver.progress.total_iter}) saved none'
        )
        raise CheckpointError(
            f'the test weights (best): {path} holds step {held}, but {saved}: another session in this WORK_DIR'
            ' wrote it since; test it from the session that wrote it, or build a new session with'
            ' SOLVER.RESUME_FROM=auto to test with it'
        )

    def _better(self, value, than):
        return value > than if self.greater_is_better else value < than

    def _keep_top(self, solver: SolverSurface, value):
        """Save this evaluation's checkpoint when it ranks among the SAVE_TOP_K best; the one it displaces goes."""
        if len(self.top) >= self.top_k and not self._better(value, self.top[-1][0]):
            return
        epoch = solver.progress.last_eval_epoch + 1
        name = f'{self.prefix}-top-epoch-{epoch}.pth'
        self.top.append([value, epoch, name])
        self.top.sort(key=lambda entry: -entry[0] if self.greater_is_better else entry[0])  # stable: earlier first
        dropped = [entry[2] for entry in self.top[self.top_k :]]
        del self.top[self.top_k :]
        self._save(solver, name, periodic=False, dropped=dropped)

    @property
    def best_path(self):
        """The best checkpoint's path once one is saved, else None (trackers record it)."""
        if self.best_value is None or self.folder is None:
            return None
        return os.path.join(self.folder, self.best_name)

    def after_solve(self, solver: SolverSurface):
        if solver.failed is not None or self.folder is None:
            self.writer.wait()  # let a save that was under way complete
            return
        self._check_best(solver)
        if self.save_last:
            self._save(solver, f'{self.prefix}-last.pth')
        self.writer.wait()
        if not self.save_last and self._newest is not None and self._newest[0] < solver.progress.total_iter:
            self._say_newest(solver)

    def _say_newest(self, solver: SolverSurface):
        """Log which step the newest checkpoint holds, when training ended after it (no SAVE_LAST)."""
        step, path = self._newest
        try:
            latest = solver.is_main and os.path.abspath(latest_checkpoint(self.folder) or '') == os.path.abspath(path)
        except CheckpointError:  # a pointer to a file someone removed: it names no checkpoint
            latest = False
        solver.logger.info(
            f'training ended at step {solver.progress.total_iter}; the newest checkpoint holds step {step}'
            + (
                f' ({os.path.basename(path)}, which latest names: RUN:last is that file, and RESUME_FROM=auto'
                f' trains steps {step + 1}-{solver.progress.total_iter} again from it)'
                if latest
                else f' ({path})'
            )
            + '; SAVE_LAST: true saves the end too'
        )

    def state_dict(self):
        return {
            'saved': list(self.saved),
            'best_value': self.best_value,
            'best_epoch': self.best_epoch,
            'best_step': self.best_step,
            'checked_eval': self.checked_eval,
            'step_due': self._steps.due,
            'top': [list(entry) for entry in self.top],
        }

    def load_state_dict(self, state):
        self.saved = list(state['saved'])
        self.best_value = state['best_value']
        self.best_epoch = state['best_epoch']
        self.best_step = state.get('best_step')  # (None in a checkpoint written before it was kept)
        self.checked_eval = state['checked_eval']
        self._steps.due = state['step_due']
        self.top = [list(entry) for entry in state.get('top', [])]
