"""scepter's solver protocol: the names scepter's own hooks and solvers use, on this project's solver.

``BaseSolver`` inherits :class:`ScepterProtocol`, so a hook or solver subclass written
for scepter finds what it reads and calls: the counters with scepter's offsets, the mode
switches, ``scaler``, ``train_parameters()``, ``_reduce_scalar``, the per-mode dicts
(``_iter_outputs``, ``_epoch_outputs``, ``_total_iter``, ...), ``probe_data``,
``save_safetensors()``, ``_build_metrics``, ``save_checkpoint()`` / ``load_checkpoint(dict)``
overrides, and stage methods called with a hook list.

Every name is a view of the loop's state (``solver.progress``, ``solver.step``); none
holds a copy.  This project's own hooks read ``solver.progress`` instead of the counter
views: its counts include a step from that step's ``after_iter`` on, scepter's from the
step after (see docs/porting_from_scepter.md, "Counters").
"""

import contextlib
import functools
import inspect
from collections import OrderedDict, defaultdict
from collections.abc import MutableMapping

import torch

from scepter_like.data.loader import DATA_KEYS
from scepter_like.errors import ConfigError
from scepter_like.metric.registry import METRICS
from scepter_like.model.description import description_metadata
from scepter_like.model.loss_aggregators.base import loss_terms
from scepter_like.solver import checkpoint_state
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.loop_state import MODES, detached_outputs
from scepter_like.solver.parallel import is_fsdp, model_state_dict
from scepter_like.utils.checkpoint import safetensors_ready, unwrap_model
from scepter_like.utils.distributed import all_reduce_sum
from scepter_like.utils.probe import as_probe_data


def state_view(holder, name, doc=None, settable=True):
    """A solver property that reads (and sets) ``solver.<holder>.<name>``: one home per fact."""

    def get(solver):
        return getattr(getattr(solver, holder), name)

    def set_(solver, value):
        setattr(getattr(solver, holder), name, value)

    return property(get, set_ if settable else None, doc=doc)


class ModeMapping(MutableMapping):
    """One of scepter's per-mode dicts (``solver._total_iter[mode]``) read from and written to the loop's state.

    Save a plain copy (``dict(m)``) where a plain dict is needed: checkpoint code does.
    """

    def __init__(self, read, write):
        self._read, self._write = read, write

    def __getitem__(self, mode):
        if mode not in MODES:
            raise KeyError(mode)
        return self._read(mode)

    def __setitem__(self, mode, value):
        if mode not in MODES:
            raise KeyError(mode)
        self._write(mode, value)

    def __delitem__(self, mode):
        raise TypeError('the solver keeps a value for every mode; set it instead of deleting it')

    def __iter__(self):
        return iter(MODES)

    def __len__(self):
        return len(MODES)

    def __repr__(self):
        return repr(dict(self))


class StopOwnTrainLoop(BaseException):
    """Ends a subclass's own train loop when it begins a step after training finished (a stop, or MAX_STEPS
    reached): that loop has no ``break`` for it.  A BaseException, so the loop's ``except Exception`` does not
    swallow it; the subclass's ``run_train`` itself catches it (``ends_at_stop``)."""


def ends_at_stop(run_train):
    """A subclass's own ``run_train`` ended by StopOwnTrainLoop returns after the train ``after_all_iter``, so
    whatever calls it (``solve_train``, or scepter's ``solve()`` override calling ``self.run_train()``) goes on.
    Only the outermost ``run_train`` catches it: one that calls ``super().run_train()`` ends with it, once."""

    @functools.wraps(run_train)
    def run(self, *args, **kwargs):
        if self.progress.in_run_train:
            return run_train(self, *args, **kwargs)
        self.progress.in_run_train = True
        try:
            return run_train(self, *args, **kwargs)
        except StopOwnTrainLoop:
            self.after_all_iter(self.hooks_dict['train'])
        except StopIteration as error:
            mode = exhausted_loader(self, error)
            if mode is None:  # not next() on a loader of the solver's data
                raise
            if not self.progress.train_finished():  # a step still to run found no batch
                raise pass_ended(self, mode) from None
            self.after_all_iter(self.hooks_dict['train'])  # the steps are done: its next before_iter would end it
        finally:
            self.progress.in_run_train = False

    return run


