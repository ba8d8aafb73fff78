"""Crash-safe file writes and safe loading of checkpoints and weights.

Every file is written to a temporary name in its own folder, flushed and fsynced, then
``os.replace``d over the target and the folder fsynced: a crash at any instant leaves
either the old file or the complete new one.  A write the disk refuses (full, over quota)
removes its temp file and is one CheckpointError naming the file and the space left.  Checkpoints are read with
``torch.load(weights_only=True)``, so a file can never run code.
"""

import errno
import json
import os
import pickle
import shutil
import threading
import zipfile

import torch

from scepter_like.errors import CheckpointError
from scepter_like.utils.launch_env import launcher_jobs

TMP_PREFIX = '.tmp.'
MODEL_DESCRIPTION_KEY = 'model_description'  # see scepter_like.model.description


def _fsync_dir(folder):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path):
    """Flush ``path``'s data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(path, write_tmp):
    """Call ``write_tmp(tmp_path)`` for a temp file beside ``path``; returns the temp path.

    The file is neither durable nor in place yet: ``commit_temp`` makes it both.  A crash
    in between leaves only the temp file, which ``remove_temp_files`` deletes.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f'{TMP_PREFIX}{os.path.basename(path)}.{os.getpid()}')
    try:
        write_tmp(tmp)
    except BaseException as e:
        _failed_write(e, tmp, path)
    return tmp


def commit_temp(tmp, path):
    """fsync ``tmp``, move it over ``path``, fsync the folder: ``path`` is then complete and durable."""
    try:
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        _failed_write(e, tmp, path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


NO_SPACE = {errno.ENOSPC: 'no space left on the device', errno.EDQUOT: 'the disk quota is exceeded'}
# what torch.save's C++ writer says when the stream fails under it (it keeps no errno)
TORCH_WRITE_FAILURES = ('iostream error', 'unexpected pos', 'file write failed', 'PytorchStreamWriter failed')
FULL_BYTES = 1 << 20  # less free space than this after a failed torch.save: the disk was full


def _failed_write(error, tmp, path):
    """Remove ``tmp`` and raise: a refused write (a full disk, a quota) as one CheckpointError naming ``path``
    and the space left in its folder, anything else as it is."""
    folder = os.path.dirname(os.path.abspath(path))
    free_before = _free_bytes(folder)
    _remove_if_present(tmp)
    reason = None
    if isinstance(error, OSError):
        reason = NO_SPACE.get(error.errno)
    elif isinstance(error, RuntimeError) and any(s in str(error) for s in TORCH_WRITE_FAILURES):
        first = str(error).strip().splitlines()[0] if str(error).strip() else 'the write failed'
        reason = NO_SPACE[errno.ENOSPC] if free_before is not None and free_before < FULL_BYTES else first
    if reason is None:
        raise error
    free = _free_bytes(folder)
    where = f' ({free / 2**20:.0f} MiB free in {folder})' if free is not None else ''
    raise CheckpointError(
        f'writing {path} failed: {reason}{where}; make room there or write to another disk'
        ' (the files written before it are intact)'
    ) from error


def _free_bytes(folder):
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _remove_if_present(path):
    if os.path.exists(path):
        os.remove(path)


def atomic_write(path, write_fn, mode='wb'):
    """Call ``write_fn(file)`` on a temp file beside ``path``, then move it into place."""

    def write_tmp(tmp):
        with open(tmp, mode) as f:
            write_fn(f)

    commit_temp(write_temp(path, write_tmp), path)


def atomic_write_text(path, text):
    atomic_write(path, lambda f: f.write(text), mode='w')


def torch_save_temp(obj, path):
    """``torch.save`` into a temp file beside ``path`` (see ``write_temp``); returns the temp path."""
    # torch.save to a path writes through its own C++ writer: faster than through a Python file object
    return write_temp(path, lambda tmp: torch.save(obj, tmp))


def atomic_torch_save(obj, path):
    commit_temp(torch_save_temp(obj, path), path)


def remove_temp_files(folder):
    """Delete temp files a crashed save left in ``folder``; returns their names."""
    if not os.path.isdir(folder):
        return []
    removed = []
    for name in os.listdir(folder):
        if name.startswith(TMP_PREFIX):
            os.remove(os.path.join(folder, name))
            removed.append(name)
    return removed


def load_torch_file(path, map_location='cpu'):
    """``torch.load(weights_only=True)`` with every failure turned into one clear CheckpointError."""
    if not os.path.isfile(path):
        raise CheckpointError(f'checkpoint not found: {path}; check the path')
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f'{path} is not a readable checkpoint (no torch zip archive: truncated, or another kind of file)'
        )
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ''
        if 'Weights only load failed' in str(e) or 'Unsupported' in str(e) or 'global' in str(e).lower():
            raise CheckpointError(
                f'refused to load {path}: it holds pickled Python objects beyond tensors and plain values'
                ' (weights_only=True); export its weights to .safetensors from a trusted environment'
            ) from None
        raise CheckpointError(f'{path} is not a readable checkpoint ({detail}); it may be truncated') from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f'{path} is not a readable checkpoint ({detail}); it may be truncated') from None


