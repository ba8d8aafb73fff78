"""Which functions the solver calls at each stage of each mode (the hooks, in PRIORITY order, then callbacks),
and the solver's stage methods that call them (``HookStages``).

A stage lists only the hooks that implement it (``Hook.implements``), so a feature that is
off costs nothing per step.  ``before_solve`` / ``after_solve`` and the checkpoint stages
reach the hooks of every mode.
"""

import inspect

from scepter_like.errors import ConfigError, suggest
from scepter_like.opt.lr_schedulers import LR_SCHEDULERS, BaseScheduler
from scepter_like.registry import qualname
from scepter_like.solver.hooks.backward import BackwardHook
from scepter_like.solver.hooks.checkpoint import CheckpointHook
from scepter_like.solver.hooks.hook import STAGES, Hook
from scepter_like.solver.hooks.log import LogHook
from scepter_like.solver.hooks.lr import LrHook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.loop_state import MODES

HOOK_KEYS = {'train': 'TRAIN_HOOKS', 'eval': 'EVAL_HOOKS', 'test': 'TEST_HOOKS'}
EVERY_MODE_STAGES = ('before_solve', 'after_solve')
EPOCH_STAGES = ('before_epoch', 'after_epoch')


# what a config needs in TRAIN_HOOKS when it sets the key: the hook, and its config when added
REQUIRED_TRAIN_HOOKS = {
    'OPTIMIZER': {'NAME': 'BackwardHook'},
    'LR_SCHEDULER': {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0},
}
WEIGHT_HOOKS = ('CheckpointHook', 'SafetensorsHook')  # the hooks that write a run's weights
ONCE_PER_MODE = (BackwardHook, LrHook, LogHook, CheckpointHook)  # two of a kind in one list: ConfigError
BUILTIN_HOOKS = {'BackwardHook': BackwardHook}  # this project's, whatever a user module registered under the name


def add_required_hooks(cfg, logger, steps_optimizer_itself=False):
    """Append to TRAIN_HOOKS the BackwardHook an OPTIMIZER needs and the LrHook an LR_SCHEDULER needs.

    Without them a run would train nothing, or keep its learning rate, and say nothing
    (mmengine adds its default hooks the same way).  A hook counts when it is an instance of
    the registered class of that name (a user's replacement too) or of the built-in one.
    A solver that steps the optimizer itself sets ``STEPS_OPTIMIZER_ITSELF``.  scepter's
    ways are kept: a BackwardHook that is not this project's (scepter's) steps the scheduler
    itself, so no LrHook is added; a scepter scheduler (``BaseScheduler``) is stepped every
    optimizer step, as scepter's BackwardHook steps it (the LrHook added has SET_BY_EPOCH false).
    """
    entries = cfg.TRAIN_HOOKS or []
    if not isinstance(entries, list):
        return
    require_optimizer(cfg, steps_optimizer_itself)
    names = {entry.get('NAME') for entry in entries if hasattr(entry, 'get')}
    added = default_hooks(cfg, entries, logger)
    warn_without_weights(cfg, entries, logger)
    for key, hook_cfg in REQUIRED_TRAIN_HOOKS.items():
        name = hook_cfg['NAME']
        given = _given(cfg, key)
        if given is None or name in names or (key == 'OPTIMIZER' and steps_optimizer_itself):
            continue
        if any(_is_a(entry.get('NAME'), name) for entry in entries if hasattr(entry, 'get')):
            continue
        if key == 'LR_SCHEDULER':
            if 'BackwardHook' in names and not _is_a('BackwardHook', 'BackwardHook', builtin=True):
                logger.info(f'{cfg.path_of(key)} is stepped by {qualname(HOOKS.get("BackwardHook"))}: no LrHook added')
                continue
            if _is_scepter_scheduler(given):
                hook_cfg = {**hook_cfg, 'SET_BY_EPOCH': False}
        added.append(dict(hook_cfg))
        where = getattr(given, 'path', cfg.path_of(key))
        logger.info(f'{where} is set and {cfg.path_of("TRAIN_HOOKS")} has no {name}: added {hook_cfg}')
    if added:
        cfg[HOOK_KEYS['train']] = [_plain_entry(e) for e in entries] + added


