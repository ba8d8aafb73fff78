"""What a checkpoint holds, and putting it back.

One dict of tensors and plain values (so ``torch.load(weights_only=True)`` reads it):
model (unwrapped), its description (``scepter_like.model.description``: what rebuilds the
model without the config), optimizer, LR scheduler, solver progress, every hook's state
(the updater's: optimizer, scheduler, loss aggregator, grad scaler), and the RNG states of every rank; plus meta.

A solver subclass that overrides ``save_checkpoint() -> dict`` / ``load_checkpoint(dict)``
(scepter's signatures) decides what the file holds and how it is put back: CheckpointHook,
a preemption and RESUME_FROM go through the solver's ``training_state`` / ``restore_state``.
"""

import json
import os
import time
from collections import OrderedDict, defaultdict
from collections.abc import Mapping

import torch

from scepter_like.about import __version__
from scepter_like.data.loader import DATA_KEYS, check_splits_agree
from scepter_like.errors import CheckpointError, ConfigError, Preempted
from scepter_like.model.classifier import Classifier
from scepter_like.model.description import check_architecture, describe, parse_description
from scepter_like.opt.schedule_resume import LENGTH_SETTINGS, changed_settings_note, resumed_schedule_note
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.parallel import load_model_state, model_state_dict
from scepter_like.solver.stages import HOOK_KEYS
from scepter_like.utils.checkpoint import (
    CHECKPOINT_DIR,
    JOB_FILE,
    MODEL_DESCRIPTION_KEY,
    atomic_torch_save,
    latest_checkpoint,
    load_torch_file,
    resolve_checkpoint,
    write_latest_pointer,
)
from scepter_like.utils.distributed import all_gather_object, broadcast_object
from scepter_like.utils.launch_env import launcher_jobs
from scepter_like.utils.seed import get_rng_state, set_rng_state
from scepter_like.utils.shared_file import check_every_rank_reads

FORMAT_VERSION = 1


def collect_training_state(solver, every_rank=True):
    """The full training state of ``solver`` (a collective: every rank must call it).

    ``every_rank=False``: no collective; the RNG states are this rank's alone (a rank the
    file lacks keeps its fresh stream on resume).

    metrics.jsonl is written out (after the hooks' ``before_save_checkpoint``, where LogHook
    emits its pending lines), so its lines up to this state survive a resume from it.
    """
    rng = all_gather_object(get_rng_state()) if every_rank else [get_rng_state()]
    ckpt = {
        'format': FORMAT_VERSION,
        'meta': {
            'version': __version__,
            'torch': str(torch.__version__),  # TorchVersion would not load with weights_only=True
            'config': solver.config_text,
            'world_size': solver.world_size,
            'global_batch': _global_batch(solver),
            'train_batches': _train_batches(solver),
            'time': time.time(),
        },
        'model': model_state_dict(solver.model),
        MODEL_DESCRIPTION_KEY: describe(solver.unwrapped_model),
        **solver.updater.state_dict(),  # optimizer, lr_scheduler, loss_aggregator, update
        'solver': progress_state(solver),
        'hooks': {key: hook.state_dict() for key, hook in solver.hooks_by_key().items()},
        'rng': rng,
    }
    for fn in solver.stage_functions('before_save_checkpoint'):
        fn(solver, ckpt)
    if solver.metrics_log is not None:
        solver.metrics_log.flush()
    return ckpt


def write_checkpoint(solver, ckpt, path):
    """Rank 0 writes ``ckpt`` to ``path`` atomically."""
    if solver.is_main:
        atomic_torch_save(ckpt, path)


def plain_state(obj):
    """``obj`` with every mapping a plain dict (scepter's per-mode views too), so ``weights_only`` loads it."""
    if isinstance(obj, Mapping):
        items = {key: plain_state(value) for key, value in obj.items()}
        if type(obj) in (dict, OrderedDict) and all(items[k] is v for k, v in obj.items()):
            return obj  # as it was (a state_dict keeps its metadata)
        return items
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain_state(value) for value in obj)
    return obj


