"""BaseSolver: builds everything from the SOLVER config and runs the loop, calling hooks.

::

    solver = SOLVERS.build(cfg.SOLVER, logger=logger)
    solver.set_up_pre()   # environment, work dir, log file, construct_hook
    solver.set_up()       # construct_data / model / metrics, model_to_device, init_opti, resume
    solver.solve()        # before_solve; per epoch solve_train, solve_eval; solve_test; after_solve

Counters a hook may read: ``epoch`` (0-based, current), ``iter`` (steps completed in
this mode's epoch), ``total_iter`` (train steps completed), ``epoch_max_iter``.
"""

import contextlib
import functools
import logging
import os
import time
from collections import OrderedDict

import torch

from scepter_like.data.loader import build_data
from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.registry import METRICS
from scepter_like.model.registry import MODELS
from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS
from scepter_like.solver import state as training_state
from scepter_like.solver.environment import resolve_env, set_up_environment
from scepter_like.solver.hooks.hook import STAGES, Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.parallel import eval_context, wrap_model
from scepter_like.solver.predict import forward_checked
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.run_records import write_run_records
from scepter_like.utils.checkpoint import load_state_dict_checked, load_weights_file, unwrap_model
from scepter_like.utils.distributed import all_gather_object, broadcast_object
from scepter_like.utils.logger import add_file_handler
from scepter_like.utils.metrics_log import METRICS_FILE, MetricsLog

MODES = ('train', 'eval', 'test')
_DATA_KEYS = {'train': 'TRAIN_DATA', 'eval': 'EVAL_DATA', 'test': 'TEST_DATA'}
_HOOK_KEYS = {'train': 'TRAIN_HOOKS', 'eval': 'EVAL_HOOKS', 'test': 'TEST_HOOKS'}
_NULL_CONTEXT = contextlib.nullcontext()


