"""What a resume does to an LR schedule whose length the interrupted run fixed.

torch's schedulers keep their settings in their state (``CosineAnnealingLR``'s ``T_max``,
``OneCycleLR``'s ``total_steps``), so a resumed scheduler runs on with the checkpoint's
settings, whatever the resuming config says.  When the resuming run is longer or shorter
than the one that wrote the checkpoint (another MAX_EPOCHS or MAX_STEPS), that is rarely
what the user meant and easy to miss (a cosine schedule climbs back up after ``T_max``), so
the resume says it once, naming the length kept and the config's own where they differ.  The
same holds for every other setting of the optimizer's parameter groups (the learning rate it was
made with, weight decay, betas, momentum) and of the scheduler (T_max, eta_min, gamma ...): the
checkpoint's are kept, so a resume under a config that changes any says so once, naming each.
"""

import math

from scepter_like.config import load_yaml

RUN_LENGTH_KEYS = ('MAX_EPOCHS', 'MAX_STEPS')
LENGTH_SETTINGS = ('T_max', 'total_steps', 'total_iters', 'milestones')  # torch's schedulers of a fixed length


def _settings(state):
    """A scheduler state's length settings (none: a schedule without a length, e.g. ExponentialLR)."""
    return {k: state[k] for k in LENGTH_SETTINGS if k in state}


def _saved_solver_config(ckpt):
    """The SOLVER config of the run that wrote ``ckpt``; None for a checkpoint without it."""
    try:
        solver = load_yaml(ckpt['meta']['config'])['SOLVER']
    except (KeyError, TypeError, ValueError):
        return None
    return solver if isinstance(solver, dict) else None


def _old_lengths(ckpt):
    solver = _saved_solver_config(ckpt)
    return None if solver is None else {key: solver.get(key) for key in RUN_LENGTH_KEYS}


def saved_optimizer_name(ckpt, phase):
    """The NAME of the optimizer whose state ``ckpt`` holds (that of optimizer phase ``phase``), from the config it
    was written with; None when that is unknown."""
    solver = _saved_solver_config(ckpt) or {}
    try:
        entry = solver['OPTIMIZER'] if phase == 0 else solver['OPTIMIZER_PHASES'][phase - 1]['OPTIMIZER']
        return entry['NAME']
    except (KeyError, TypeError, IndexError):
        return None


def resumed_schedule_note(solver, ckpt, config_state, source):
    """The warning for a resume of a run of another length, whose scheduler keeps its settings; or None.

    ``config_state``: the state of the scheduler this config built, before the checkpoint's replaced it.
    """
    scheduler = solver.lr_scheduler
    old = _old_lengths(ckpt)
    new = {'MAX_EPOCHS': solver.progress.max_epochs, 'MAX_STEPS': solver.progress.max_steps}
    if scheduler is None or old is None or old == new:
        return None
    kept, own = _settings(scheduler.state_dict()), _settings(config_state)
    if not kept:
        return None
    shown = ', '.join(
        f'{k}={v}' + (f' (this config: {own[k]})' if k in own and own[k] != v else '') for k, v in kept.items()
    )
    changed = ', '.join(f'{k} {old[k]} -> {new[k]}' for k in RUN_LENGTH_KEYS if old[k] != new[k])
    return (
        f'{source} comes from a run of another length ({changed}): its LR scheduler {type(scheduler).__name__}'
        f' resumes with the length it was made with ({shown}) and keeps it: past it a cosine schedule rises'
        ' again and a linear or one-cycle one stays at its end. To schedule over the new length, start a fresh'
        ' run from these weights (SOLVER.MODEL.PRETRAINED_MODEL)'
    )


SCHEDULER_PROGRESS = ('last_epoch', 'base_lrs', 'best', 'num_bad_epochs', 'cooldown_counter', 'mode_worse')
CYCLED = ('momentum', 'betas')  # a cycle_momentum scheduler (OneCycleLR, CyclicLR) moves them every step


def changed_settings_note(config_groups, config_schedule, ckpt, source, skip=()):
    """The warning for a resume whose config sets other optimizer or LR scheduler settings than the checkpoint's
    (of the first phase): the checkpoint's optimizer and schedule go on with theirs, so the config's are not used;
    or None.  ``config_groups``: each parameter group as this config built it; ``config_schedule``: the state of the
    scheduler it built (or None); ``skip``: scheduler settings a warning names already."""
    saved = ckpt.get('optimizer')
    if not config_groups or not isinstance(saved, dict) or ckpt['solver'].get('phase', 0) != 0:
        return None
    saved_groups = saved.get('param_groups') or []
    if len(saved_groups) != len(config_groups):
        return None
    cycled = CYCLED if (config_schedule or {}).get('cycle_momentum') else ()
    changes = [_change('learning rate', [_made_with(g) for g in saved_groups], [_made_with(g) for g in config_groups])]
    for key in config_groups[0]:
        if key not in ('params', 'lr', 'initial_lr', *cycled) and all(key in g for g in saved_groups):
            changes.append(_change(key, [g[key] for g in saved_groups], [g.get(key) for g in config_groups]))
    saved_schedule = ckpt.get('lr_scheduler')
    if isinstance(config_schedule, dict) and isinstance(saved_schedule, dict):
        for key, value in config_schedule.items():
            if not key.startswith('_') and key not in (*SCHEDULER_PROGRESS, *skip) and key in saved_schedule:
                changes.append(_change(key, [saved_schedule[key]], [value]))
    changes = [c for c in changes if c]
    if not changes:
        return None
    return (
        f"{source}'s optimizer and LR scheduler were made with other settings than this config's: {', '.join(changes)}."
        " A resume goes on with the checkpoint's optimizer and schedule, so it keeps the checkpoint's values and the"
        " config's are not used. To train with them, start a fresh run from these weights"
        ' (SOLVER.MODEL.PRETRAINED_MODEL)'
    )


def _made_with(group):
    return group.get('initial_lr', group.get('lr'))


def _change(name, saved, config):
    """``'name SAVED (this config: CONFIG)'`` when the values differ, else ''; values that are no plain settings
    (a function, a nested state) are not compared."""
    saved, config = [_plain(v) for v in saved], [_plain(v) for v in config]
    if any(v is _OTHER for v in saved + config) or all(_same(a, b) for a, b in zip(saved, config)):
        return ''
    return f'{name} {_shown(saved)} (this config: {_shown(config)})'


_OTHER = object()


def _plain(value):
    if isinstance(value, (list, tuple)):
        items = tuple(_plain(v) for v in value)
        return _OTHER if _OTHER in items else items
    return value if value is None or isinstance(value, (bool, int, float, str)) else _OTHER


def _same(a, b):
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b)
    return a == b


def _shown(values):
    def one(v):
        return (
            f'{v:g}' if isinstance(v, float) else '(' + ', '.join(map(one, v)) + ')' if isinstance(v, tuple) else str(v)
        )

    return one(values[0]) if all(_same(v, values[0]) for v in values) else '[' + ', '.join(map(one, values)) + ']'
