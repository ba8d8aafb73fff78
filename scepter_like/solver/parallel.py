"""Placing the model on its device and wrapping it for data parallelism (DDP or FSDP2).

Checkpoints always hold the plain state dicts of the unwrapped model and optimizer:
under FSDP the sharded DTensors are gathered to full tensors on save (a collective:
every rank calls it) and split again on load, so one checkpoint moves freely between
a single process, DDP and FSDP, and between world sizes.
"""

import contextlib
import sys

from torch.nn.parallel import DistributedDataParallel

from scepter_like.utils.checkpoint import load_state_dict_checked, unwrap_model

PARALLEL_MODES = ('ddp', 'fsdp')


def wrap_model(model, dist_info, parallel='ddp', find_unused_parameters=False):
    """Move ``model`` to this rank's device; wrap it (DDP or FSDP) when more than one process runs."""
    model.to(dist_info.device)
    if not dist_info.distributed:
        return model
    if parallel == 'fsdp':
        return _fully_shard(model, dist_info)
    device_ids = [dist_info.device.index] if dist_info.device.type == 'cuda' else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)


def _fully_shard(model, dist_info):
    """FSDP2: each top-level child with parameters is one unit (gathered in its own forward), then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(dist_info.device.type, (dist_info.world_size,))
    for child in model.children():
        if any(p.requires_grad for p in child.parameters()):
            fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_fsdp(model):
    fsdp = sys.modules.get('torch.distributed.fsdp')  # not imported: nothing can be FSDP (and no import cost)
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def _is_dtensor(value):
    tensor = sys.modules.get('torch.distributed.tensor')
    return tensor is not None and isinstance(value, tensor.DTensor)


def full_tensor(value):
    """A DTensor gathered to a plain tensor (a collective when sharded); anything else as is."""
    return value.detach().full_tensor() if _is_dtensor(value) else value


def _shard_like(full, like):
    """``full`` cut to this rank's shard of ``like`` (every rank holds ``full``: no communication)."""
    from torch.distributed.tensor import distribute_tensor

    local = full.detach().to(device=like.device, dtype=like.dtype)
    return distribute_tensor(local, like.device_mesh, like.placements, src_data_rank=None)


def place_like(value, own):
    """The full tensor ``value`` as ``own`` holds it: cut to this rank's shard when ``own`` is an FSDP DTensor,
    else on its device and dtype (no communication)."""
    return _shard_like(value, own) if _shards(own, value) else value.to(own.device, own.dtype)


def model_state_dict(model):
    """The unwrapped model's state dict with full tensors (a collective under FSDP)."""
    return {k: full_tensor(v) for k, v in unwrap_model(model).state_dict().items()}


def optimizer_state_dict(optimizer):
    """``optimizer.state_dict()`` with full tensors (a collective under FSDP)."""
    state = optimizer.state_dict()
    state['state'] = {i: {k: full_tensor(v) for k, v in s.items()} for i, s in state['state'].items()}
    return state


def load_model_state(model, state, source):
    """Load a full state dict into ``model`` (sharding it under FSDP); mismatches raise CheckpointError."""
    model = unwrap_model(model)
    own = model.state_dict()
    state = {
        k: _shard_like(v, own[k]) if _shards(own.get(k), v) else v  # DTensors (a sharded copy) load as they are
        for k, v in state.items()
    }
    return load_state_dict_checked(model, state, source)


def _shards(own, value):
    """Whether the full tensor ``value`` is to be cut to the shard of the model's DTensor ``own``."""
    return _is_dtensor(own) and not _is_dtensor(value) and value.shape == own.shape


def load_optimizer_state(optimizer, state):
    """``optimizer.load_state_dict`` of a full state, sharding tensors shaped like their FSDP parameter."""
    params = [p for group in optimizer.param_groups for p in group['params']]
    if any(_is_dtensor(p) for p in params):
        state = dict(state)
        state['state'] = {
            i: {
                k: _shard_like(v, params[i]) if _is_dtensor(params[i]) and v.shape == params[i].shape else v
                for k, v in s.items()
            }
            for i, s in state['state'].items()
        }
    optimizer.load_state_dict(state)


@contextlib.contextmanager
def _gathered(model):
    units = [m for m in model.modules() if is_fsdp(m)]  # unshard / reshard act on one unit, not its children
    model.set_reshard_after_forward(False)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        model.set_reshard_after_forward(True)


def eval_context(model):
    """Around an eval / test pass: under FSDP gather the parameters once, so that the
    forward passes hold no collectives and ranks may run different numbers of batches
    (eval shards are not padded).  A no-op otherwise."""
    if model is not None and is_fsdp(model):
        return _gathered(model)
    return contextlib.nullcontext()
