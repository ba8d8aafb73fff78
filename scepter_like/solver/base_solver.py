"""BaseSolver: builds everything from the SOLVER config and runs the loop, calling hooks.

::

    solver = SOLVERS.build(cfg.SOLVER, logger=logger)
    solver.set_up_pre()   # environment, work dir, log file, construct_hook
    solver.set_up()       # construct_data / model / metrics, model_to_device, init_opti, resume
    solver.solve()        # before_solve; per epoch solve_train, solve_eval; solve_test; after_solve

The loop's state lives in ``solver.progress`` (``TrainingProgress``: counters, the epoch's
window, accumulation groups, when training ends) and ``solver.step`` (``StepState``: what
the current train step decided and produced).  scepter's names (``epoch``, ``iter``,
``total_iter``, ``epoch_max_iter``, ``loss``, ``iter_outputs``, ...) are views of them,
with scepter's offsets (``ScepterProtocol``, solver/scepter_protocol.py).  Hooks change
that state only through the methods under "requests from hooks".

The loop is written as pieces -- ``begin_train_epoch``, ``start_train_iters``, ``train_step``,
``finish_train_iters``; ``begin_pass``, ``start_pass_iters``, ``pass_step``,
``finish_pass_iters``, ``end_pass`` -- that the native loop strings together and that
Lightning's hooks call under ``ENV.USE_PL`` (solver/lightning/module.py), so both loops run
the same stages in the same order.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from scepter_like.data.loader import DATA_KEYS, build_data, check_splits_agree
from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.registry import METRICS
from scepter_like.model.base import prepare_model
from scepter_like.model.registry import MODELS
from scepter_like.solver import checkpoint_state
from scepter_like.solver.compile import compile_model, compile_settings
from scepter_like.solver.environment import resolve_env, set_up_environment
from scepter_like.solver.epoch_scalars import EpochScalars
from scepter_like.solver.failed_runs import record_failure, set_aside_failed_run
from scepter_like.solver.hooks.hook import SolverSurface
from scepter_like.solver.loop_state import MODES, StepState, TrainingProgress, detached_outputs
from scepter_like.solver.model_call import forward_checked
from scepter_like.solver.optimization import UpdateSettings, WeightUpdater
from scepter_like.solver.parallel import PARALLEL_MODES, eval_context, wrap_model
from scepter_like.solver.preemption import AgreedStop, StopSignals
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.run_records import announce_run, close_work_dir_log, open_work_dir, start_training_run
from scepter_like.solver.sanity import sanity_eval
from scepter_like.solver.scepter_protocol import ScepterProtocol, state_view
from scepter_like.solver.stages import HookStages, StageTable, add_required_hooks, build_hooks, update_hooks
from scepter_like.solver.test_weights import TEST_WITH, weights_for_test
from scepter_like.solver.work_dir_lock import WorkDirLock
from scepter_like.utils.blame import describe_caller
from scepter_like.utils.checkpoint import unwrap_model
from scepter_like.utils.distributed import broadcast_object
from scepter_like.utils.dtypes import DTYPES, default_dtype
from scepter_like.utils.scalars import is_scalar

_CPU = torch.device('cpu')  # the device of a run without torch.distributed (one object, not one per step)


@SOLVERS.register_class()
class BaseSolver(HookStages, ScepterProtocol):
    para_dict = {
        'FILE_SYSTEM': {'value': None, 'description': 'accepted for scepter configs; files are always local'},
        'WORK_DIR': {'value': './work_dir', 'description': 'folder for logs, checkpoints and run records'},
        'LOG_FILE': {'value': 'std_log.txt', 'description': 'log file name inside WORK_DIR'},
        'RESUME_FROM': {'value': '', 'description': "checkpoint to resume from; 'auto': the newest in WORK_DIR"},
        'MAX_EPOCHS': {'value': 10, 'description': 'training epochs (-1: as many as MAX_STEPS needs)', 'min': -1},
        'MAX_STEPS': {'value': 0, 'description': 'stop after this many train steps (0: no limit)', 'min': 0},
        'ACCU_STEP': {'value': 1, 'description': 'gradient accumulation (= BackwardHook.ACCUMULATE_STEP)', 'min': 1},
        'NUM_FOLDS': {'value': 1, 'description': 'epochs per pass over the train data (several processes)', 'min': 1},
        'EVAL_INTERVAL': {'value': 1, 'description': 'evaluate every this many epochs (and after the last)', 'min': 1},
        'EXTRA_KEYS': {'value': [], 'description': 'batch keys handed to metrics besides the model outputs'},
        'TRAIN_DATA': {'value': None, 'description': 'train data config (a DATASETS entry plus loader keys)'},
        'EVAL_DATA': {'value': None, 'description': 'evaluation data config'},
        'TEST_DATA': {'value': None, 'description': 'test data config'},
        'TRAIN_HOOKS': {'value': [], 'description': 'hooks of train mode'},
        'EVAL_HOOKS': {'value': [], 'description': 'hooks of eval mode'},
        'TEST_HOOKS': {'value': [], 'description': 'hooks of test mode'},
        'MODEL': {'value': None, 'description': 'a MODELS config'},
        'OPTIMIZER': {'value': None, 'description': 'an OPTIMIZERS config'},
        'LR_SCHEDULER': {'value': None, 'description': 'an LR_SCHEDULERS config'},
        'METRICS': {'value': [], 'description': 'METRICS configs for eval and test'},
        'LOSS_WEIGHTS': {'value': {}, 'description': 'weights of the loss_* terms summed into loss (default 1.0)'},
        'LOSS_AGGREGATOR': {
            'value': None,
            'description': "a LOSS_AGGREGATORS config balancing the model's loss_* terms (none: Sum by LOSS_WEIGHTS)",
        },
        'OPTIMIZER_PHASES': {
            'value': [],
            'description': 'later optimizer phases, e.g. [{AT_STEP: 2000, OPTIMIZER: {NAME: LBFGS}}] (optimization.py)',
        },
        'DTYPE': {'value': 'float32', 'description': 'dtype of the model and the data', 'choices': list(DTYPES)},
        'PARALLEL': {'value': 'ddp', 'description': 'data parallelism when WORLD_SIZE > 1', 'choices': PARALLEL_MODES},
        'FIND_UNUSED_PARAMETERS': {'value': False, 'description': 'DDP find_unused_parameters'},
        'COMPILE': {'value': {}, 'description': 'torch.compile: ENABLED, BACKEND, MODE, DYNAMIC, FULLGRAPH, STRICT'},
        'CODE_SNAPSHOT': {'value': True, 'description': 'save git diffs to WORK_DIR/code_snapshot/ (in a git tree)'},
        'TEST_WITH': {
            'value': 'best',
            'description': "weights of the final test: 'best' (CheckpointHook's best checkpoint, when kept) or 'last'",
            'choices': list(TEST_WITH),
        },
        'SANITY_EVAL_BATCHES': {
            'value': 2,
            'description': 'eval batches run through the eval step and metrics before training (0: none)',
            'min': 0,
        },
        'MODEL_SUMMARY_DEPTH': {
            'value': 1,
            'description': 'levels of layers in the model summary logged at the start (0: no summary)',
            'min': 0,
        },
        'DEFAULT_LOG_HOOK': {'value': True, 'description': 'add a LogHook to TRAIN_HOOKS when they have none'},
    }

    STEPS_OPTIMIZER_ITSELF = False  # a subclass whose run_step_train steps the optimizer: the updater stands aside

    def __init__(self, cfg: Any, logger: logging.Logger | None = None):
        self.cfg = cfg
        self.logger = logger or logging.getLogger('scepter_like')
        self.work_dir: str = cfg.WORK_DIR
        self.log_file = os.path.join(self.work_dir, cfg.LOG_FILE) if cfg.LOG_FILE else ''
        self.run_lock = WorkDirLock(self.work_dir)  # rank 0's, from set-up to the end of solve() (work_dir_lock.py)
        self.resume_from = cfg.RESUME_FROM or None  # scepter's hooks test it against None
        self.extra_keys = list(cfg.EXTRA_KEYS)
        self.dtype = DTYPES[cfg.DTYPE]
        self.progress = TrainingProgress(cfg.MAX_EPOCHS, cfg.MAX_STEPS, cfg.NUM_FOLDS, cfg.EVAL_INTERVAL)
        self.step = StepState()
        self.updater = WeightUpdater(cfg, self.logger)  # the optimisation step (solver/optimization.py)
        self.epoch_scalars = EpochScalars()  # log_scalar outside a step
        self.compile_settings = compile_settings(cfg)
        self.stop_signals = StopSignals()  # run_train.py enters it before set-up; solve() for its loop
        self._mode = 'train'

        self.env_cfg: Any = None
        self.dist_info: Any = None
        self.seed = 0
        self.failed: BaseException | None = None  # the exception that ended solve(), for after_solve hooks
        self.model_flops: float | None = None  # forward FLOPs per sample, set by register_flops

        self.datas: dict[str, Any] = {}
        self.hooks_dict: dict[str, list] = {mode: [] for mode in MODES}
        self._hook_keys: dict[str, Any] = {}
        self.stages: StageTable | None = None  # once the hooks are built
        self.model: Any = None
        self.metrics: list = []
        self.epoch_outputs: dict[str, dict] = defaultdict(dict)  # mode -> {metric: float}
        self._file_handler: logging.Handler | None = None
        self.metrics_log: Any = None  # rank 0: WORK_DIR/metrics.jsonl
        self.resumed_from: str | None = None
        self.lightning: Any = None  # ENV.USE_PL: the LightningBackend that runs the loop (solver/lightning/)

    # -- set-up -------------------------------------------------------------------------------
    def set_up_pre(self) -> None:
        """Environment (seed, process group, device), work dir, log file, hooks.

        With ``ENV.USE_PL`` true, Lightning's Trainer is built here and joins (or starts) the
        processes (solver/lightning/, docs/lightning.md).
        """
        self.env_cfg = resolve_env(self.cfg)
        if self.env_cfg.USE_PL:
            from scepter_like.solver.lightning import lightning_backend

            self.lightning = lightning_backend(self)
        self.dist_info = set_up_environment(self.env_cfg, join=self.lightning.join if self.lightning else None)
        self.seed = self.env_cfg.SEED
        self._file_handler = open_work_dir(self)
        self.construct_hook()

    def set_up(self) -> None:
        """Data, model, metrics, device placement, optimizer; resume if asked (``solve`` writes the run records)."""
        with default_dtype(self.dtype):  # data and parameters are made in SOLVER.DTYPE
            self.construct_data()
            self.construct_model()
        if 'train' in self.datas:  # the epochs of a pass, whoever built the data (a construct_data of scepter's too)
            self.progress.plan_folds(self.datas['train'].num_batches(), self.cfg.path_of('NUM_FOLDS'), self.world_size)
        self.construct_metrics()
        self.model_to_device()
        self.init_opti()
        # rank r draws its own random stream from here on (dropout, augmentation)
        torch.manual_seed(self.seed + self.rank)
        self.resumed_from = self.resume()

    def construct_hook(self) -> None:
        """The hooks of every mode, their stage table, and the updater's settings (SOLVER and BackwardHook keys)."""
        add_required_hooks(self.cfg, self.logger, self.STEPS_OPTIMIZER_ITSELF)
        self.hooks_dict, self._hook_keys = build_hooks(self.cfg, self.logger)
        self.stages = StageTable(self.hooks_dict)
        backward_cfg, foreign = update_hooks(self.hooks_dict['train'])
        self.updater.configure(
            UpdateSettings.from_config(self.cfg, backward_cfg, self.device.type),
            active=not (foreign or self.STEPS_OPTIMIZER_ITSELF),
            seed=self.seed,
        )

    def construct_data(self) -> None:
        """Build each mode's data (its classes numbered as the train data's); every mode's ``epoch_max_iter`` is
        known from here on."""
        for mode in MODES:
            data_cfg = self.cfg[DATA_KEYS[mode]]
            if data_cfg is not None:
                self.datas[mode] = build_data(data_cfg, mode, self.dist_info, self.seed, logger=self.logger)
                self.progress.epoch_iters[mode] = self.datas[mode].num_batches()
        where = {mode: self.cfg.path_of(key) for mode, key in DATA_KEYS.items()}
        check_splits_agree(self.datas, where, logger=self.logger)

    def construct_model(self) -> None:
        if self.cfg.MODEL is None:
            raise ConfigError(f'{self.cfg.path_of("MODEL")}: the solver needs a MODEL config with a NAME')
        self.model = MODELS.build(self.cfg.MODEL, logger=self.logger, where=self.cfg.path_of('MODEL'))
        self.pretrained_description = prepare_model(self.model, self.cfg.MODEL, self.logger)  # resume checks it

    def construct_metrics(self) -> None:
        entries = self.cfg.METRICS or []
        if not isinstance(entries, list):
            raise ConfigError(f'{self.cfg.path_of("METRICS")}: expected a list of metric configs')
        self.metrics = [METRICS.build(entry, logger=self.logger) for entry in entries]

    def model_to_device(self, tg_model_ins: Any = None) -> Any:
        """Move to this rank's device, wrap (DDP / FSDP), compile (SOLVER.COMPILE); returns it when given one."""
        model = self.model if tg_model_ins is None else tg_model_ins
        if self.lightning is not None:  # Lightning's strategy wraps it (DDP) when it fits
            wrapped = model.to(self.device)
        else:
            wrapped = wrap_model(model, self.dist_info, self.cfg.PARALLEL, self.cfg.FIND_UNUSED_PARAMETERS)
        compile_model(wrapped, self.compile_settings, self.logger)
        if tg_model_ins is not None:
            return wrapped
        self.model = wrapped
        return None

    def init_opti(self) -> None:
        """The updater's phase-0 optimizer and scheduler (every phase checked against the train data), its
        GradScaler and loss aggregator."""
        cfg = self.cfg
        if cfg.LR_SCHEDULER is not None and cfg.OPTIMIZER is None:
            raise ConfigError(f'{cfg.path_of("LR_SCHEDULER")}: an LR scheduler needs an OPTIMIZER')
        backward_hook = any(type(h).__name__ == 'BackwardHook' for h in self.hooks_dict['train'])
        if cfg.OPTIMIZER is None and self.updater.active and backward_hook and 'train' in self.datas:
            raise ConfigError('BackwardHook needs SOLVER.OPTIMIZER; add an optimizer config')
        train = self.progress if 'train' in self.datas else None
        self.updater.set_up(self.train_parameters(), self.device, train, self.datas.get('train'))

    # -- what hooks read (docs/extending.md, "The hook surface") --------------------------------------
    optimizer = state_view('updater', 'optimizer', 'The optimizer of the current phase.')
    lr_scheduler = state_view('updater', 'lr_scheduler', 'The LR scheduler of the current phase, or None.')
    loss_aggregator = state_view('updater', 'loss_aggregator', "Turns the model's loss_* terms into the loss.", False)
    optimizer_steps = state_view('progress', 'optimizer_steps', 'Optimizer steps taken.', settable=False)
    last_eval_epoch = state_view('progress', 'last_eval_epoch', 'The epoch epoch_outputs["eval"] is of.', False)

    stop_requested = property(lambda self: self.progress.stop_reason is not None)
    rank = property(lambda self: self.dist_info.rank if self.dist_info else 0)
    world_size = property(lambda self: self.dist_info.world_size if self.dist_info else 1)
    is_main = property(lambda self: self.rank == 0)
    device = property(lambda self: self.dist_info.device if self.dist_info else _CPU)
    unwrapped_model = property(lambda self: unwrap_model(self.model))

    @functools.cached_property
    def config_text(self) -> str:
        """The run's whole config as YAML, for checkpoint and export metadata (dumped once per run)."""
        return self.cfg.root.dump()

    # -- requests from hooks ------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """End training at the next step boundary (the current step, evaluation and checkpoints complete); under
        DDP at the step boundary the ranks agree on (solver/preemption.py), a request in an epoch stage before the
        next epoch.  The first request is logged, on every rank, with its reason and who asked."""
        if self.progress.stop_reason is None:  # (a hook asking on every step: the caller looked up until then only)
            asker = describe_caller(sys._getframe(1))
            if not self.stop_signals.defer(reason, asker):
                AgreedStop(0, reason, asker).take(self)

    def request_probes(self) -> None:
        """Keep what ``register_probe`` is given during the current step (ProbeDataHook dumps it)."""
        self.step.probe_wanted = True

    def log_scalar(self, name: str, value: Any) -> None:
        """Add a scalar (a 0-dim tensor or a number) to this step's outputs: LogHook and TensorBoard show it.

        Outside a step (``before_epoch``, ``after_epoch`` ...) it is an epoch scalar (``epoch_scalars.py``).
        """
        if not self.step.running:
            self.epoch_scalars.add(name, value)
            return
        self.step.outputs[name] = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(float(value))

    # -- the loop -------------------------------------------------------------------------------
    def solve(self, epoch: int | None = None, every_epoch: bool = False, test: bool = True) -> None:
        """Train for MAX_EPOCHS (``epoch`` overrides it), evaluating every EVAL_INTERVAL; test at the end
        with the weights TEST_WITH names (``test=False``: no test).

        ``every_epoch=True`` also runs the test data after every epoch.  Under ``ENV.USE_PL``
        Lightning's Trainer runs the epochs and the test (``LightningBackend.run``).
        """
        if epoch is not None:
            self.max_epochs = epoch
        self.failed = None
        if not self.resumed_from:
            set_aside_failed_run(self)  # a run that failed unevaluated is no earlier run to protect
        self.metrics_log = start_training_run(self)  # never into another run's WORK_DIR; records, metrics.jsonl
        self.before_solve()
        announce_run(self)  # the model and data, what is left to train, the hook order
        try:
            if 'train' in self.datas and not self.progress.train_finished():
                sanity_eval(self, self.cfg.SANITY_EVAL_BATCHES)
            with self.stop_signals.training_loop(self.env_cfg.STOP_CHECK_SECONDS):
                if 'train' not in self.datas:  # evaluation only: one eval pass (scepter's solve runs it), the test
                    self.solve_eval()
                run = self.lightning.run if self.lightning is not None else self._run_epochs
                run(every_epoch, test)
        except BaseException as e:
            self.failed = e
            record_failure(self)
            raise
        finally:
            self.after_solve()
            self.run_lock.release()  # the run has trained: evaluating or testing more takes no lock

    def _run_epochs(self, every_epoch: bool, test: bool) -> None:
        """The native loop over epochs: train, evaluate when due, test at the end (``test``)."""
        progress = self.progress
        if progress.epoch_finished:  # resumed between an epoch and its evaluation
            if self.eval_due():  # (it may no longer be due, e.g. with another EVAL_INTERVAL)
                self.solve_eval()
            progress.next_epoch()
        while 'train' in self.datas and not (progress.train_finished() or self._agree_on_stop(between_epochs=True)):
            self.solve_train()
            if progress.stop_signal:
                raise checkpoint_state.save_preempted(self)
            if self.eval_due():
                self.solve_eval()
            if every_epoch and 'test' in self.datas:
                self.solve_test()
            if progress.epoch_finished:  # not when MAX_STEPS or a stop cut the epoch short
                progress.next_epoch()
        if 'test' in self.datas and not every_epoch and test:
            self.solve_final_test()

    def solve_final_test(self) -> None:
        """The test after training, with the weights TEST_WITH names (the best checkpoint's by default); without
        train data, with the model's own (PRETRAINED_MODEL, a resumed checkpoint)."""
        with weights_for_test(self, self.cfg.TEST_WITH if 'train' in self.datas else 'last'):
            self.solve_test()

    def eval_due(self) -> bool:
        """Whether the evaluation after the current train epoch is to run (there is eval data, and it is due)."""
        return 'eval' in self.datas and self.progress.eval_due()

    def solve_train(self) -> None:
        self.begin_train_epoch()
        with self.own_train_loop_as_epoch():
            self.run_train()
        self.after_epoch()

    def begin_train_epoch(self) -> None:
        """A train epoch begins: train mode, the optimizer phase due, before_epoch hooks, the pass's shuffle."""
        self.mode = 'train'
        self.updater.enter_due_phase(self.progress)
        self.before_epoch()
        # each pass over the data shuffles (and a sampled dataset redraws) anew, whatever the hooks did
        # (scepter's DistSamplerHook sets the sampler's epoch its own way)
        with default_dtype(self.dtype):
            self.datas['train'].set_epoch(self.progress.pass_index)

    def solve_eval(self) -> None:
        self._solve_no_grad('eval')

    def solve_test(self) -> None:
        self._solve_no_grad('test')

    def _solve_no_grad(self, mode: str) -> None:
        if mode not in self.datas:
            return
        if self.lightning is not None:  # a pass outside Lightning's fit: its validate / test loop
            return self.lightning.run_pass(mode)
        previous, outputs = self._mode, self.step.outputs  # the train step's: hooks see them again after the pass
        try:
            with torch.no_grad(), eval_context(self.model):
                self.begin_pass(mode)
                self.run_eval() if mode == 'eval' else self.run_test()
                self.end_pass()
        finally:
            self.mode, self.step.outputs = previous, outputs

    def begin_pass(self, mode: str) -> None:
        """An eval / test pass begins (under ``torch.no_grad``): its mode, its counter at 0 and no step outputs yet
        (the train step's come back after it), before_epoch hooks."""
        self.mode = mode
        self.progress.iters[mode], self.step.outputs = 0, {}
        self._outputs_recorded = False
        self.before_epoch()

    def end_pass(self) -> None:
        """An eval / test pass ends: its outputs recorded (a scepter-style ``run_eval`` fills ``_epoch_outputs``
        itself), after_epoch hooks; an evaluation marks the epoch evaluated (not one of an epoch cut short)."""
        mode = self._mode
        if not self._outputs_recorded:
            self.record_epoch_outputs(broadcast_object(self.epoch_outputs[mode]))
        self.after_epoch()
        if mode == 'eval':
            self.progress.record_eval()

    def record_epoch_outputs(self, outputs: dict[str, Any]) -> None:
        """``epoch_outputs[mode]`` = ``outputs`` as ``{name: float}`` (one-element tensors too); metrics.jsonl."""
        self.epoch_outputs[self._mode] = {k: float(v) if is_scalar(v) else v for k, v in outputs.items()}
        self._outputs_recorded = True
        if self.metrics_log is not None:
            self.metrics_log.write_epoch_outputs(self, self._mode)

    def run_train(self) -> None:
        """The train steps of one epoch: before_all_iter, ``train_step`` for each batch, after_all_iter."""
        progress = self.progress
        batches = self.start_train_iters()
        t0 = time.perf_counter()
        for batch_idx, batch in enumerate(batches, progress.iters['train']):
            self.train_step(batch, batch_idx, time.perf_counter() - t0)
            if progress.stop_reason is not None:
                break
            t0 = time.perf_counter()
        self.finish_train_iters()

    def start_train_iters(self) -> Iterator[dict[str, Any]]:
        """Plan this epoch's steps (its window, MAX_STEPS), run before_all_iter; the batches still to train on."""
        progress = self.progress
        bundle = self.datas['train']
        first, stop = progress.start_train_epoch(bundle.num_batches())
        self.before_all_iter()
        return bundle.iterate(first, stop) if first < stop else iter(())

    def train_step(self, batch: dict[str, Any], batch_idx: int, data_time: float = 0.0) -> None:
        """One train step: plan it -> before_iter -> run_step_train (forward, loss) -> the updater's update
        (backward, after_backward, clip, step) -> count -> after_iter; at an optimizer-step boundary, agree on a
        stop signal."""
        progress, step, updater = self.progress, self.step, self.updater
        if self.moves_batches:
            batch = self.transfer_data_to_device(batch)
        if progress.total_iter >= updater.next_phase_step:
            updater.enter_due_phase(progress)
        group = progress.accumulation_group(updater.settings.accumulate_steps)
        step.begin(progress.total_iter, batch, *group, data_time=data_time)
        self.before_iter()
        self.take_step_results(self.run_step_train(batch, batch_idx, progress.total_iter, self.rank))
        self._finish_step('train', self._update(), self.after_iter)
        if step.steps_optimizer:
            self._agree_on_stop()

    def finish_train_iters(self) -> None:
        """This epoch's steps are done (all, or up to MAX_STEPS or a stop): after_all_iter."""
        self.progress.finish_train_epoch()
        self.after_all_iter()

    def _update(self) -> bool:
        """The updater's update of this step; whether the optimizer stepped.  When something else steps the
        optimizer (``updater.active`` false), the step counts as planned."""
        if self.updater.active:
            return self.updater.update(self.step, self._recompute_loss, self.after_backward)
        return self.step.steps_optimizer and self.optimizer is not None

    def _recompute_loss(self) -> torch.Tensor:
        """The current step's loss evaluated again (a closure optimizer's later evaluations), through
        ``run_step_train``: an override's own loss is the one L-BFGS's line search evaluates."""
        assert self.step.batch is not None  # a train step's batch, kept for this
        results = self.run_step_train(self.step.batch, self.progress.iters['train'], self.step.index, self.rank)
        return self.updater.loss_of(results, self.step)

    def _finish_step(self, mode: str, optimizer_step: bool, call_after_iter: Callable[[], Any]) -> None:
        """A step's end, the same in every loop: count it, run its after_iter hooks, end it."""
        self.progress.count_step(mode, optimizer_step)
        self.step.counted = True
        call_after_iter()
        self.end_step()

    def _agree_on_stop(self, between_epochs: bool = False) -> bool:
        """At an optimizer-step boundary (or ``between_epochs``): stop when every rank has agreed on a stop
        (preemption.py); whether it stops."""
        if stop := self.stop_signals.agreed_between_epochs() if between_epochs else self.stop_signals.agreed():
            stop.take(self)
        return stop is not None

    def _run_no_grad_loop(self, mode: str, step_fn: Callable) -> None:
        self.mode = mode  # (a solve_eval written scepter's way calls run_eval in train mode: its run_eval sets it)
        self.start_pass_iters()
        for batch_idx, batch in enumerate(self.datas[self._mode].iterate()):
            self.pass_step(step_fn, batch, batch_idx)
        self.finish_pass_iters()

    def start_pass_iters(self) -> None:
        """The steps of an eval / test pass begin: its batch count, before_all_iter."""
        self.progress.epoch_iters[self._mode] = self.datas[self._mode].num_batches()
        self.before_all_iter()

    def pass_step(self, step_fn: Callable, batch: dict[str, Any], batch_idx: int) -> None:
        """One eval / test step: before_iter -> ``step_fn`` (run_step_eval / run_step_test) -> count -> after_iter."""
        if self.moves_batches:
            batch = self.transfer_data_to_device(batch)
        self.step.begin()
        self.before_iter()
        results = step_fn(batch, batch_idx, self.progress.total_iter, self.rank)
        self.take_step_results(results)
        self.update_metrics(batch, results)
        self._finish_step(self._mode, False, self.after_iter)

    def finish_pass_iters(self) -> None:
        """The steps of an eval / test pass are done: the metrics' epoch outputs, after_all_iter."""
        self.record_epoch_outputs(self.compute_epoch_outputs())
        self.after_all_iter()

    def run_eval(self) -> None:
        self._run_no_grad_loop('eval', self.run_step_eval)

    def run_test(self) -> None:
        self._run_no_grad_loop('test', self.run_step_test)

    @property
    def moves_batches(self) -> bool:
        """Whether batches need ``transfer_data_to_device`` (another device, or a SOLVER.DTYPE other than float32)."""
        return self.device.type != 'cpu' or self.dtype is not torch.float32

    def transfer_data_to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch on this rank's device, its floating tensors in SOLVER.DTYPE when that is not float32."""
        device, cast = self.device, None if self.dtype is torch.float32 else self.dtype
        return {
            k: v.to(device, dtype=cast if v.is_floating_point() else None, non_blocking=True)
            if isinstance(v, torch.Tensor)
            else v
            for k, v in batch.items()
        }

    def run_step_train(self, batch_data: dict[str, Any], batch_idx: int = 0, step: Any = None, rank: Any = None):
        """Forward one batch: the model's train outputs.  The loop trains on what it returns (scepter's way: an
        override that changes the loss, or calls the model itself, trains on its own results)."""
        return self.train_forward(batch_data)

    def take_step_results(self, results: dict[str, Any]) -> None:
        """What ``run_step_*`` returned becomes the step's: its outputs and, in a train step, its loss (the ``loss_*``
        terms aggregated when there is no ``loss``), for the updater or a BackwardHook of scepter's."""
        if not isinstance(results, dict):
            raise DataError(f'run_step_{self._mode} must return a dict of outputs, got {type(results).__name__}')
        if self._mode == 'train' and (self.updater.active or 'loss' in results):
            self.step.loss = self.updater.loss_of(results, self.step)
        self.step.outputs = detached_outputs(results)

    def train_forward(self, batch_data: dict[str, Any]) -> dict[str, Any]:
        """The model's train outputs for a batch, under the updater's forward context (no_sync, autocast)."""
        with self.updater.forward_context(self.model, self.step.sync_grads):
            return forward_checked(self.model, batch_data)

    def _eval_forward(self, batch_data: dict[str, Any]) -> dict[str, Any]:
        model = self.unwrapped_model if hasattr(self.model, 'no_sync') else self.model
        with self.updater.autocast():
            return forward_checked(model, batch_data)

    def run_step_eval(self, batch_data: dict[str, Any], batch_idx: int = 0, step: Any = None, rank: Any = None):
        return self._eval_forward(batch_data)

    def run_step_test(self, batch_data: dict[str, Any], batch_idx: int = 0, step: Any = None, rank: Any = None):
        return self._eval_forward(batch_data)

    def predict(self, inputs: dict[str, Any], batch_size: int = 256) -> dict[str, Any]:
        """``{key: numpy array}`` of the model's per-sample outputs for ``inputs`` (a dict of arrays).

        Batched, in eval mode, under ``no_grad``, with the weights evaluation uses (an EMAHook's / SWAHook's average
        where the run has one); the model's mode is restored afterwards.  See ``scepter_like.solver.predict``.
        """
        from scepter_like.solver.predict import solver_predict

        return solver_predict(self, inputs, batch_size)

    def update_metrics(self, batch_data: dict[str, Any], results: dict[str, Any]) -> None:
        """Feed an eval / test step's results to the metrics (none in BaseSolver)."""

    def compute_epoch_outputs(self) -> dict[str, Any]:
        """The flat ``{name: float}`` summary of an eval / test epoch (none in BaseSolver)."""
        return {}

    def metric_names(self, mode: str = 'eval') -> list[str] | None:
        """Names ``epoch_outputs[mode]`` will hold: none in BaseSolver; None (known after a pass) for scepter's
        ``_build_metrics`` entries and for a subclass's own ``run_eval`` / ``run_test``, which fills them itself."""
        return None if self.runs_own_pass(mode) or any(isinstance(m, dict) for m in self.metrics) else []

    def register_flops(self, data: dict[str, Any], keys: list[str] | None = None) -> float:
        """The model's forward FLOPs per sample (fvcore), kept in ``model_flops``: the log then shows FLOP/s.

        ``data`` is a batch dict (cut to its first sample); ``keys`` (all when empty) selects the inputs.
        """
        from scepter_like.utils.flops import register_flops

        return register_flops(self, data, keys)

    # -- checkpoint state ------------------------------------------------------------------------
    def save_checkpoint(self, path: str | None = None) -> dict[str, Any]:
        """The full training state (a dict); with ``path`` also written there atomically (rank 0).

        With a path every rank calls it (the RNG states of all ranks are gathered).  Without one,
        scepter's ``save_checkpoint() -> dict`` (scepter's CheckpointHook calls it on rank 0
        only), it takes no collective and holds this rank's RNG state alone.  A subclass
        overriding it scepter's way decides what CheckpointHook writes (``training_state``).
        """
        ckpt = checkpoint_state.collect_training_state(self, every_rank=path is not None)
        if path is not None:
            checkpoint_state.write_checkpoint(self, ckpt, path)
        return ckpt

    def load_checkpoint(self, checkpoint: Any) -> Any:
        """Restore a checkpoint file's path, or the dict it holds (scepter's ``load_checkpoint(dict)``)."""
        if isinstance(checkpoint, (str, os.PathLike)):
            source, checkpoint = str(checkpoint), checkpoint_state.load_checkpoint_file(checkpoint)
        else:
            source = 'the checkpoint'
        checkpoint_state.restore_training_state(self, checkpoint, source)
        return checkpoint

    def resume(self) -> str | None:
        """Resume from RESUME_FROM (a path, or 'auto': the newest complete checkpoint); returns the path or None."""
        return checkpoint_state.resume(self)

    def close(self) -> None:
        """Write out pending metrics.jsonl lines, detach the log file and release the WORK_DIR lock and the stop
        agreement's process group (the default process group is the caller's).  Called while an exception is being
        handled (the tools' ``finally``), it writes that exception to the log file as what ended the run."""
        self.stop_signals.close()
        if self.metrics_log is not None:
            self.metrics_log.flush()
        close_work_dir_log(self)
        self.run_lock.release()


if TYPE_CHECKING:  # mypy checks that the solver offers every name of the hook surface

    def _offers_the_hook_surface(solver: BaseSolver) -> SolverSurface:
        return solver