def require_optimizer(cfg, steps_optimizer_itself):
    """A train run (TRAIN_DATA) without an OPTIMIZER would run forward passes and train nothing: a ConfigError."""
    if cfg.TRAIN_DATA is not None and _given(cfg, 'OPTIMIZER') is None and not steps_optimizer_itself:
        raise ConfigError(
            f'{cfg.path_of("OPTIMIZER")}: a training run (TRAIN_DATA) needs an optimizer, or it trains nothing;'
            ' add one, e.g. OPTIMIZER: {NAME: AdamW, LEARNING_RATE: 0.001}'
        )


def default_hooks(cfg, entries, logger):
    """The LogHook a train run gets when TRAIN_HOOKS has none (``DEFAULT_LOG_HOOK: false``: none); a list."""
    if cfg.TRAIN_DATA is None or not cfg.get('DEFAULT_LOG_HOOK', True):
        return []
    if any(_is_a(entry.get('NAME'), 'LogHook') for entry in entries if hasattr(entry, 'get')):
        return []
    logger.info(f'{cfg.path_of("TRAIN_HOOKS")} has no LogHook: added one (DEFAULT_LOG_HOOK: false adds none)')
    return [{'NAME': 'LogHook'}]


def warn_without_weights(cfg, entries, logger):
    """A train run whose TRAIN_HOOKS keep no weights (no CheckpointHook, no SafetensorsHook) is warned at set-up: it
    trains, and neither test('best'), a resume nor run_eval finds anything of it afterwards."""
    if cfg.TRAIN_DATA is None:
        return
    if any(_is_a(entry.get('NAME'), name) for entry in entries if hasattr(entry, 'get') for name in WEIGHT_HOOKS):
        return
    logger.warning(
        f'{cfg.path_of("TRAIN_HOOKS")} has no CheckpointHook: this run writes no weights; add {{NAME: CheckpointHook}}'
        ' to keep them'
    )


def _is_a(entry_name, required, builtin=False):
    """Whether the hook registered as ``entry_name`` subclasses the one registered as ``required`` (or the built-in)."""
    if not isinstance(entry_name, str) or entry_name not in HOOKS or required not in HOOKS:
        return False
    return issubclass(HOOKS.get(entry_name), BUILTIN_HOOKS[required] if builtin else HOOKS.get(required))


def _given(cfg, key):
    """The config of ``key`` (OPTIMIZER, LR_SCHEDULER): the solver's, else a later optimizer phase's; or None."""
    if cfg[key] is not None:
        return cfg[key]
    phases = cfg.get('OPTIMIZER_PHASES') or []
    return next((p[key] for p in phases if hasattr(p, 'get') and p.get(key) is not None), None)


def _is_scepter_scheduler(sched_cfg):
    name = sched_cfg.get('NAME') if hasattr(sched_cfg, 'get') else None
    entry = LR_SCHEDULERS.get(name) if isinstance(name, str) and name in LR_SCHEDULERS else None
    return isinstance(entry, type) and issubclass(entry, BaseScheduler)


def _plain_entry(entry):
    return entry.to_dict() if hasattr(entry, 'to_dict') else entry