def restore_training_state(solver, ckpt, source):
    """Put ``ckpt`` (as collected above) back into ``solver``; a mismatch is a CheckpointError."""
    if not isinstance(ckpt, dict) or ckpt.get('format') != FORMAT_VERSION or 'solver' not in ckpt:
        raise CheckpointError(f'{source} is not a scepter_like training checkpoint; give one from CheckpointHook')
    fix = 'resume with the config of the run that wrote it, or start a new WORK_DIR'
    check_architecture(ckpt.get(MODEL_DESCRIPTION_KEY), solver.unwrapped_model, source, fix)
    take_data_names(solver, ckpt.get(MODEL_DESCRIPTION_KEY), source)
    load_model_state(solver.model, ckpt['model'], source)
    config_schedule = solver.lr_scheduler.state_dict() if solver.lr_scheduler is not None else None
    config_groups = [dict(g) for g in solver.optimizer.param_groups] if solver.optimizer else None
    solver.updater.load_state_dict(ckpt, ckpt['solver'].get('phase', 0), solver.progress, source)
    length_note = resumed_schedule_note(solver, ckpt, config_schedule, source)
    skip = LENGTH_SETTINGS if length_note else ()  # (named there)
    for note in (length_note, changed_settings_note(config_groups, config_schedule, ckpt, source, skip)):
        if note is not None:
            solver.logger.warning(note)
    progress = dict(ckpt['solver'], iter=_map_position(solver, ckpt, source))
    if _same_cuts(solver, ckpt['meta']) and ckpt['meta'].get('train_batches', 0) not in (0, _train_batches(solver)):
        solver.logger.warning(_epoch_length_note(solver, ckpt, source))
    solver.progress.load_state_dict(progress)
    solver.epoch_outputs = defaultdict(dict, {m: dict(v) for m, v in progress['epoch_outputs'].items()})
    restore_hook_states(solver, ckpt.get('hooks', {}), source)
    if solver.rank < len(ckpt['rng']):  # a rank the checkpoint did not have keeps its fresh SEED + rank stream
        set_rng_state(ckpt['rng'][solver.rank])
    for fn in solver.stage_functions('after_load_checkpoint'):
        fn(solver, ckpt)


def restore_hook_states(solver, saved, source):
    """Each hook takes the state saved under its key (``mode.index.ClassName``, ``build_hooks``).  When the hook
    list changed since (a hook added or removed before it), a hook whose key the file lacks takes the state that
    no key took, saved by a hook of its mode and class, when there is exactly one of each (so the auto-added LrHook
    keeps its record of the epoch step done).  A saved state no hook takes and a hook with state that takes none
    are warnings."""
    hooks = solver.hooks_by_key()
    pairs = {key: key for key in hooks if key in saved}
    saved_left, hooks_left = _by_kind(k for k in saved if k not in pairs), _by_kind(k for k in hooks if k not in pairs)
    for kind, keys in hooks_left.items():
        if len(keys) == 1 and len(saved_left.get(kind, ())) == 1:
            pairs[keys[0]] = saved_left[kind][0]
            if saved[pairs[keys[0]]]:  # (a stateless hook moved: nothing to say)
                solver.logger.info(
                    f'{source}: the state of {_where(solver, pairs[keys[0]])} goes to {_where(solver, keys[0])}'
                    ' (the hook list changed)'
                )
    for key, saved_key in pairs.items():
        hooks[key].load_state_dict(saved[saved_key])
    taken, unpaired = set(pairs.values()), {_kind(key) for key in hooks if key not in pairs}
    for key in saved:
        if key not in taken and saved[key]:
            solver.logger.warning(
                f'{source} holds the state of {_where(solver, key)}, which no hook of this run takes'
                + (f" (which of this run's {_kind(key)[1]}s it was is unknown)" if _kind(key) in unpaired else '')
                + ': it is dropped; resume with the hook list that saved it to keep it'
            )
    for key, hook in hooks.items():
        if (
            key not in pairs
            and getattr(type(hook), 'load_state_dict', Hook.load_state_dict) is not Hook.load_state_dict
        ):
            solver.logger.warning(f'{_where(solver, key)} finds no saved state in {source}: it starts fresh')


