"""BaseSolver: builds everything from the SOLVER config and runs the loop, calling hooks.

::

    solver = SOLVERS.build(cfg.SOLVER, logger=logger)
    solver.set_up_pre()   # environment, work dir, log file, construct_hook
    solver.set_up()       # construct_data / model / metrics, model_to_device, init_opti, resume
    solver.solve()        # before_solve; per epoch solve_train, solve_eval; solve_test; after_solve

The loop's state lives in ``solver.progress`` (``TrainingProgress``: counters, the epoch's
window, accumulation groups, when training ends) and ``solver.step`` (``StepState``: what
the current train step decided and produced).  scepter's names (``epoch``, ``iter``,
``total_iter``, ``epoch_max_iter``, ``loss``, ``iter_outputs``, ...) are views of them.
Hooks change that state only through the methods under "requests from hooks".
"""

import contextlib
import functools
import logging
import os
import time
from collections import OrderedDict

import torch

from scepter_like.data.loader import build_data
from scepter_like.errors import ConfigError, DataError, Preempted
from scepter_like.metric.registry import METRICS
from scepter_like.model.registry import MODELS
from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS
from scepter_like.solver import checkpoint_state
from scepter_like.solver.environment import resolve_env, set_up_environment
from scepter_like.solver.loop_state import MODES, StepState, TrainingProgress, detached_outputs
from scepter_like.solver.parallel import PARALLEL_MODES, eval_context, wrap_model
from scepter_like.solver.predict import forward_checked
from scepter_like.solver.preemption import StopSignals
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.run_records import open_work_dir, run_summary, write_run_records
from scepter_like.solver.stages import StageTable, add_required_hooks, build_hooks, settle_loop_settings
from scepter_like.utils.checkpoint import load_state_dict_checked, load_weights_file, unwrap_model

DATA_KEYS = {'train': 'TRAIN_DATA', 'eval': 'EVAL_DATA', 'test': 'TEST_DATA'}
_NULL_CONTEXT = contextlib.nullcontext()


def _view(holder, name, doc=None, settable=True):
    """A solver property that reads (and sets) ``solver.<holder>.<name>``: one home per fact."""

    def get(solver):
        return getattr(getattr(solver, holder), name)

    def set_(solver, value):
        setattr(getattr(solver, holder), name, value)

    return property(get, set_ if settable else None, doc=doc)


def _describe(value):
    return f'a tensor of shape {list(value.shape)}' if isinstance(value, torch.Tensor) else type(value).__name__


def _stage(stage):
    """A stage method: calls the current mode's hooks of ``stage``, or the given ``hooks`` in their order."""

    def call(solver, hooks=None):
        solver._call(stage, hooks)

    call.__name__ = call.__qualname__ = stage
    return call