def exhausted_loader(solver, error):
    """The mode whose ``.dataloader`` pass ran out to raise ``error`` (a StopIteration out of ``next()`` on it),
    or None when it came from elsewhere."""
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    if tb.tb_frame.f_globals.get('__name__') != 'torch.utils.data.dataloader':
        return None
    dataset = getattr(tb.tb_frame.f_locals.get('self'), '_dataset', None)  # torch's loader iterator
    return next((m for m, bundle in solver.datas.items() if getattr(bundle, 'dataset', None) is dataset), None)


def pass_ended(solver, mode):
    """The ConfigError of a subclass's own ``run_train`` that drew ``next()`` past the end of ``mode``'s pass
    (scepter's step loops draw from an endless loader)."""
    where = solver.cfg.path_of(DATA_KEYS[mode])
    fix = (
        f'a loop drawing its steps with next() needs an endless loader: add SAMPLER: {{NAME: LoopSampler}} to {where}'
        " (scepter's key; passes then follow one another)"
        if mode == 'train'
        else f'the {mode} pass ends there: iterate it with a for loop'
    )
    return ConfigError(
        f"{where}: {type(solver).__name__}.run_train asked for a batch after its loader's pass ended"
        f' ({solver.datas[mode].num_batches()} batches on this rank; step {solver.progress.total_iter + 1} was next);'
        f' {fix}'
    )


# what scepter's TrainValSolver.construct_metrics sets, and its run_eval reads
SCEPTER_METRIC_STATE = ('do_final_eval', 'save_eval_data', '_collect_keys')

# scepter BaseSolver attributes that none of scepter's solver subclasses and hooks read: not provided, and why
NOT_PROVIDED = {
    '_load_hook': "the solver's construct_hook builds every mode's hooks; drop a construct_hook override",
    '_local_rank': 'use we.rank (scepter_like.utils.distribute)',
    '_prefix': 'the file system is local only (FS)',
    'file_system': 'the file system is local only (FS)',
    'pl_dir': 'Lightning writes under WORK_DIR (docs/lightning.md)',
    'do_step': 'the updater decides the optimizer step (solver.step.steps_optimizer)',
    '_probe_data': 'use collect_probe / probe_data',
    'probe_data_dict': 'use collect_probe / probe_data',
    '_dist_data': "scepter's probe distributions are not provided",
    '_model_flops': 'use model_flops (register_flops)',
    '_model_parameters': 'count them from solver.model.parameters()',
}