def _kind(key):
    """``(mode, ClassName)`` of a hook-state key ``mode.index.ClassName``."""
    mode, _index, name = key.split('.')
    return mode, name


def _by_kind(keys):
    out = defaultdict(list)
    for key in keys:
        out[_kind(key)].append(key)
    return out


def _where(solver, key):
    """A hook-state key as the config place it names: ``ClassName (SOLVER.TRAIN_HOOKS[3])``."""
    mode, index, name = key.split('.')
    return f'{name} ({solver.cfg.path_of(HOOK_KEYS[mode])}[{index}])'


def progress_state(solver):
    """Where training stands: the position of the next train batch and the last results."""
    state = solver.progress.state_dict(eval_pending='eval' in solver.datas and solver.progress.eval_due())
    state['epoch_outputs'] = {m: dict(v) for m, v in solver.epoch_outputs.items()}
    return state


def _global_batch(solver):
    """Train samples per step over all ranks (0 without train data)."""
    bundle = solver.datas.get('train')
    return bundle.batch_size * solver.world_size if bundle is not None else 0


def _train_batches(solver):
    """Batches in a train pass on this rank (0 without train data)."""
    bundle = solver.datas.get('train')
    return bundle.num_batches() if bundle is not None else 0


def _epoch_length_note(solver, ckpt, source):
    """The warning for train data that makes another number of batches per pass than when ``ckpt`` was saved (its
    file, BATCH_SIZE or DROP_LAST changed): the saved position in the epoch no longer means the same samples."""
    saved, now, position = ckpt['meta']['train_batches'], _train_batches(solver), ckpt['solver']['iter']
    past = (
        f'; batch {position + 1} is past the end of an epoch of {now}, so the resumed epoch ends without training'
        if position >= now
        else ''
    )
    return (
        f'{source} was saved with {saved} train batches per epoch and the train data now makes {now} (its file,'
        f' BATCH_SIZE or DROP_LAST changed): the epoch goes on at batch {position + 1}{past}'
    )


def _same_cuts(solver, meta):
    """Whether this run cuts the epoch into the global batches the checkpoint's run did (``meta``: its ``meta``;
    a global batch of 0: no train data then, or written before it was recorded)."""
    return meta.get('world_size', 1) == solver.world_size and meta.get('global_batch', 0) in (0, _global_batch(solver))


def _map_position(solver, ckpt, source):
    """The train batch to continue at: the checkpoint's, or, when the global batch (per-rank batch x world size)
    changed, the same number of samples into the epoch (rounded down, so none is skipped) in this run's batches."""
    progress, meta = ckpt['solver'], ckpt['meta']
    old_world, old_batch, new_batch = meta.get('world_size', 1), meta.get('global_batch', 0), _global_batch(solver)
    if _same_cuts(solver, meta):
        return progress['iter']
    position = progress['iter'] * old_batch // new_batch if old_batch and new_batch else progress['iter']
    if old_world != solver.world_size:
        change = (
            f'was saved with {old_world} processes and this run has {solver.world_size}: model, optimizer and'
            ' counters resume exactly, but the data order and random streams change'
        )
    else:  # the shards interleave one permutation: the same samples in other cuts
        change = f'was saved with global batch {old_batch} and this run has {new_batch}: the samples stay in order'
    solver.logger.warning(
        f'{source} {change}; the epoch continues at batch {position} (batch {progress["iter"]} of global size'
        f' {old_batch} then, {new_batch} now)'
    )
    return position