def build_hooks(cfg, logger):
    """``({mode: hooks sorted by PRIORITY}, {'mode.index.ClassName': hook})`` from a SOLVER config.

    The sort is stable: equal priorities keep config order.  The keys name each hook's state
    in a checkpoint.
    """
    hooks_dict, keys = {}, {}
    for mode in MODES:
        entries = cfg[HOOK_KEYS[mode]] or []
        if not isinstance(entries, list):
            raise ConfigError(f'{cfg.path_of(HOOK_KEYS[mode])}: expected a list of hook configs')
        places = [f'{cfg.path_of(HOOK_KEYS[mode])}[{index}]' for index in range(len(entries))]
        hooks = [HOOKS.build(entry, logger=logger, where=where) for entry, where in zip(entries, places)]
        for index, hook in enumerate(hooks):
            check_is_hook(hook, places[index])
            check_stage_methods(hook, places[index], logger)
            keys[f'{mode}.{index}.{type(hook).__name__}'] = hook
        check_one_of_each(mode, hooks, places)
        hooks_dict[mode] = sorted(hooks, key=lambda h: h.priority)
    warn_hooks_meant_before_the_update(hooks_dict['train'], logger)
    return hooks_dict, keys


def check_one_of_each(mode, hooks, places):
    """A second hook of a kind a run takes once (a subclass counts as its kind) is a ConfigError naming both: the
    loop would read one BackwardHook's GRADIENT_CLIP and drop the other's, a later LrHook's warmup would override
    the first's, two LogHooks write every line twice and two CheckpointHooks both move ``latest``.  A CheckpointHook
    saves the training state, so it belongs in TRAIN_HOOKS only."""
    first = {}
    for hook, where in zip(hooks, places):
        kind = next((kind for kind in ONCE_PER_MODE if isinstance(hook, kind)), None)
        if kind is CheckpointHook and mode != 'train':
            raise ConfigError(
                f'{where}: a CheckpointHook saves the training state, from TRAIN_HOOKS only (here it would move'
                ' `latest` too); move its keys into the one in TRAIN_HOOKS'
            )
        if kind in first:
            raise ConfigError(
                f'{where}: a second {kind.__name__} after {first[kind]}; a run takes one, the second would be'
                f' ignored or work twice: merge their keys into one'
            )
        if kind is not None:
            first[kind] = where


def warn_hooks_meant_before_the_update(train_hooks, logger):
    """A train ``after_iter`` hook ordered before this project's BackwardHook: in scepter's order it ran before the
    backward and could change ``solver.loss``; here the update runs before every ``after_iter`` hook (hooks observe),
    so such a change would be lost without a word.  Named once, with where the loss can change."""
    backward = next((h for h in train_hooks if isinstance(h, BackwardHook)), None)
    if backward is None:
        return
    for hook in train_hooks:
        if (
            hook.priority < backward.priority
            and getattr(type(hook), 'after_iter', Hook.after_iter) is not Hook.after_iter
        ):
            logger.warning(
                f'{type(hook).__name__}({hook.priority}) runs after_iter before BackwardHook({backward.priority}), as'
                " in scepter's order where it could still change solver.loss; here the step's update has run by"
                ' after_iter (solver.loss is None there): change the loss in run_step_train or the model'
            )


CHECKPOINT_STAGES = ('before_save_checkpoint', 'after_load_checkpoint')  # called with (solver, checkpoint)


def check_is_hook(hook, where):
    """A registered hook class that does not subclass Hook lacks what the solver asks of every hook (the stages it
    does not write, ``implements``): a ConfigError naming its place, not an AttributeError from the stage table."""
    if not isinstance(hook, Hook):
        raise ConfigError(
            f'{where}: {type(hook).__name__} does not subclass Hook, so the solver cannot call it at every stage;'
            " subclass scepter_like's Hook (from scepter_like.solver.hooks import Hook), as a scepter hook subclasses"
            " scepter's"
        )