def unwrap_model(model):
    """The user's module inside DDP / FSDP / compile wrappers."""
    while True:
        inner = getattr(model, 'module', None) or getattr(model, '_orig_mod', None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def load_weights_file(path, eval_weights=False):
    """A state dict from a ``.safetensors`` file or a torch file (a checkpoint's ``model`` or a bare state dict).

    With ``eval_weights``, a training checkpoint gives the weights its evaluation used
    (``eval_model``: e.g. the EMA, when EMAHook evaluates with it) instead of the raw ones.
    """
    return load_weights_and_description(path, eval_weights)[0]


def load_weights_and_description(path, eval_weights=False):
    """(state dict, the model description the file carries or None): see ``load_weights_file``.

    The description is a checkpoint's ``model_description`` entry or a ``.safetensors``
    file's metadata of that name (JSON text); ``scepter_like.model.description`` reads it.
    """
    if not os.path.isfile(path):
        raise CheckpointError(f'weights file not found: {path}; check the path')
    if path.endswith('.safetensors'):
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(path), read_safetensors_metadata(path).get(MODEL_DESCRIPTION_KEY)
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f'{path} is not a valid .safetensors file ({str(e).splitlines()[0]})') from None
    data = load_torch_file(path)
    state = weights_in(data, path, eval_weights)
    return state, data.get(MODEL_DESCRIPTION_KEY) if state is not data else None


WRAPPER_PREFIXES = ('module.', '_orig_mod.')  # what DDP and torch.compile put before a wrapped model's keys