def load_checkpoint_file(path):
    if str(path).endswith('.safetensors'):
        raise CheckpointError(
            f'{path} holds weights only, not a training state to resume; to start from these weights'
            ' set MODEL.PRETRAINED_MODEL instead of RESUME_FROM'
        )
    return load_torch_file(path, map_location='cpu')


def take_data_names(solver, recorded, source):
    """The model takes the class names and table columns its weights ``source`` were trained on (``recorded``:
    their description, or None; a name it lacks: unrecorded), else the train data's, so its checkpoints and
    exports record them.  Data that numbers its classes, or places its columns, otherwise than recorded is a
    ConfigError (``check_splits_agree``; against the train data's, ``construct_data`` has checked the splits
    already); a Classifier whose logits are not as many as the train data's classes, too
    (``Classifier.check_classes``)."""
    recorded = {key: (recorded or {}).get(key) for key in ('classes', 'columns')}
    if any(value is not None for value in recorded.values()):
        where = {mode: solver.cfg.path_of(key) for mode, key in DATA_KEYS.items()}
        check_splits_agree(solver.datas, where, (recorded, source))
    train = solver.datas.get('train')
    model = solver.unwrapped_model
    if recorded['classes'] is None and getattr(train, 'classes', None) is not None and isinstance(model, Classifier):
        model.check_classes(train.classes, solver.cfg.path_of(DATA_KEYS['train']))
    model.class_names = recorded['classes'] if recorded['classes'] is not None else getattr(train, 'classes', None)
    model.input_columns = recorded['columns'] if recorded['columns'] is not None else getattr(train, 'columns', None)


def check_pretrained_names(solver, recorded):
    """The train data against the class names and table columns PRETRAINED_MODEL's file records (``recorded``: its
    description, or None).  The same names in another order would have the loaded weights read them crossed,
    silently: ``check_splits_agree``'s ConfigError, naming both orders and the key that fixes it.  Other names are
    most often a fine-tune to new classes (or features), but also a renamed folder: other class names are a
    warning naming both lists, and are not checked further."""
    train = solver.datas.get('train')
    if not recorded or train is None:
        return
    source = f'{solver.cfg.MODEL.PRETRAINED_MODEL} (PRETRAINED_MODEL)'
    recorded = parse_description(recorded, source)  # a .safetensors file's is JSON text
    classes, where = recorded.get('classes'), solver.cfg.path_of(DATA_KEYS['train'])
    if None not in (classes, train.classes) and sorted(classes) != sorted(train.classes):
        solver.logger.warning(
            f'{source} was trained on the classes {list(classes)} and {where} has {list(train.classes)}: its outputs'
            ' stand for the old classes until training retrains them'
        )
        classes = None
    columns = {  # the keys read from the same columns as then
        key: names
        for key, names in (recorded.get('columns') or {}).items()
        if sorted(names) == sorted((train.columns or {}).get(key) or [])
    }
    check_splits_agree({'train': train}, {'train': where}, ({'classes': classes, 'columns': columns}, source))


def resume(solver):
    """Resume from RESUME_FROM (a path, or 'auto': the newest complete checkpoint); returns the path or None.

    The model takes the train data's class names and columns first (``take_data_names``); a fresh start checks
    them against PRETRAINED_MODEL's (``check_pretrained_names``)."""
    take_data_names(solver, None, None)
    path = resume_path(solver)
    if path is None:
        # a subclass's own construct_model (scepter's) leaves no description
        check_pretrained_names(solver, getattr(solver, 'pretrained_description', None))
        return None
    solver.restore_state(load_checkpoint_file(path), path)
    progress = solver.progress  # counted from 1, as the log lines count: the next batch's epoch and iter
    # a step checkpoint written after an epoch's last step is not yet finished: that epoch has no batch left
    ended = progress.epoch_finished or progress.iters['train'] >= progress.epoch_iters['train']
    if ended and solver.eval_due():  # its evaluation was cut off
        goes_on = f'the evaluation of epoch {progress.epoch + 1} first'
    elif progress.train_finished():  # MAX_EPOCHS, MAX_STEPS or a stop (EarlyStoppingHook) had ended it
        goes_on = 'the run is finished, nothing is left to train'
    elif ended:  # no evaluation due after it (EVAL_INTERVAL)
        goes_on = f'goes on at epoch {progress.epoch + 2}, iter 1'
    else:
        goes_on = f'goes on at epoch {progress.epoch + 1}, iter {progress.iters["train"] + 1}'
    solver.logger.info(f'resumed from {path} after step {progress.total_iter}: {goes_on}')
    return path