def check_stage_methods(hook, where, logger):
    """A stage method the solver cannot call (a wrong signature) is a ConfigError naming the hook, before any
    step; a method named like a stage but misspelled, which the solver would never call, a warning."""
    cls = type(hook)
    for stage in STAGES:
        method = getattr(hook, stage, None)
        if method is None or not hook.implements(stage):
            continue
        args = ('solver', 'checkpoint') if stage in CHECKPOINT_STAGES else ('solver',)
        try:
            inspect.signature(method).bind(*args)
        except TypeError:
            raise ConfigError(
                f'{where}: {cls.__name__}.{stage}{inspect.signature(method)} cannot be called as'
                f' {stage}({", ".join(args)}); write def {stage}(self, {", ".join(args)})'
            ) from None
        except ValueError:  # no signature to read (a builtin): the call will tell
            continue
    for name, value in vars(cls).items():
        if callable(value) and not name.startswith('_') and name not in STAGES and not hasattr(Hook, name):
            hint = suggest(name, STAGES, cutoff=0.8)
            if hint:
                logger.warning(f'{where}: {cls.__name__}.{name} is not a stage, so the solver never calls it{hint}')


def update_hooks(train_hooks):
    """``(config of this project's BackwardHook or None, whether another BackwardHook steps the optimizer)``.

    The updater reads its settings from the first; the second (scepter's BackwardHook,
    registered under the name by a user's import) makes the built-in update stand aside.
    """
    ours = next((h for h in train_hooks if isinstance(h, BackwardHook)), None)
    foreign = any(type(h).__name__ == 'BackwardHook' and not isinstance(h, BackwardHook) for h in train_hooks)
    return (ours.cfg if ours is not None else None), foreign


def call_every(fns, solver, failed, logger):
    """Call each ``fn(solver)`` even when one fails (so every ``after_solve`` finishes its writes).

    The first error is raised unless ``failed`` (the error that ended training) is set;
    the others only go to the log.
    """
    errors = []
    for fn in fns:
        try:
            fn(solver)
        except Exception as e:
            errors.append(e)
    first = errors.pop(0) if errors and failed is None else None
    for e in errors:
        logger.error('after_solve failed after an earlier error', exc_info=e)
    if first is not None:
        raise first


class StageTable:
    def __init__(self, hooks_dict):
        self.hooks_dict = hooks_dict  # mode -> hooks sorted by PRIORITY (ties keep config order)
        self._callbacks = {mode: {stage: [] for stage in STAGES} for mode in MODES}
        self.table = {}  # (mode, stage) -> the functions to call, in order; read directly by the per-step stages
        self.rebuild()

    def rebuild(self):
        """Ask every hook again which stages it implements (hooks settle that in ``before_solve``)."""
        every = sorted((h for mode in MODES for h in self.hooks_dict[mode]), key=lambda h: h.priority)
        for mode in MODES:
            for stage in STAGES:
                hooks = every if stage in EVERY_MODE_STAGES else self.hooks_dict[mode]
                fns = [getattr(h, stage) for h in hooks if h.implements(stage)]
                self.table[mode, stage] = fns + self._callbacks[mode][stage]

    def add_callback(self, mode, stage, fn):
        self._callbacks[mode][stage].append(fn)
        self.rebuild()

    def functions(self, mode, stage):
        return self.table[mode, stage]

    def callbacks(self, mode, stage):
        """The callbacks alone (a stage method given a hook list runs them after those hooks)."""
        return self._callbacks[mode][stage]

    def every_mode(self, stage):
        """The functions of ``stage`` over all modes, each once (the checkpoint stages)."""
        seen, out = set(), []
        for mode in MODES:
            for fn in self.table[mode, stage]:
                if id(fn) not in seen:
                    seen.add(id(fn))
                    out.append(fn)
        return out

    def describe(self):
        """The resolved hook order of every stage, one line per mode and stage."""
        lines = []
        for mode in MODES:
            for stage in STAGES:
                if mode != 'train' and stage in EVERY_MODE_STAGES:
                    continue
                hooks = [
                    f'{type(fn.__self__).__name__}({fn.__self__.priority})'
                    for fn in self.table[mode, stage]
                    if isinstance(getattr(fn, '__self__', None), Hook)
                ]
                if hooks:
                    lines.append(f'  {mode:5s} {stage:22s} ' + ' -> '.join(hooks))
        return '\n'.join(lines) or '  (no hooks)'


