"""What a checkpoint holds, and putting it back.

One dict of tensors and plain values (so ``torch.load(weights_only=True)`` reads it):
model (unwrapped), optimizer, LR scheduler, solver progress, every hook's state (the
grad scaler lives in BackwardHook's), and the RNG states of every rank; plus meta.
"""

import time

import torch

import scepter_like
from scepter_like.errors import CheckpointError
from scepter_like.utils.checkpoint import load_state_dict_checked, load_torch_file, unwrap_model
from scepter_like.utils.distributed import all_gather_object
from scepter_like.utils.seed import get_rng_state, set_rng_state

FORMAT_VERSION = 1


def collect_training_state(solver):
    """The full training state of ``solver`` (a collective: every rank must call it)."""
    rng = all_gather_object(get_rng_state())
    ckpt = {
        'format': FORMAT_VERSION,
        'meta': {
            'version': scepter_like.__version__,
            'torch': str(torch.__version__),
            'config': solver.cfg.root.dump(),
            'world_size': solver.world_size,
            'time': time.time(),
        },
        'model': unwrap_model(solver.model).state_dict(),
        'optimizer': solver.optimizer.state_dict() if solver.optimizer is not None else None,
        'lr_scheduler': solver.lr_scheduler.state_dict() if solver.lr_scheduler is not None else None,
        'solver': solver.progress_state(),
        'hooks': {key: hook.state_dict() for key, hook in solver.hooks_by_key().items()},
        'rng': rng,
    }
    for fn in solver.stage_functions('before_save_checkpoint'):
        fn(solver, ckpt)
    return ckpt


def restore_training_state(solver, ckpt, source):
    """Put ``ckpt`` (as collected above) back into ``solver``; a mismatch is a CheckpointError."""
    if not isinstance(ckpt, dict) or ckpt.get('format') != FORMAT_VERSION or 'solver' not in ckpt:
        raise CheckpointError(f'{source} is not a scepter_like training checkpoint; give one from CheckpointHook')
    load_state_dict_checked(unwrap_model(solver.model), ckpt['model'], source)
    for name, obj in (('optimizer', solver.optimizer), ('lr_scheduler', solver.lr_scheduler)):
        if obj is not None and ckpt.get(name) is not None:
            try:
                obj.load_state_dict(ckpt[name])
            except (ValueError, KeyError, RuntimeError) as e:
                raise CheckpointError(f'{source}: the {name} state does not fit this config ({e})') from None
    solver.load_progress_state(ckpt['solver'])
    saved_hooks = ckpt.get('hooks', {})
    for key, hook in solver.hooks_by_key().items():
        if key in saved_hooks:
            hook.load_state_dict(saved_hooks[key])
    world = ckpt['meta'].get('world_size', 1)
    if world == solver.world_size:
        set_rng_state(ckpt['rng'][solver.rank])
    else:
        solver.logger.warning(
            f'{source} was saved with {world} processes and this run has {solver.world_size}: model and optimizer'
            ' resume exactly, but the data order and random streams change'
        )
        set_rng_state(ckpt['rng'][0])
    for fn in solver.stage_functions('after_load_checkpoint'):
        fn(solver, ckpt)


def load_checkpoint_file(path):
    if str(path).endswith('.safetensors'):
        raise CheckpointError(
            f'{path} holds weights only, not a training state to resume; to start from these weights'
            ' set MODEL.PRETRAINED_MODEL instead of RESUME_FROM'
        )
    return load_torch_file(path, map_location='cpu')