def save_preempted(solver):
    """Write the checkpoint of a signalled stop (every rank) and mark it latest; returns the Preempted to raise."""
    name = f'preempted-step-{solver.progress.total_iter}.pth'
    folder = os.path.join(solver.work_dir, CHECKPOINT_DIR)
    if solver.is_main:
        os.makedirs(folder, exist_ok=True)
    write_checkpoint(solver, solver.training_state(), os.path.join(folder, name))
    if solver.is_main:
        write_latest_pointer(folder, name)
    stop = Preempted(
        solver.progress.stop_signal, solver.progress.total_iter, os.path.join(folder, name), solver.work_dir
    )
    if solver.is_main:  # one line for the job, not one per rank
        solver.logger.warning(str(stop))
    return stop


def restarted(folder):
    """Whether this process is torchrun's elastic agent or SLURM's requeue starting again the job that wrote the
    checkpoints in ``folder`` (its ``job.json``: ``write_latest_pointer``).  A restart of a job whose first attempt
    was refused another run's WORK_DIR is refused it again: it does not take that run over."""
    again = {launcher: job_id for launcher, (job_id, count) in launcher_jobs().items() if count > 0}
    if not again:
        return False
    try:
        with open(os.path.join(folder, JOB_FILE), encoding='utf-8') as f:
            claimed = json.load(f)
    except (OSError, ValueError):
        return False
    return any(claimed.get(launcher) == job_id for launcher, job_id in again.items())


def refuse_to_mix_runs(solver):
    """A fresh training run never writes into a WORK_DIR holding another run's checkpoints (rank 0 looks, all raise).

    Evaluation, inference and export from that folder are fine: only ``solve`` asks.
    """
    folder = os.path.join(solver.work_dir, CHECKPOINT_DIR)
    taken = broadcast_object(latest_checkpoint(folder) if solver.is_main else None)
    if taken is not None:
        raise ConfigError(
            f'{solver.cfg.path_of("WORK_DIR")}: {solver.work_dir} holds the checkpoints of an earlier run'
            f' (latest: {os.path.basename(taken)}); continue it with SOLVER.RESUME_FROM=auto,'
            ' or give a new SOLVER.WORK_DIR'
        )


def resume_path(solver):
    """The checkpoint RESUME_FROM names (``auto``: the newest complete one in WORK_DIR), or None.

    A restarted job (``restarted``) with RESUME_FROM empty resumes as with ``auto``.

    Rank 0 decides, so every rank resumes from the same file or none starts fresh alone;
    a file some rank cannot see, or sees with other bytes, is a ConfigError (``check_every_rank_reads``).
    """
    folder = os.path.join(solver.work_dir, CHECKPOINT_DIR)
    resume_from = solver.resume_from or ('auto' if broadcast_object(solver.is_main and restarted(folder)) else '')
    if not resume_from:
        return None
    if resume_from == 'auto':
        path = broadcast_object(latest_checkpoint(folder) if solver.is_main else None)
        if path is None:
            solver.logger.info(f'RESUME_FROM auto: no checkpoint in {folder}; starting fresh')
            return None
    else:
        path = resolve_checkpoint(resume_from, where=solver.cfg.path_of('RESUME_FROM'))  # a run's folder: its latest
    check_every_rank_reads(path, f'{solver.cfg.path_of("RESUME_FROM")}: checkpoint')
    return path