def _stage(stage):
    """A stage method: calls the current mode's hooks of ``stage``, or the given ``hooks`` in their order.

    After an epoch stage, the scalars its hooks logged outside a step are written (``epoch_scalars``).
    """

    def call_hooks(solver, hooks=None):
        if hooks is not None:
            return solver._call_hook_list(stage, hooks)
        for fn in solver.stages.table[solver._mode, stage]:  # the table itself: three stages a step
            fn(solver)

    def call_then_write(solver, hooks=None):
        call_hooks(solver, hooks)
        solver.epoch_scalars.write(solver, stage)

    call = call_then_write if stage in EPOCH_STAGES else call_hooks
    call.__name__ = call.__qualname__ = stage
    return call


def _callback_at(stage):
    """``register_callback_on_*``: call ``fn(solver)`` at ``stage`` of train mode after that stage's hooks."""
    return lambda solver, fn: solver.register_stage_callback(stage, fn)


class HookStages:
    """The solver's stage methods (``solver.before_iter()`` ...) and callbacks, over its ``StageTable``.

    Each stage method calls the current mode's functions of that stage in order (hooks by
    PRIORITY, then callbacks), or, given a hook list (scepter's form,
    ``self.before_iter(self.hooks_dict[mode])``), those hooks, then the callbacks.  BaseSolver inherits it.
    """

    _before_solve = _stage('before_solve')

    def before_solve(self, hooks=None):
        """Every mode's hooks' before_solve; then the table asks them again what they implement (they settle
        their configuration there)."""
        self._before_solve(hooks)
        if hooks is None:
            self.stages.rebuild()

    before_epoch = _stage('before_epoch')
    after_epoch = _stage('after_epoch')
    before_all_iter = _stage('before_all_iter')
    after_all_iter = _stage('after_all_iter')
    before_iter = _stage('before_iter')
    after_iter = _stage('after_iter')
    after_backward = _stage('after_backward')  # the updater calls it, between backward and optimizer step

    def after_solve(self, hooks=None):
        """Every hook's after_solve runs (they finish writes) even when one fails; the first error is raised.

        After a training error (which ``solve`` re-raises) their errors only go to the log.
        """
        if hooks is None:
            fns = self.stages.functions(self._mode, 'after_solve')
        else:
            fns = [h.after_solve for h in hooks] + self.stages.callbacks(self._mode, 'after_solve')
        flush = self.metrics_log.flush if self.metrics_log is not None else None  # the train lines it holds
        call_every(fns + ([lambda solver: flush()] if flush else []), self, self.failed, self.logger)

    def stage_functions(self, stage, mode=None):
        """The functions that run at ``stage`` of ``mode`` (of every mode when None: the checkpoint stages)."""
        return self.stages.every_mode(stage) if mode is None else self.stages.functions(mode, stage)

    def get_hooks_info(self):
        """The resolved hook order of every stage, one line per mode and stage."""
        return self.stages.describe()

    def hooks_by_key(self):
        """Every hook under a stable key ``mode.index.ClassName`` (used for checkpoint state)."""
        return self._hook_keys

    # -- callbacks: plain functions called with the solver after the stage's hooks ----------------
    def register_stage_callback(self, stage, fn, mode='train'):
        """Call ``fn(solver)`` at ``stage`` of ``mode`` after that stage's hooks, in registration order."""
        self.stages.add_callback(mode, stage, fn)

    register_callback_on_epoch_begin = _callback_at('before_epoch')
    register_callback_on_epoch_end = _callback_at('after_epoch')
    register_callback_on_iter_begin = _callback_at('before_iter')
    register_callback_on_iter_end = _callback_at('after_iter')