def weights_in(data, path, eval_weights=False):
    """The state dict a loaded torch file ``data`` holds: a checkpoint's ``model`` (with ``eval_weights``
    its ``eval_model`` when it has one), the ``state_dict`` of scepter's checkpoints, or ``data`` itself when it
    is a bare state dict.  Keys a wrapper prefixed (``module.`` of a DDP model's ``state_dict()``) lose the prefix."""
    keys = ('eval_model', 'model', 'state_dict') if eval_weights else ('model', 'state_dict')
    state = next((data[k] for k in keys if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if state is None and isinstance(data, dict) and all(isinstance(v, torch.Tensor) for v in data.values()):
        state = data
    if state is None:
        raise CheckpointError(
            f'{path} holds no model weights (expected a state dict, or a checkpoint with "model" or "state_dict")'
        )
    while state and (prefix := next((p for p in WRAPPER_PREFIXES if all(k.startswith(p) for k in state)), None)):
        state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def load_state_dict_checked(model, state, source, strict=True, strict_key=None):
    """Load ``state`` into ``model``; a mismatch raises one readable CheckpointError.

    The message lists missing, unexpected and mis-shaped keys (the first few of each).  Not ``strict`` (finetuning,
    a new head of another class count), all three are allowed: mis-shaped keys keep the model's own values.
    Returns ``(missing, unexpected, mis-shaped)``, the last as ``'key (file shape) vs model (shape)'`` texts.
    ``strict_key``: the config key that turns strict loading off, named in the error where there is one.
    """
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shaped = [
        k for k in own if k in state and hasattr(state[k], 'shape') and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    shaped_text = [f'{k} {tuple(state[k].shape)} vs model {tuple(own[k].shape)}' for k in shaped]
    if strict and (missing or unexpected or shaped):
        parts = []
        for label, items in (('missing', missing), ('unexpected', unexpected), ('mis-shaped', shaped_text)):
            if items:
                more = f' (+{len(items) - 5} more)' if len(items) > 5 else ''
                parts.append(f'{label}: {", ".join(items[:5])}{more}')
        raise CheckpointError(
            f'weights in {source} do not fit the model — {"; ".join(parts)}; use weights of this model'
            + (f' or set {strict_key} false' if strict_key else '')
        )
    if shaped:
        kept_own = set(shaped)
        state = {k: v for k, v in state.items() if k not in kept_own}
    model.load_state_dict(state, strict=strict)
    return missing, unexpected, shaped_text


CHECKPOINT_DIR = 'checkpoints'  # inside WORK_DIR
LATEST_POINTER = 'latest'
JOB_FILE = 'job.json'  # beside LATEST_POINTER: the job that moved it last (write_latest_pointer)
BEST_SUFFIX = '-best.pth'  # CheckpointHook's best checkpoint: {prefix}-best.pth
RUN_CHOICES = ('best', 'last')  # RUN:best, RUN:last


def write_latest_pointer(folder, filename):
    """Point ``folder/latest`` at ``filename`` (a complete checkpoint in ``folder``), atomically.

    Under a launcher that restarts jobs (torchrun's elastic agent, SLURM's requeue), ``folder/job.json`` then names
    the job that wrote it, so that only that job's restarts resume it by themselves (``checkpoint_state.restarted``).
    """
    atomic_write_text(os.path.join(folder, LATEST_POINTER), filename + '\n')
    job = {launcher: job_id for launcher, (job_id, _) in launcher_jobs().items()}
    if job:
        atomic_write_text(os.path.join(folder, JOB_FILE), json.dumps(job) + '\n')


def latest_checkpoint(folder):
    """The checkpoint ``folder/latest`` names, or None when there is none."""
    pointer = os.path.join(folder, LATEST_POINTER)
    if not os.path.isfile(pointer):
        return None
    with open(pointer, encoding='utf-8') as f:
        name = f.read().strip()
    path = os.path.join(folder, name)
    if not name or not os.path.isfile(path):
        raise CheckpointError(
            f'{pointer} names {name!r}, which is missing; remove the pointer or give RESUME_FROM a path'
        )
    return path


def best_checkpoint(folder):
    """The best checkpoint CheckpointHook keeps in ``folder`` (``{prefix}-best.pth``), or None.

    Several (two CheckpointHooks with different prefixes) is a CheckpointError naming them.
    """
    if not os.path.isdir(folder):
        return None
    found = sorted(name for name in os.listdir(folder) if name.endswith(BEST_SUFFIX))
    if len(found) > 1:
        raise CheckpointError(f'{folder} holds several best checkpoints ({", ".join(found)}); give the file')
    return os.path.join(folder, found[0]) if found else None


def resolve_checkpoint(path, where=''):
    """The checkpoint file ``path`` names: a file as it is; a run's folder (a WORK_DIR or its checkpoints/)
    for the checkpoint its ``latest`` names; ``RUN:last`` likewise; ``RUN:best`` for its best checkpoint.

    ``where`` (a config path) starts the error of a folder that holds none.
    """
    path = os.fspath(path)
    where = f'{where}: ' if where else ''
    run, _, choice = path.rpartition(':')
    if not os.path.exists(path) and choice in RUN_CHOICES and run:
        if not os.path.isdir(run):
            raise CheckpointError(
                f'{where}{path}: no run folder {run}; give a WORK_DIR (or its checkpoints/) before :{choice}'
            )
        find, what = (best_checkpoint, 'best') if choice == 'best' else (latest_checkpoint, 'latest')
    elif os.path.isdir(path):
        run, find, what = path, latest_checkpoint, 'latest'
    else:
        return path
    for folder in (run, os.path.join(run, CHECKPOINT_DIR)):
        found = find(folder)
        if found:
            return found
    hint = ' (CheckpointHook SAVE_BEST_BY keeps one)' if what == 'best' else ''
    raise CheckpointError(
        f'{where}{run} is a folder without a {what} checkpoint{hint}; give a .pth or .safetensors file'
    )


def safetensors_ready(state_dict):
    """``state_dict`` as safetensors takes it: CPU tensors, contiguous, none sharing memory.

    Tensors that share memory become separate copies, so tied weights (an embedding
    shared with a head) export without error.
    """
    seen, tensors = {}, {}
    for key, tensor in state_dict.items():
        tensor = tensor.detach()
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        tensors[key] = tensor.clone().contiguous() if ptr in seen or not tensor.is_contiguous() else tensor
        seen[ptr] = key
    return {k: v.cpu() for k, v in tensors.items()}


def load_pretrained(model, model_cfg, logger):
    """Load MODEL.PRETRAINED_MODEL into ``model`` (strict unless PRETRAINED_STRICT is false), if it names a file;
    returns the model description the file carries (None: none, or no file)."""
    pretrained = model_cfg.get('PRETRAINED_MODEL')
    if not pretrained:
        return None
    where = model_cfg.path_of('PRETRAINED_MODEL')
    try:
        state, description = load_weights_and_description(pretrained)
    except CheckpointError as e:
        raise CheckpointError(f'{where}: {e}') from None
    missing, unexpected, shaped = load_state_dict_checked(
        model, state, pretrained, model_cfg.get('PRETRAINED_STRICT', True), model_cfg.path_of('PRETRAINED_STRICT')
    )
    logger.info(
        f'{where}: loaded pretrained weights from {pretrained}'
        + (f' ({len(missing)} missing, {len(unexpected)} unexpected keys)' if missing or unexpected else '')
    )
    if shaped:  # a new head, most likely; anything else the user should see
        more = f' (+{len(shaped) - 5} more)' if len(shaped) > 5 else ''
        logger.warning(
            f'{model_cfg.path_of("PRETRAINED_STRICT")} false: {len(shaped)} mis-shaped key(s) of {pretrained} keep'
            f' their fresh values: {", ".join(shaped[:5])}{more}'
        )
    return description


def save_safetensors(state_dict, path, metadata=None):
    """Write ``state_dict`` as ``.safetensors`` atomically; ``metadata`` values become strings."""
    from safetensors.torch import save

    blob = save(safetensors_ready(state_dict), metadata={k: str(v) for k, v in (metadata or {}).items()})
    atomic_write(path, lambda f: f.write(blob))


def read_safetensors_metadata(path):
    """The metadata dict of a ``.safetensors`` file."""
    from safetensors import safe_open

    with safe_open(path, framework='pt') as f:
        return dict(f.metadata() or {})


def cpu_snapshot(obj):
    """A copy of ``obj`` whose tensors are fresh CPU copies, safe to write while training goes on."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to('cpu', copy=True)
    if isinstance(obj, dict):
        return {k: cpu_snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_snapshot(v) for v in obj)
    return obj


class BackgroundWriter:
    """Runs one write at a time in a thread; ``wait`` joins it and re-raises what it raised.

    The thread is not a daemon, so a normal interpreter exit still finishes the write; a
    crash loses it, which the atomic write turns into "the previous checkpoint stays".
    """

    def __init__(self):
        self._thread = None
        self._error = None

    def submit(self, fn):
        self.wait()

        def run():
            try:
                fn()
            except BaseException as e:  # handed to the training thread by wait()
                self._error = e

        self._thread = threading.Thread(target=run, name='checkpoint-writer')
        self._thread.start()

    def wait(self):
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