class ScepterProtocol:
    """scepter's names on the solver; a mixin of BaseSolver, reading its state objects, model, hooks and metrics."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if 'run_train' in vars(cls):
            cls.run_train = ends_at_stop(vars(cls)['run_train'])

    def __getattr__(self, name):
        """Only for names not found: scepter's metric state says where it comes from (a ``run_eval`` ported from
        scepter's TrainValSolver without its ``construct_metrics`` read it)."""
        if name in SCEPTER_METRIC_STATE:
            raise AttributeError(
                f"{type(self).__name__}.{name} is set by scepter's TrainValSolver.construct_metrics (its run_eval reads"
                ' it): port construct_metrics with run_eval (docs/porting_from_scepter.md)'
            )
        if name in NOT_PROVIDED:
            raise AttributeError(
                f"{type(self).__name__}.{name}: scepter's BaseSolver attribute is not provided here:"
                f' {NOT_PROVIDED[name]} (docs/porting_from_scepter.md)'
            )
        raise AttributeError(f'{type(self).__name__!r} object has no attribute {name!r}')

    use_pl = property(lambda self: self.lightning is not None, doc="Lightning's Trainer runs the loop (ENV.USE_PL).")

    # -- counters with scepter's offsets ----------------------------------------------------------
    @property
    def total_iter(self):
        """Train steps completed before the current one: inside a train step, its 0-based index (scepter's)."""
        return self.progress.total_iter - (self.step.counted and self._mode == 'train')

    @property
    def iter(self):
        """The current mode's iterations in this epoch before the current one (scepter's)."""
        return self.progress.iters[self._mode] - self.step.counted

    @property
    def epoch(self):
        """Train epochs begun (scepter's): 0 before the first train step, n from the n-th epoch's first step on."""
        progress = self.progress
        begun = progress.epoch_finished or progress.iters['train'] > 0 or (self._mode == 'train' and self.step.running)
        return progress.epoch + begun

    @epoch.setter
    def epoch(self, value):
        """Training goes on at the start of epoch ``value``, counted from 1 (scepter's ``load_checkpoint`` sets
        ``_epoch = saved epoch + 1``); the view reads ``value`` again from that epoch's first step on."""
        self.progress.epoch, self.progress.iters['train'], self.progress.epoch_finished = max(value - 1, 0), 0, False

    _epoch = epoch

    def _set_total_iter(self, mode, value):
        """scepter derives the epoch from the step count (``epoch = total_iter // epoch_max_iter + 1``): so here.

        Only the train count is kept (``total_iter`` is the train count in every mode): a write
        to another mode's entry is ignored.
        """
        if mode != 'train':
            return
        progress = self.progress
        progress.total_iter = value
        if progress.epoch_iters['train'] > 0:
            progress.epoch, progress.iters['train'] = divmod(value, progress.epoch_iters['train'])
            progress.epoch_finished = False

    @property
    def _total_iter(self):
        return ModeMapping(lambda mode: self.total_iter, self._set_total_iter)

    @property
    def _iter(self):
        progress, step = self.progress, self.step
        return ModeMapping(
            lambda mode: progress.iters[mode] - (step.counted and mode == self._mode), progress.iters.__setitem__
        )

    @property
    def _epoch_max_iter(self):
        return ModeMapping(self.progress.epoch_iters.__getitem__, self.progress.epoch_iters.__setitem__)

    epoch_max_iter = property(lambda self: self.progress.epoch_iters[self._mode], doc="Batches in this mode's epoch.")
    max_epochs = state_view('progress', 'max_epochs')
    eval_interval = state_view('progress', 'eval_interval', 'Train epochs between evaluations (EVAL_INTERVAL).')
    _mode_set = property(lambda self: set(self.datas), doc='The modes with data (scepter adds each in construct_data).')
    max_steps = state_view('progress', 'max_steps', "MAX_STEPS; scepter's diffusion solver assigns it in __init__.")
    num_folds = state_view('progress', 'num_folds', 'NUM_FOLDS (with one process: 1 from construct_data on).')
    _num_folds = num_folds

    @property
    def accu_step(self):
        return self.updater.settings.accumulate_steps

    # -- the current step -------------------------------------------------------------------------
    loss = state_view(
        'step', 'loss', "This step's training loss until the update uses it (scepter's hooks set it to None)."
    )
    iter_outputs = state_view('step', 'outputs', "This step's outputs, detached.")

    @property
    def _iter_outputs(self):
        """The current mode's outputs (``_iter_outputs[solver.mode] = ...`` replaces them, as scepter's loops do)."""
        return ModeMapping(lambda mode: self.step.outputs if mode == self._mode else {}, self._set_iter_outputs)

    def _set_iter_outputs(self, mode, outputs):
        if mode != self._mode:
            raise ValueError(f"only the current mode's outputs can be set (the solver is in {self._mode!r} mode)")
        self.step.outputs = detached_outputs(outputs)

    def _reduce_scalar(self, data_dict):
        """scepter's: hand ``data_dict['loss']`` to the update (in train mode the ``loss_*`` terms aggregated, when
        there is no ``loss``); the outputs with 0-dim tensors averaged over ranks."""
        if self._mode == 'train' and ('loss' in data_dict or loss_terms(data_dict)):
            self.step.loss = self.updater.loss_of(data_dict, self.step)
        elif 'loss' in data_dict:
            self.step.loss = data_dict['loss']
        keys = data_dict.keys() if isinstance(data_dict, OrderedDict) else sorted(data_dict)  # one order on all ranks
        out = OrderedDict()
        for key in keys:
            value = data_dict[key]
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                value = value.detach().clone()
                if self.world_size > 1:
                    value = all_reduce_sum(value) / self.world_size
            out[key] = value
        return out

    @property
    def _epoch_outputs(self):
        return self.epoch_outputs

    @functools.cached_property
    def _agg_iter_outputs(self):
        return defaultdict(dict)

    @property
    def agg_iter_outputs(self):
        """scepter's LogHook leaves each mode's interval means here (this project's LogHook does not)."""
        return self._agg_iter_outputs

    @agg_iter_outputs.setter
    def agg_iter_outputs(self, outputs):
        self._agg_iter_outputs[self._mode] = dict(outputs)

    # -- modes --------------------------------------------------------------------------------------
    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = mode
        training = mode == 'train'
        if self.model is not None and self.model.training != training:  # (a walk over every module: only on a change)
            self.model.train(training)

    is_train_mode = property(lambda self: self._mode == 'train')
    is_eval_mode = property(lambda self: self._mode == 'eval')
    is_test_mode = property(lambda self: self._mode == 'test')

    def train_mode(self):
        self.mode = 'train'

    def eval_mode(self):
        self.mode = 'eval'

    def test_mode(self):
        self.mode = 'test'

    # -- what scepter's hooks ask of the solver ----------------------------------------------------------
    @property
    def scaler(self):
        """The updater's fp16 GradScaler, or None (no AMP, bf16, or scepter's own BackwardHook)."""
        return self.updater.scaler if self.updater.active else None

    @scaler.setter
    def scaler(self, scaler):
        """scepter's diffusion solver sets its own in ``init_opti`` (a GradScaler under fp16, else None)."""
        self.updater.scaler = scaler

    def train_parameters(self):
        """The parameters the optimizer trains (those that require grad)."""
        return [p for p in self.unwrapped_model.parameters() if p.requires_grad]

    @property
    def use_fsdp(self):
        """Whether the model is FSDP-wrapped, or the flag a subclass assigned (scepter's diffusion solver reads its
        USE_FSDP key into it in ``__init__`` and then picks its own save and load paths by it)."""
        own = vars(self).get('_use_fsdp')
        return is_fsdp(self.model) if own is None else own

    @use_fsdp.setter
    def use_fsdp(self, value):
        self._use_fsdp = value

    def collect_log_vars(self):
        """scepter's: in train mode, each parameter group's learning rate as ``pg{index}_lr``."""
        ret = OrderedDict()
        if self._mode == 'train' and self.optimizer is not None:
            for index, group in enumerate(self.optimizer.param_groups):
                ret[f'pg{index}_lr'] = group['lr']
        return ret

    # -- probes: what a step hands to ProbeDataHook -------------------------------------------------
    @functools.cached_property
    def _probes(self):
        """The probes kept for ProbeDataHook: those of the steps it asked for, and those registered outside a step
        (scepter's ``run_eval`` registers its pass's after the loop)."""
        return {}

    def register_probe(self, probe_data):
        """Keep ``{name: value}`` for ProbeDataHook; one registered in a step is dropped at the step's end unless a
        ProbeDataHook asked for the step (scepter's ``after_iter`` clears them too)."""
        (self.step.probes if self.step.running else self._probes).update(probe_data)

    @property
    def collect_probe(self):
        """Every probe registered and not yet taken, the model's as ``model/{name}`` (scepter's)."""
        model = self._probing_model()
        own = model.collect_probe() if model is not None else {}
        return {**self._probes, **self.step.probes, **{f'model/{k}': v for k, v in own.items()}}

    def _probing_model(self):
        """The model when it has scepter's probe API (a BaseModel), else None."""
        model = unwrap_model(self.model)
        return model if callable(getattr(model, 'collect_probe', None)) else None

    def pop_probes(self):
        """``collect_probe``, handed over once (every store is emptied)."""
        probes = self.collect_probe
        self.clear_probe()
        return probes

    @property
    def probe_data(self):
        """scepter's: ``collect_probe`` as ``ProbeData`` (``to_log`` writes each), handed over once."""
        return {k: as_probe_data(v) for k, v in self.pop_probes().items()}

    def clear_probe(self):
        self._probes.clear()
        self.step.probes.clear()
        model = self._probing_model()
        if model is not None:
            model.clear_probe()

    def end_step(self):
        """The step's ``after_iter`` hooks are done: what it registered is kept when a ProbeDataHook asked for the
        step, else dropped; then the step ends.  The model's own probes stay until taken, as in scepter (clearing
        them would walk its modules on every step)."""
        step = self.step
        if step.probes:
            if step.probe_wanted:
                self._probes.update(step.probes)
            step.probes.clear()
        step.end()

    def save_safetensors(self):
        """``(state_dict, metadata)`` of the unwrapped model, ready for ``safetensors.torch.save_file``
        (full tensors: under FSDP a collective, which every rank calls)."""
        metadata = {
            'format': 'pt',
            'step': str(self.progress.total_iter),
            'epoch': str(self.progress.epoch),
            'config': self.config_text,
            **description_metadata(self.unwrapped_model),
        }
        return safetensors_ready(model_state_dict(self.model)), metadata

    def _build_metrics(self, cfgs, logger=None):
        """scepter's: append ``{'fn': metric, 'keys': KEYS}`` to ``self.metrics`` for each METRICS config."""
        if isinstance(cfgs, (list, tuple)):
            for cfg in cfgs:
                self._build_metrics(cfg, logger=logger)
            return
        fn = METRICS.build(cfgs, logger=logger or self.logger)
        keys = list(cfgs.get('KEYS') or [])
        self.metrics.append({'fn': fn, 'keys': keys})
        if not isinstance(getattr(self, '_collect_keys', None), set):
            self._collect_keys = set()
        self._collect_keys.update(keys)

    # -- checkpoints: a subclass's save_checkpoint() / load_checkpoint(dict) decide, scepter's way ------------
    def training_state(self):
        """What a checkpoint file holds (a collective: every rank calls it): the dict of a scepter-style
        ``save_checkpoint()`` override (made plain), else the full training state."""
        if self._overrides_scepter_way('save_checkpoint'):
            return checkpoint_state.plain_state(self.save_checkpoint())
        return checkpoint_state.collect_training_state(self)

    def restore_state(self, ckpt, source):
        """Put a loaded checkpoint back: through a scepter-style ``load_checkpoint(dict)`` override, else whole."""
        if self._overrides_scepter_way('load_checkpoint'):
            self.load_checkpoint(ckpt)
        else:
            checkpoint_state.restore_training_state(self, ckpt, source)

    def _overrides_scepter_way(self, name):
        """Whether a subclass replaces the solver's own ``name`` with scepter's signature
        (``save_checkpoint(self)`` / ``load_checkpoint(self, checkpoint)``)."""
        if not self.overrides(name):
            return False
        try:
            inspect.signature(getattr(type(self), name)).bind(self, *(() if name == 'save_checkpoint' else ({},)))
        except TypeError:
            return False
        return True

    # -- stage methods called with a hook list ---------------------------------------------------------
    def _call_hook_list(self, stage, hooks):
        """scepter's loops call ``self.after_iter(self.hooks_dict[mode])`` and count in the stage methods.

        So here: a train ``before_all_iter`` plans the epoch (its accumulation groups, ACCUMULATE_STEP);
        ``before_iter`` begins a step, in its group; ``after_iter`` runs the train step's update, counts
        the step (before its hooks, as this project's loops do), ends it after them and, at an
        optimizer-step boundary, agrees on a stop.  The stage's callbacks (``register_stage_callback``;
        CheckpointHook saves through them) run after the given hooks, as in the native loop.
        """

        def call_hooks():
            for hook in hooks:
                if not isinstance(hook, Hook) or hook.implements(stage):
                    getattr(hook, stage)(self)
            for fn in self.stages.callbacks(self._mode, stage):
                fn(self)

        train, progress = self._mode == 'train', self.progress
        if stage == 'before_all_iter' and train:  # .dataloader goes on where the epoch does (a resumed one mid-pass)
            self.datas['train'].resume_at(progress.start_train_epoch(self.datas['train'].num_batches())[0])
        if stage == 'before_iter':
            if train and progress.train_finished():  # a step past a stop or MAX_STEPS: the loop ends before it
                raise StopOwnTrainLoop
            group = progress.accumulation_group(self.updater.settings.accumulate_steps) if train else ()
            self.step.begin(progress.total_iter, None, *group)
        if stage != 'after_iter':
            return call_hooks()
        self._finish_step(self._mode, train and self._update(), call_hooks)
        if train and self.step.steps_optimizer:  # an optimizer-step boundary, as the native loop's
            self._agree_on_stop()

    def runs_own_pass(self, mode):
        """Whether a subclass replaces the ``run_eval`` / ``run_test`` loop of ``mode`` with its own (scepter's way,
        filling ``_epoch_outputs[mode]`` itself): the names it reports are known after a pass."""
        name = {'eval': 'run_eval', 'test': 'run_test'}.get(mode)
        return name is not None and self.overrides(name)

    def overrides(self, name):
        """Whether a subclass replaces the solver's own method ``name`` (as BaseSolver introduced it)."""
        introduced_by = next(c for c in reversed(type(self).__mro__) if name in vars(c))  # BaseSolver
        return getattr(type(self), name) is not vars(introduced_by)[name]

    @contextlib.contextmanager
    def own_train_loop_as_epoch(self):
        """Around ``run_train``: a subclass's own train loop (scepter's, with hook-list stage calls) is one epoch,
        as scepter's ``solve()`` counts them.  The native loop ends its epochs itself."""
        progress = self.progress
        yield
        if not (progress.epoch_finished or progress.train_finished()):
            progress.epoch_finished = True