@SOLVERS.register_class()
class BaseSolver:
    para_dict = {
        'FILE_SYSTEM': {'value': None, 'description': 'accepted for scepter configs; files are always local'},
        'WORK_DIR': {'value': './work_dir', 'description': 'folder for logs, checkpoints and run records'},
        'LOG_FILE': {'value': 'std_log.txt', 'description': 'log file name inside WORK_DIR'},
        'RESUME_FROM': {'value': '', 'description': "checkpoint to resume from; 'auto': the newest in WORK_DIR"},
        'MAX_EPOCHS': {'value': 10, 'description': 'training epochs'},
        'MAX_STEPS': {'value': 0, 'description': 'stop after this many train steps (0: no limit)'},
        'ACCU_STEP': {
            'value': 1,
            'description': 'gradient accumulation steps (same knob as BackwardHook.ACCUMULATE_STEP)',
        },
        'NUM_FOLDS': {'value': 1, 'description': 'split each pass over the train data into this many epochs'},
        'EVAL_INTERVAL': {'value': 1, 'description': 'evaluate every this many epochs (and after the last)'},
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
        'PARALLEL': {'value': 'ddp', 'description': "data parallelism when WORLD_SIZE > 1: 'ddp' | 'fsdp' (FSDP2)"},
        'FIND_UNUSED_PARAMETERS': {'value': False, 'description': 'DDP find_unused_parameters'},
        'CODE_SNAPSHOT': {'value': True, 'description': 'save git diffs to WORK_DIR/code_snapshot/ (in a git tree)'},
    }

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger or logging.getLogger('scepter_like')
        self.work_dir = cfg.WORK_DIR
        self.log_file = os.path.join(self.work_dir, cfg.LOG_FILE) if cfg.LOG_FILE else ''
        self.resume_from = cfg.RESUME_FROM
        self.max_epochs = cfg.MAX_EPOCHS
        self.max_steps = cfg.MAX_STEPS
        self.accu_step = cfg.ACCU_STEP
        self.num_folds = cfg.NUM_FOLDS
        self.eval_interval = cfg.EVAL_INTERVAL
        self.extra_keys = list(cfg.EXTRA_KEYS)
        self.loss_weights = dict(cfg.LOSS_WEIGHTS)
        for key in ('MAX_EPOCHS', 'ACCU_STEP', 'NUM_FOLDS', 'EVAL_INTERVAL'):
            if cfg[key] < 1:
                raise ConfigError(f'{cfg.path_of(key)}: must be at least 1, got {cfg[key]}')
        if self.max_steps < 0:
            raise ConfigError(f'{cfg.path_of("MAX_STEPS")}: must be 0 (no limit) or positive, got {self.max_steps}')

        self.env_cfg = None
        self.dist_info = None
        self.seed = 0
        self._mode = 'train'
        self.epoch = 0
        self.total_iter = 0
        self._iter = dict.fromkeys(MODES, 0)
        self._epoch_max_iter = dict.fromkeys(MODES, 0)
        self._train_epoch_finished = False
        self._eval_done_epoch = -1
        self.optimizer_steps = 0
        self.accumulate_steps = 1
        self.in_accumulation = False
        self.sync_grads = True
        self.autocast_dtype = None
        self.stop_requested = False
        self.failed = None
        self.data_time = 0.0
        self.probe_wanted = False  # set by ProbeDataHook for the steps whose probes it dumps
        self._probes = {}
        self.model_flops = None  # forward FLOPs per sample, set by register_flops

        self.datas = {}
        self.hooks_dict = {mode: [] for mode in MODES}
        self._hook_keys = {}
        self._stages = {}
        self._callbacks = {mode: {stage: [] for stage in STAGES} for mode in MODES}
        self.model = None
        self.optimizer = None
        self.lr_scheduler = None
        self.metrics = []
        self.loss = None
        self.iter_outputs = {}
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
            try:
                os.makedirs(self.work_dir, exist_ok=True)
            except OSError as e:
                raise ConfigError(
                    f'{self.cfg.path_of("WORK_DIR")}: cannot create {self.work_dir} ({e.strerror})'
                ) from None
            if self.log_file:
                self._file_handler = add_file_handler(self.logger, self.log_file)
            self.metrics_log = MetricsLog(os.path.join(self.work_dir, METRICS_FILE))
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
        for mode in MODES:
            entries = self.cfg[_HOOK_KEYS[mode]] or []
            if not isinstance(entries, list):
                raise ConfigError(f'{self.cfg.path_of(_HOOK_KEYS[mode])}: expected a list of hook configs')
            hooks = [HOOKS.build(entry, logger=self.logger) for entry in entries]
            for index, hook in enumerate(hooks):
                self._hook_keys[f'{mode}.{index}.{type(hook).__name__}'] = hook
            # stable sort: equal priorities keep config order
            self.hooks_dict[mode] = sorted(hooks, key=lambda h: h.priority)
        self._build_stage_table()

    def _build_stage_table(self):
        """Per mode and stage, the bound methods to call: only hooks that implement the stage."""
        every = sorted((h for mode in MODES for h in self.hooks_dict[mode]), key=lambda h: h.priority)
        self._stages = {}
        for mode in MODES:
            for stage in STAGES:
                hooks = every if stage in ('before_solve', 'after_solve') else self.hooks_dict[mode]
                fns = [getattr(h, stage) for h in hooks if h.implements(stage)]
                self._stages[(mode, stage)] = fns + self._callbacks[mode][stage]

    def get_hooks_info(self):
        """The resolved hook order of every stage, one line per mode and stage."""
        lines = []
        for mode in MODES:
            for stage in STAGES:
                hooks = [
                    f'{type(fn.__self__).__name__}({fn.__self__.priority})'
                    for fn in self._stages[(mode, stage)]
                    if isinstance(getattr(fn, '__self__', None), Hook)
                ]
                if hooks and not (mode != 'train' and stage in ('before_solve', 'after_solve')):
                    lines.append(f'  {mode:5s} {stage:22s} ' + ' -> '.join(hooks))
        return '\n'.join(lines) or '  (no hooks)'

    def hooks_by_key(self):
        """Every hook under a stable key ``mode.index.ClassName`` (used for checkpoint state)."""
        return self._hook_keys

    def stage_functions(self, stage, mode=None):
        """The hook methods that run at ``stage`` (every mode's hooks for checkpoint stages)."""
        if mode is None:
            seen, out = set(), []
            for m in MODES:
                for fn in self._stages[(m, stage)]:
                    if id(fn) not in seen:
                        seen.add(id(fn))
                        out.append(fn)
            return out
        return self._stages[(mode, stage)]

    def construct_data(self):
        for mode in MODES:
            data_cfg = self.cfg[_DATA_KEYS[mode]]
            if data_cfg is not None:
                self.datas[mode] = build_data(data_cfg, mode, self.dist_info, self.seed, logger=self.logger)
        if 'train' in self.datas and self.datas['train'].num_batches() < self.num_folds:
            raise ConfigError(
                f'{self.cfg.path_of("NUM_FOLDS")}: {self.num_folds} folds of a pass of'
                f' {self.datas["train"].num_batches()} batches would leave epochs without a batch; use fewer folds'
            )

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

    # -- properties hooks read ------------------------------------------------------------------
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
        return self._iter[self._mode]

    @iter.setter
    def iter(self, value):
        self._iter[self._mode] = value

    @property
    def epoch_max_iter(self):
        return self._epoch_max_iter[self._mode]

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
        return (
            self.stop_requested
            or self.epoch >= self.max_epochs
            or (self.max_steps > 0 and self.total_iter >= self.max_steps)
        )

    # -- the loop -------------------------------------------------------------------------------
    def solve(self, epoch=None, every_epoch=False):
        """Train for MAX_EPOCHS (``epoch`` overrides it), evaluating every EVAL_INTERVAL; test at the end.

        ``every_epoch=True`` also runs the test data after every epoch.
        """
        if epoch is not None:
            self.max_epochs = epoch
        self.failed = None
        if self.is_main:  # a training run starts: config.yaml, env.json, code_snapshot/ (run_records.py)
            write_run_records(self, self.resumed_from, code_snapshot=self.cfg.CODE_SNAPSHOT)
            self.metrics_log.write_start(self, self.resumed_from)
        self.before_solve()
        self._build_stage_table()  # hooks settled their configuration in before_solve
        self.logger.info('hook order per stage:\n' + self.get_hooks_info())
        try:
            if self._train_epoch_finished:  # resumed between an epoch and its evaluation
                if self._eval_due():  # (it may no longer be due, e.g. with another EVAL_INTERVAL)
                    self.solve_eval()
                self._next_epoch()
            while 'train' in self.datas and not self.train_finished():
                self.solve_train()
                if self._eval_due():
                    self.solve_eval()
                if every_epoch and 'test' in self.datas:
                    self.solve_test()
                if self._train_epoch_finished:  # not when MAX_STEPS or a stop cut the epoch short
                    self._next_epoch()
            if 'test' in self.datas and not every_epoch:
                self.solve_test()
        except BaseException as e:
            self.failed = e
            raise
        finally:
            self.after_solve()

    def _eval_due(self):
        if 'eval' not in self.datas or self._eval_done_epoch == self.epoch:
            return False
        return (self.epoch + 1) % self.eval_interval == 0 or self.epoch + 1 >= self.max_epochs or self.train_finished()

    @property
    def last_eval_epoch(self):
        """The epoch (0-based) whose evaluation produced ``epoch_outputs['eval']`` (-1: none yet)."""
        return self._eval_done_epoch

    def _next_epoch(self):
        self.epoch += 1
        self._iter['train'] = 0
        self._train_epoch_finished = False

    def solve_train(self):
        self.mode = 'train'
        self.before_epoch()
        self.run_train()
        self.after_epoch()

    def solve_eval(self):
        self._solve_no_grad('eval')
        self._eval_done_epoch = self.epoch

    def solve_test(self):
        self._solve_no_grad('test')

    def _solve_no_grad(self, mode):
        if mode not in self.datas:
            return
        previous = self._mode
        self.mode = mode
        self._iter[mode] = 0
        try:
            with torch.no_grad(), eval_context(self.model):
                self.before_epoch()
                self.run_eval() if mode == 'eval' else self.run_test()
                self.after_epoch()
        finally:
            self.mode = previous

    def _fold_window(self, bundle):
        """Batches [start, stop) of the current pass that this epoch (fold) covers."""
        n = bundle.num_batches()
        fold = self.epoch % self.num_folds
        return fold * n // self.num_folds, (fold + 1) * n // self.num_folds

    def run_train(self):
        bundle = self.datas['train']
        start, stop = self._fold_window(bundle)
        self._epoch_max_iter['train'] = stop - start
        first = start + self._iter['train']
        if self.max_steps > 0:
            stop = min(stop, first + self.max_steps - self.total_iter)
        self.before_all_iter()
        batches = bundle.iterate(first, stop) if first < stop else iter(())
        run_step, before_iter, after_iter = self.run_step_train, self.before_iter, self.after_iter
        rank, to_device = self.rank, self.device.type != 'cpu'
        t0 = time.perf_counter()
        for batch_idx, batch in enumerate(batches, first - start):
            self.data_time = time.perf_counter() - t0
            if to_device:
                batch = self.transfer_data_to_device(batch)
            before_iter()
            run_step(batch, batch_idx, self.total_iter, rank)
            self._iter['train'] += 1
            self.total_iter += 1
            after_iter()
            if self.stop_requested:
                break
            t0 = time.perf_counter()
        self._train_epoch_finished = self._iter['train'] >= self._epoch_max_iter['train']
        self.after_all_iter()

    def _run_no_grad_loop(self, step_fn):
        bundle = self.datas[self._mode]
        self._epoch_max_iter[self._mode] = bundle.num_batches()
        self.before_all_iter()
        to_device = self.device.type != 'cpu'
        for batch_idx, batch in enumerate(bundle.iterate()):
            if to_device:
                batch = self.transfer_data_to_device(batch)
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
        no_sync = not self.sync_grads and hasattr(self.model, 'no_sync')
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
        """Forward one batch; leaves the loss in ``self.loss`` for BackwardHook."""
        with self.forward_context():
            results = forward_checked(self.model, batch_data)
        self.loss = self.total_loss(results)
        self.iter_outputs = self._detached(results)
        return results

    def total_loss(self, results):
        """``results['loss']`` (a dict's), else its ``loss_*`` terms summed with LOSS_WEIGHTS (1.0 by default).

        The summed loss is put back into ``results['loss']`` so it is logged beside its terms.
        """
        loss = results.get('loss')
        if loss is not None:
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

    @staticmethod
    def _detached(results):
        """The tensors of ``results`` outside autograd, their scalars fixed at this step's values.

        A scalar this step's graph computed (not a view) is only detached: nothing changes it
        later.  Any other scalar (a parameter, a buffer, a view of one, a value made outside
        autograd) may change in place later, so it is copied.  Hooks can then keep a step's
        scalars without copying them (LogHook's running means).
        """
        out = {}
        for k, v in results.items():
            if isinstance(v, torch.Tensor):
                if v.requires_grad and not v.is_leaf and v._base is None:
                    out[k] = v.detach()
                elif v.dim() == 0:
                    out[k] = v.detach().clone()
                else:  # a tensor outside autograd (every eval / test output) is already detached
                    out[k] = v.detach() if v.requires_grad else v
        return out

    def _eval_forward(self, batch_data):
        model = self.unwrapped_model if hasattr(self.model, 'no_sync') else self.model
        with self.autocast():
            results = forward_checked(model, batch_data)
        self.iter_outputs = self._detached(results)
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

    # -- stages ---------------------------------------------------------------------------------
    def _call(self, stage):
        for fn in self._stages[(self._mode, stage)]:
            fn(self)

    def before_solve(self):
        self._call('before_solve')

    def after_solve(self):
        """Every hook's after_solve runs (they finish writes) even when one fails; the first error is raised.

        After a training error (which ``solve`` re-raises) their errors only go to the log.
        """
        errors = []
        for fn in self._stages[(self._mode, 'after_solve')]:
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

    def before_epoch(self):
        self._call('before_epoch')

    def after_epoch(self):
        self._call('after_epoch')

    def before_all_iter(self):
        self._call('before_all_iter')

    def after_all_iter(self):
        self._call('after_all_iter')

    def before_iter(self):
        for fn in self._stages[(self._mode, 'before_iter')]:
            fn(self)

    def after_iter(self):
        for fn in self._stages[(self._mode, 'after_iter')]:
            fn(self)

    def collect_log_vars(self):
        """Scalars of this step for the log: the model's scalar outputs and the learning rate."""
        ret = OrderedDict((k, v) for k, v in self.iter_outputs.items() if v.dim() == 0)
        if self.optimizer is not None:
            ret['lr'] = self.optimizer.param_groups[0]['lr']
        return ret

    # -- probes: data a step hands to ProbeDataHook ----------------------------------------------
    def register_probe(self, probe_data):
        """Keep ``{name: value}`` of this step for ProbeDataHook; a no-op on steps it does not dump."""
        if self.probe_wanted:
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

    # -- callbacks (guide §2.7): plain functions called with the solver after the stage's hooks --
    def register_stage_callback(self, stage, fn, mode='train'):
        """Call ``fn(solver)`` at ``stage`` of ``mode`` after that stage's hooks, in registration order."""
        self._callbacks[mode][stage].append(fn)
        if self._stages:
            self._build_stage_table()

    def register_callback_on_epoch_begin(self, fn):
        self.register_stage_callback('before_epoch', fn)

    def register_callback_on_epoch_end(self, fn):
        self.register_stage_callback('after_epoch', fn)

    def register_callback_on_iter_begin(self, fn):
        self.register_stage_callback('before_iter', fn)

    def register_callback_on_iter_end(self, fn):
        self.register_stage_callback('after_iter', fn)

    # -- checkpoint state ------------------------------------------------------------------------
    def progress_state(self):
        """Where training stands: the position of the next train batch and the last results."""
        finished = self._train_epoch_finished
        return {
            'epoch': self.epoch + 1 if finished else self.epoch,
            'iter': 0 if finished else self._iter['train'],
            'total_iter': self.total_iter,
            'optimizer_steps': self.optimizer_steps,
            'eval_pending': finished and self._eval_due(),
            'last_eval_epoch': self._eval_done_epoch,
            'epoch_outputs': {m: dict(v) for m, v in self.epoch_outputs.items()},
        }

    def load_progress_state(self, state):
        self.epoch = state['epoch']
        self._iter['train'] = state['iter']
        self.total_iter = state['total_iter']
        self.optimizer_steps = state['optimizer_steps']
        self.epoch_outputs = {m: dict(v) for m, v in state['epoch_outputs'].items()}
        self._eval_done_epoch = state.get('last_eval_epoch', -1)
        if state['eval_pending']:
            # the evaluation after the last finished epoch was cut off: solve() runs it first
            self.epoch -= 1
            self._train_epoch_finished = True

    def save_checkpoint(self, path):
        """Collect the full state (all ranks) and write it atomically (rank 0)."""
        from scepter_like.utils.checkpoint import atomic_torch_save

        ckpt = training_state.collect_training_state(self)
        if self.is_main:
            atomic_torch_save(ckpt, path)
        return ckpt

    def load_checkpoint(self, path):
        ckpt = training_state.load_checkpoint_file(path)
        training_state.restore_training_state(self, ckpt, path)
        return ckpt

    def resume(self):
        """Resume from RESUME_FROM: a path, or 'auto' for the newest complete checkpoint in WORK_DIR."""
        if not self.resume_from:
            return None
        from scepter_like.utils.checkpoint import latest_checkpoint

        # rank 0 decides, so every rank resumes from the same file or none starts fresh alone
        if self.resume_from == 'auto':
            path = broadcast_object(
                latest_checkpoint(os.path.join(self.work_dir, 'checkpoints')) if self.is_main else None
            )
            if path is None:
                self.logger.info(f'RESUME_FROM auto: no checkpoint in {self.work_dir}/checkpoints; starting fresh')
                return None
        else:
            path = self.resume_from
        missing = [r for r, seen in enumerate(all_gather_object(os.path.isfile(path))) if not seen]
        if missing:
            raise ConfigError(
                f'{self.cfg.path_of("RESUME_FROM")}: checkpoint {path} does not exist'
                + (
                    f' on rank(s) {missing}; put WORK_DIR on a filesystem every node sees'
                    if len(missing) < self.world_size
                    else ''
                )
                + '; fix the path'
            )
        self.load_checkpoint(path)
        self.logger.info(
            f'resumed from {path} at epoch {self.epoch}, iter {self._iter["train"]}, step {self.total_iter}'
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