@SOLVERS.register_class()
class BaseSolver:
    para_dict = {
        'FILE_SYSTEM': {'value': None, 'description': 'accepted for scepter configs; files are always local'},
        'WORK_DIR': {'value': './work_dir', 'description': 'folder for logs, checkpoints and run records'},
        'LOG_FILE': {'value': 'std_log.txt', 'description': 'log file name inside WORK_DIR'},
        'RESUME_FROM': {'value': '', 'description': "checkpoint to resume from; 'auto': the newest in WORK_DIR"},
        'MAX_EPOCHS': {'value': 10, 'description': 'training epochs', 'min': 1},
        'MAX_STEPS': {'value': 0, 'description': 'stop after this many train steps (0: no limit)', 'min': 0},
        'ACCU_STEP': {'value': 1, 'description': 'gradient accumulation (= BackwardHook.ACCUMULATE_STEP)', 'min': 1},
        'NUM_FOLDS': {'value': 1, 'description': 'epochs per pass over the train data', 'min': 1},
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
        'PARALLEL': {'value': 'ddp', 'description': 'data parallelism when WORLD_SIZE > 1', 'choices': PARALLEL_MODES},
        'FIND_UNUSED_PARAMETERS': {'value': False, 'description': 'DDP find_unused_parameters'},
        'CODE_SNAPSHOT': {'value': True, 'description': 'save git diffs to WORK_DIR/code_snapshot/ (in a git tree)'},
    }

    STEPS_OPTIMIZER_ITSELF = False  # a subclass whose run_step_train steps the optimizer: no BackwardHook added

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger or logging.getLogger('scepter_like')
        self.work_dir = cfg.WORK_DIR
        self.log_file = os.path.join(self.work_dir, cfg.LOG_FILE) if cfg.LOG_FILE else ''
        self.resume_from = cfg.RESUME_FROM
        self.extra_keys = list(cfg.EXTRA_KEYS)
        self.loss_weights = dict(cfg.LOSS_WEIGHTS)
        self.progress = TrainingProgress(cfg.MAX_EPOCHS, cfg.MAX_STEPS, cfg.NUM_FOLDS, cfg.EVAL_INTERVAL)
        self.step = StepState()
        self.stop_signals = StopSignals()  # installed while solve() runs
        self._mode = 'train'

        self.env_cfg = None
        self.dist_info = None
        self.seed = 0
        self.autocast_dtype = None  # settled from the hooks' loop_settings
        self.stop_on_nonfinite_loss = False  # likewise: a NaN / inf in a log line's loss ends the run
        self.failed = None  # the exception that ended solve(), for after_solve hooks
        self.data_time = 0.0
        self.model_flops = None  # forward FLOPs per sample, set by register_flops
        self._probes = {}

        self.datas = {}
        self.hooks_dict = {mode: [] for mode in MODES}
        self._hook_keys = {}
        self.stages = None  # StageTable, once the hooks are built
        self.model = None
        self.optimizer = None
        self.lr_scheduler = None
        self.metrics = []
        self.epoch_outputs = {}
        self._file_handler = None
        self.metrics_log = None  # rank 0: WORK_DIR/metrics.jsonl
        self.resumed_from = None

    # -- set-up -------------------------------------------------------------------------------
    def set_up_pre(self):
        """Environment (seed, process group, device), work dir, log file, hooks."""
        self.env_cfg = resolve_env(self.cfg)
        self.dist_info = set_up_environment(self.env_cfg)
        self.seed = self.env_cfg.SEED
        if self.is_main:
            self._file_handler, self.metrics_log = open_work_dir(self)
        self.construct_hook()

    def set_up(self):
        """Data, model, metrics, device placement, optimizer; resume if asked; then the run records."""
        self.construct_data()
        self.construct_model()
        self.construct_metrics()
        self.model_to_device()
        self.init_opti()
        # rank r draws its own random stream from here on (dropout, augmentation)
        torch.manual_seed(self.seed + self.rank)
        self.resumed_from = self.resume()

    def construct_hook(self):
        add_required_hooks(self.cfg, self.logger, self.STEPS_OPTIMIZER_ITSELF)
        self.hooks_dict, self._hook_keys = build_hooks(self.cfg, self.logger)
        self.stages = StageTable(self.hooks_dict)
        settings = settle_loop_settings(self.cfg, self.hooks_dict['train'])
        self.progress.accumulate_steps = settings['accumulate_steps']
        self.autocast_dtype = settings['autocast_dtype']
        self.stop_on_nonfinite_loss = settings['stop_on_nonfinite_loss']

    def hooks_by_key(self):
        """Every hook under a stable key ``mode.index.ClassName`` (used for checkpoint state)."""
        return self._hook_keys

    def get_hooks_info(self):
        """The resolved hook order of every stage, one line per mode and stage."""
        return self.stages.describe()

    def stage_functions(self, stage, mode=None):
        """The functions that run at ``stage`` of ``mode`` (of every mode when None: the checkpoint stages)."""
        return self.stages.every_mode(stage) if mode is None else self.stages.functions(mode, stage)

    def construct_data(self):
        """Build each mode's data; every mode's ``epoch_max_iter`` is known from here on."""
        progress = self.progress
        for mode in MODES:
            data_cfg = self.cfg[DATA_KEYS[mode]]
            if data_cfg is not None:
                self.datas[mode] = build_data(data_cfg, mode, self.dist_info, self.seed, logger=self.logger)
                progress.epoch_iters[mode] = self.datas[mode].num_batches()
        if 'train' in self.datas:
            pass_batches = self.datas['train'].num_batches()
            if pass_batches < progress.num_folds:
                raise ConfigError(
                    f'{self.cfg.path_of("NUM_FOLDS")}: {progress.num_folds} folds of a pass of {pass_batches}'
                    ' batches would leave epochs without a batch; use fewer folds'
                )
            start, stop = progress.fold_window(pass_batches)
            progress.epoch_iters['train'] = stop - start

    def construct_model(self):
        if self.cfg.MODEL is None:
            raise ConfigError(f'{self.cfg.path_of("MODEL")}: the solver needs a MODEL config with a NAME')
        self.model = MODELS.build(self.cfg.MODEL, logger=self.logger)
        pretrained = self.cfg.MODEL.get('PRETRAINED_MODEL')
        if pretrained:
            state = load_weights_file(pretrained)
            strict = self.cfg.MODEL.get('PRETRAINED_STRICT', True)
            missing, unexpected = load_state_dict_checked(self.model, state, pretrained, strict=strict)
            self.logger.info(
                f'loaded pretrained weights from {pretrained}'
                + (f' ({len(missing)} missing, {len(unexpected)} unexpected keys)' if missing or unexpected else '')
            )

    def construct_metrics(self):
        entries = self.cfg.METRICS or []
        if not isinstance(entries, list):
            raise ConfigError(f'{self.cfg.path_of("METRICS")}: expected a list of metric configs')
        self.metrics = [METRICS.build(entry, logger=self.logger) for entry in entries]

    def model_to_device(self, tg_model_ins=None):
        """Move to this rank's device and wrap for DDP; returns the result when given a model."""
        model = self.model if tg_model_ins is None else tg_model_ins
        wrapped = wrap_model(model, self.dist_info, self.cfg.PARALLEL, self.cfg.FIND_UNUSED_PARAMETERS)
        if tg_model_ins is not None:
            return wrapped
        self.model = wrapped
        return None

    def init_opti(self):
        if self.cfg.OPTIMIZER is not None:
            params = [p for p in unwrap_model(self.model).parameters() if p.requires_grad]
            self.optimizer = OPTIMIZERS.build(self.cfg.OPTIMIZER, logger=self.logger, params=params)
        if self.cfg.LR_SCHEDULER is not None:
            if self.optimizer is None:
                raise ConfigError(f'{self.cfg.path_of("LR_SCHEDULER")}: an LR scheduler needs an OPTIMIZER')
            self.lr_scheduler = LR_SCHEDULERS.build(self.cfg.LR_SCHEDULER, logger=self.logger, optimizer=self.optimizer)

    # -- views of the loop's state (scepter's names) ------------------------------------------------
    epoch = _view('progress', 'epoch', 'The current epoch, 0-based.')
    total_iter = _view('progress', 'total_iter', 'Train steps done (this step counted from its after_iter on).')
    max_epochs = _view('progress', 'max_epochs')
    max_steps = _view('progress', 'max_steps', settable=False)
    num_folds = _view('progress', 'num_folds', settable=False)
    optimizer_steps = _view('progress', 'optimizer_steps', settable=False)
    accumulate_steps = _view('progress', 'accumulate_steps', settable=False)
    last_eval_epoch = _view(
        'progress', 'last_eval_epoch', 'The epoch whose evaluation epoch_outputs["eval"] holds.', False
    )
    loss = _view(
        'step', 'loss', "This step's training loss until BackwardHook uses it (scepter's hooks set it to None)."
    )
    iter_outputs = _view('step', 'outputs', "This step's outputs, detached.")
    sync_grads = _view('step', 'sync_grads', settable=False)
    in_accumulation = _view('step', 'in_accumulation', settable=False)

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = mode
        if self.model is not None:
            self.model.train(mode == 'train')

    @property
    def iter(self):
        """Steps done in the current mode's epoch."""
        return self.progress.iters[self._mode]

    @iter.setter
    def iter(self, value):
        self.progress.iters[self._mode] = value

    @property
    def epoch_max_iter(self):
        return self.progress.epoch_iters[self._mode]

    @property
    def stop_requested(self):
        return self.progress.stop_reason is not None

    @property
    def rank(self):
        return self.dist_info.rank if self.dist_info else 0

    @property
    def world_size(self):
        return self.dist_info.world_size if self.dist_info else 1

    @property
    def is_main(self):
        return self.rank == 0

    @property
    def device(self):
        return self.dist_info.device if self.dist_info else torch.device('cpu')

    @functools.cached_property
    def config_text(self):
        """The run's whole config as YAML, for checkpoint and export metadata (dumped once per run)."""
        return self.cfg.root.dump()

    @property
    def unwrapped_model(self):
        return unwrap_model(self.model)

    @property
    def batch_size(self):
        """Per-rank batch size of the current mode's data (0 without data)."""
        bundle = self.datas.get(self._mode)
        return bundle.batch_size if bundle else 0

    def train_finished(self):
        return self.progress.train_finished()

    # -- requests from hooks ------------------------------------------------------------------------
    def request_stop(self, reason):
        """End training at the next step boundary (the current step, evaluation and checkpoints complete)."""
        if self.progress.stop_reason is None:
            self.progress.stop_reason = reason

    def request_probes(self):
        """Keep what ``register_probe`` is given during the current step (ProbeDataHook dumps it)."""
        self.step.probe_wanted = True

    def log_scalar(self, name, value):
        """Add a scalar (a 0-dim tensor or a number) to this step's outputs: LogHook and TensorBoard show it."""
        self.step.outputs[name] = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(float(value))

    # -- the loop -------------------------------------------------------------------------------
    def solve(self, epoch=None, every_epoch=False):
        """Train for MAX_EPOCHS (``epoch`` overrides it), evaluating every EVAL_INTERVAL; test at the end.

        ``every_epoch=True`` also runs the test data after every epoch.
        """
        if epoch is not None:
            self.max_epochs = epoch
        self.failed = None
        if not self.resumed_from and 'train' in self.datas:
            checkpoint_state.refuse_to_mix_runs(self)
        if self.is_main:  # a training run starts: config.yaml, env.json, code_snapshot/ (run_records.py)
            write_run_records(self, self.resumed_from, code_snapshot=self.cfg.CODE_SNAPSHOT)
            self.metrics_log.write_start(self, self.resumed_from)
        progress = self.progress
        self.before_solve()
        self.stages.rebuild()  # hooks settled their configuration in before_solve
        self.logger.info(run_summary(self))
        done = progress.epochs_completed() >= self.max_epochs or 0 < self.max_steps <= self.total_iter
        if self.resumed_from and done:
            self.logger.warning(
                f'{self.resumed_from} ends a finished run (step {self.total_iter}, MAX_EPOCHS {self.max_epochs},'
                f' MAX_STEPS {self.max_steps}): nothing is left to train; only evaluation and test run'
            )
        self.logger.info('hook order per stage:\n' + self.get_hooks_info())
        try:
            with self.stop_signals:
                if progress.epoch_finished:  # resumed between an epoch and its evaluation
                    if self._eval_due():  # (it may no longer be due, e.g. with another EVAL_INTERVAL)
                        self.solve_eval()
                    progress.next_epoch()
                while 'train' in self.datas and not progress.train_finished():
                    self.solve_train()
                    if progress.stop_signal:
                        raise self._preempted()
                    if self._eval_due():
                        self.solve_eval()
                    if every_epoch and 'test' in self.datas:
                        self.solve_test()
                    if progress.epoch_finished:  # not when MAX_STEPS or a stop cut the epoch short
                        progress.next_epoch()
                if 'test' in self.datas and not every_epoch:
                    self.solve_test()
        except BaseException as e:
            self.failed = e
            raise
        finally:
            self.after_solve()

    def _preempted(self):
        """Write the checkpoint of a signalled stop (every rank), mark it latest; the exception to raise."""
        from scepter_like.utils.checkpoint import CHECKPOINT_DIR, write_latest_pointer

        name = f'preempted-step-{self.total_iter}.pth'
        folder = os.path.join(self.work_dir, CHECKPOINT_DIR)
        if self.is_main:
            os.makedirs(folder, exist_ok=True)
        self.save_checkpoint(os.path.join(folder, name))
        if self.is_main:
            write_latest_pointer(folder, name)
        stop = Preempted(self.progress.stop_signal, self.total_iter, os.path.join(folder, name))
        self.logger.warning(str(stop))
        return stop

    def _eval_due(self):
        return 'eval' in self.datas and self.progress.eval_due()

    def solve_train(self):
        self.mode = 'train'
        # each pass over the data shuffles anew, whatever the hooks (DistSamplerHook makes the same call)
        self.datas['train'].sampler.set_epoch(self.progress.pass_index)
        self.before_epoch()
        self.run_train()
        self.after_epoch()

    def solve_eval(self):
        self._solve_no_grad('eval')
        self.progress.last_eval_epoch = self.epoch

    def solve_test(self):
        self._solve_no_grad('test')

    def _solve_no_grad(self, mode):
        if mode not in self.datas:
            return
        previous = self._mode
        self.mode = mode
        self.progress.iters[mode] = 0
        try:
            with torch.no_grad(), eval_context(self.model):
                self.before_epoch()
                self.run_eval() if mode == 'eval' else self.run_test()
                self.after_epoch()
        finally:
            self.mode = previous

    def run_train(self):
        progress, step = self.progress, self.step
        bundle = self.datas['train']
        first, stop = progress.start_train_epoch(bundle.num_batches())
        self.before_all_iter()
        batches = bundle.iterate(first, stop) if first < stop else iter(())
        run_step, before_iter, after_iter = self.run_step_train, self.before_iter, self.after_iter
        rank, to_device = self.rank, self.device.type != 'cpu'
        accumulating, counts_optimizer_steps = progress.accumulate_steps > 1, self.optimizer is not None
        signals, device = self.stop_signals, self.device
        t0 = time.perf_counter()
        for batch_idx, batch in enumerate(batches, progress.iters['train']):
            self.data_time = time.perf_counter() - t0
            if to_device:
                batch = self.transfer_data_to_device(batch)
            if accumulating:
                step.begin(*progress.accumulation_group())
            else:
                step.begin()
            before_iter()
            run_step(batch, batch_idx, progress.total_iter, rank)
            progress.iters['train'] += 1
            progress.total_iter += 1
            if step.steps_optimizer and counts_optimizer_steps:
                progress.optimizer_steps += 1
            after_iter()
            if step.steps_optimizer:  # a stop signal takes effect between optimizer steps, on every rank
                progress.stop_signal = signals.agreed(device)
                if progress.stop_signal:
                    self.request_stop(f'signal {progress.stop_signal}')
            if progress.stop_reason is not None:
                break
            t0 = time.perf_counter()
        progress.finish_train_epoch()
        self.after_all_iter()

    def _run_no_grad_loop(self, step_fn):
        bundle = self.datas[self._mode]
        self.progress.epoch_iters[self._mode] = bundle.num_batches()
        self.before_all_iter()
        to_device = self.device.type != 'cpu'
        for batch_idx, batch in enumerate(bundle.iterate()):
            if to_device:
                batch = self.transfer_data_to_device(batch)
            self.step.begin()
            self.before_iter()
            step_fn(batch, batch_idx, self.total_iter, self.rank)
            self.iter += 1
            self.after_iter()
        self.epoch_outputs[self._mode] = self.compute_epoch_outputs()
        if self.metrics_log is not None:
            self.metrics_log.write_epoch_outputs(self, self._mode)
        self.after_all_iter()

    def run_eval(self):
        self._run_no_grad_loop(self.run_step_eval)

    def run_test(self):
        self._run_no_grad_loop(self.run_step_test)

    def transfer_data_to_device(self, batch):
        device = self.device
        return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def forward_context(self):
        """What a train forward runs under: DDP's ``no_sync`` on accumulation micro-steps and autocast under AMP.

        ``no_sync`` only needs the forward: it decides whether the backward that follows
        all-reduces the gradients.  Without either, one shared null context.
        """
        no_sync = not self.step.sync_grads and hasattr(self.model, 'no_sync')
        if not no_sync and self.autocast_dtype is None:
            return _NULL_CONTEXT
        stack = contextlib.ExitStack()
        if no_sync:
            stack.enter_context(self.model.no_sync())
        stack.enter_context(self.autocast())
        return stack

    def autocast(self):
        if self.autocast_dtype is None:
            return _NULL_CONTEXT
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
        """Forward one batch; leaves the loss in ``self.step.loss`` for BackwardHook."""
        with self.forward_context():
            results = forward_checked(self.model, batch_data)
        self.step.loss = self.total_loss(results)
        self.step.outputs = detached_outputs(results)
        return results

    def total_loss(self, results):
        """``results['loss']`` (a dict's), else its ``loss_*`` terms summed with LOSS_WEIGHTS (1.0 by default).

        The summed loss is put back into ``results['loss']`` so it is logged beside its terms.
        """
        loss = results.get('loss')
        if loss is not None:
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise DataError(f"the model's 'loss' must be a scalar tensor, got {_describe(loss)}; reduce it (mean)")
            return loss
        terms = {k: v for k, v in results.items() if k.startswith('loss_')}
        if not terms:
            raise DataError(f"the model returned no 'loss' (nor 'loss_*' terms) in train mode: {sorted(results)}")
        unknown = [k for k in self.loss_weights if k not in terms]
        if unknown:
            raise ConfigError(
                f'{self.cfg.path_of("LOSS_WEIGHTS")}: the model returns no {unknown}; its terms are {sorted(terms)}'
            )
        loss = results['loss'] = sum(v * self.loss_weights.get(k, 1.0) for k, v in terms.items())
        return loss

    def _eval_forward(self, batch_data):
        model = self.unwrapped_model if hasattr(self.model, 'no_sync') else self.model
        with self.autocast():
            results = forward_checked(model, batch_data)
        self.step.outputs = detached_outputs(results)
        return results

    def run_step_eval(self, batch_data, batch_idx=0, step=None, rank=None):
        return self._eval_forward(batch_data)

    def run_step_test(self, batch_data, batch_idx=0, step=None, rank=None):
        return self._eval_forward(batch_data)

    def predict(self, inputs, batch_size=256):
        """``{key: numpy array}`` of the model's per-sample outputs for ``inputs`` (a dict of arrays).

        Batched, in eval mode, under ``no_grad``; the model's mode is restored afterwards.
        See ``scepter_like.solver.predict``.
        """
        from scepter_like.solver.predict import predict

        return predict(self.unwrapped_model, inputs, batch_size, self.device, self.autocast)

    def compute_epoch_outputs(self):
        """The flat ``{name: float}`` summary of an eval / test epoch (none in BaseSolver)."""
        return {}

    def metric_names(self, mode='eval'):
        """Names ``epoch_outputs[mode]`` will hold (none in BaseSolver, which computes no metrics)."""
        return []

    # -- stages: each calls the current mode's hooks, or ``hooks`` in their order (scepter's form) --
    def _call(self, stage, hooks=None):
        fns = self.stages.functions(self._mode, stage) if hooks is None else [getattr(h, stage) for h in hooks]
        for fn in fns:
            fn(self)

    def after_solve(self, hooks=None):
        """Every hook's after_solve runs (they finish writes) even when one fails; the first error is raised.

        After a training error (which ``solve`` re-raises) their errors only go to the log.
        """
        errors = []
        fns = self.stages.functions(self._mode, 'after_solve') if hooks is None else [h.after_solve for h in hooks]
        for fn in fns:
            try:
                fn(self)
            except Exception as e:
                errors.append(e)
        try:  # the train lines metrics.jsonl holds
            if self.metrics_log is not None:
                self.metrics_log.flush()
        except OSError as e:
            errors.append(e)
        first = errors.pop(0) if errors and self.failed is None else None
        for e in errors:
            self.logger.error('after_solve failed after an earlier error', exc_info=e)
        if first is not None:
            raise first

    before_solve = _stage('before_solve')
    before_epoch = _stage('before_epoch')
    after_epoch = _stage('after_epoch')
    before_all_iter = _stage('before_all_iter')
    after_all_iter = _stage('after_all_iter')
    before_iter = _stage('before_iter')
    after_iter = _stage('after_iter')
    after_backward = _stage('after_backward')  # BackwardHook calls it, between backward and optimizer step

    def collect_log_vars(self):
        """Scalars of this step for the log: the model's scalar outputs and the learning rate."""
        ret = OrderedDict((k, v) for k, v in self.iter_outputs.items() if v.dim() == 0)
        if self.optimizer is not None:
            ret['lr'] = self.optimizer.param_groups[0]['lr']
        return ret

    # -- probes: data a step hands to ProbeDataHook ----------------------------------------------
    def register_probe(self, probe_data):
        """Keep ``{name: value}`` of this step for ProbeDataHook; a no-op on steps it does not dump."""
        if self.step.probe_wanted:
            self._probes.update(probe_data)

    def pop_probes(self):
        """This step's probes, handed over once (the store is emptied)."""
        probes, self._probes = self._probes, {}
        return probes

    def register_flops(self, data, keys=None):
        """Count the model's forward FLOPs per sample with fvcore; stored in ``self.model_flops``.

        ``data`` is a batch dict; each value is cut to its first element along the batch dim,
        and ``keys`` (all when empty) selects the model inputs.  The log then shows FLOP/s.
        """
        from scepter_like.utils.flops import count_flops, first_sample, format_flops

        inputs = first_sample(data, keys or [])
        if self.device.type != 'cpu':
            inputs = self.transfer_data_to_device(inputs)
        self.model_flops = count_flops(self.unwrapped_model, inputs)
        self.logger.info(f'model FLOPs per sample (fvcore, multiply-add = 1): {format_flops(self.model_flops)}')
        return self.model_flops

    # -- callbacks: plain functions called with the solver after the stage's hooks ----------------
    def register_stage_callback(self, stage, fn, mode='train'):
        """Call ``fn(solver)`` at ``stage`` of ``mode`` after that stage's hooks, in registration order."""
        self.stages.add_callback(mode, stage, fn)

    def register_callback_on_epoch_begin(self, fn):
        self.register_stage_callback('before_epoch', fn)

    def register_callback_on_epoch_end(self, fn):
        self.register_stage_callback('after_epoch', fn)

    def register_callback_on_iter_begin(self, fn):
        self.register_stage_callback('before_iter', fn)

    def register_callback_on_iter_end(self, fn):
        self.register_stage_callback('after_iter', fn)

    # -- checkpoint state ------------------------------------------------------------------------
    def save_checkpoint(self, path):
        """Collect the full state (all ranks) and write it atomically (rank 0)."""
        from scepter_like.utils.checkpoint import atomic_torch_save

        ckpt = checkpoint_state.collect_training_state(self)
        if self.is_main:
            atomic_torch_save(ckpt, path)
        return ckpt

    def load_checkpoint(self, path):
        ckpt = checkpoint_state.load_checkpoint_file(path)
        checkpoint_state.restore_training_state(self, ckpt, path)
        return ckpt

    def resume(self):
        """Resume from RESUME_FROM: a path, or 'auto' for the newest complete checkpoint in WORK_DIR."""
        path = checkpoint_state.resume_path(self)
        if path is None:
            return None
        self.load_checkpoint(path)
        self.logger.info(
            f'resumed from {path} at epoch {self.epoch}, iter {self.progress.iters["train"]}, step {self.total_iter}'
        )
        return path

    def close(self):
        """Write out pending metrics.jsonl lines and detach the log file (the process group is the caller's)."""
        if self.metrics_log is not None:
            self.metrics_log.flush()
        if self._file_handler is not None:
            self.logger.removeHandler(self._file_handler)
            self._file_handler.close()
            self._file_handler = None
