"""What a resume does to an LR schedule whose length the interrupted run fixed.

torch's schedulers keep their settings in their state (``CosineAnnealingLR``'s ``T_max``,
``OneCycleLR``'s ``total_steps``), so a resumed scheduler runs on with the checkpoint's
settings, whatever the resuming config says.  When the resuming run is longer or shorter
than the one that wrote the checkpoint (another MAX_EPOCHS or MAX_STEPS), that is rarely
what the user meant and easy to miss (a cosine schedule climbs back up after ``T_max``), so
the resume says it once, naming the length kept and the config's own where they differ.  The
same holds for the learning rate: the checkpoint's optimizer keeps the rate it was made with,
so a resume under a config with another LEARNING_RATE says that too.
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


def changed_lr_note(config_lrs, ckpt, source):
    """The warning for a resume whose config sets other learning rates than the checkpoint's optimizer was made
    with (the first phase's): the checkpoint's optimizer and schedule go on, so the config's rates are not used;
    or None.  ``config_lrs``: each parameter group's rate as this config built it."""
    saved = ckpt.get('optimizer')
    if not config_lrs or not isinstance(saved, dict) or ckpt['solver'].get('phase', 0) != 0:
        return None
    made_with = [group.get('initial_lr', group.get('lr')) for group in saved.get('param_groups') or []]
    if len(made_with) != len(config_lrs) or all(math.isclose(a, b) for a, b in zip(made_with, config_lrs)):
        return None
    return (
        f"{source}'s optimizer was made with learning rate {_rates(made_with)} and this config sets"
        f" {_rates(config_lrs)}: a resume goes on with the checkpoint's optimizer and schedule, so the config's"
        ' rate is not used. To train at it, start a fresh run from these weights (SOLVER.MODEL.PRETRAINED_MODEL)'
    )


def _rates(lrs):
    return f'{lrs[0]:g}' if len(set(lrs)) == 1 else '[' + ', '.join(f'{lr:g}' for lr in lrs) + ']'
