"""torch.distributed set-up from torchrun's variables, and the few collectives we use.

Every function works at world size 1 without a process group, so code calls them
unconditionally.
"""

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from scepter_like.errors import DistributedError


@dataclass
class DistInfo:
    """Where this process sits: rank, world size, local rank and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device('cpu')
    backend: str = ''

    @property
    def is_main(self):
        return self.rank == 0

    @property
    def distributed(self):
        return self.world_size > 1


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None or value == '':
        return default
    try:
        return int(value)
    except ValueError:
        raise DistributedError(f'environment variable {name}={value!r} is not an integer') from None


def init_distributed(backend='', timeout_s=1800, device=''):
    """Read torchrun's RANK / WORLD_SIZE / LOCAL_RANK; init the process group if > 1 process.

    ``backend`` '' picks nccl when CUDA is available and gloo otherwise; ``device`` ''
    picks ``cuda:LOCAL_RANK`` when CUDA is available and the CPU otherwise.
    """
    rank = _env_int('RANK', 0)
    world_size = _env_int('WORLD_SIZE', 1)
    local_rank = _env_int('LOCAL_RANK', 0)
    cuda = torch.cuda.is_available()
    if device:
        dev = torch.device(device)
        if dev.type == 'cuda' and dev.index is None:
            dev = torch.device('cuda', local_rank)
    else:
        dev = torch.device('cuda', local_rank) if cuda else torch.device('cpu')
    if dev.type == 'cuda':
        if not cuda:
            raise DistributedError(f'ENV.DEVICE is {device!r} but CUDA is not available; use cpu or leave it empty')
        torch.cuda.set_device(dev)
    backend = backend or ('nccl' if dev.type == 'cuda' else 'gloo')
    if world_size > 1 and not dist.is_initialized():
        try:
            dist.init_process_group(
                backend=backend,
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout_s),
                device_id=dev if dev.type == 'cuda' else None,
            )
        except (RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DistributedError(
                f'could not join the process group (backend {backend}, rank {rank} of {world_size}): {first};'
                ' check MASTER_ADDR / MASTER_PORT and that every node started'
            ) from None
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=dev, backend=backend)


def destroy_distributed():
    """Tear the process group down if one is up (safe to call at any time)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_dist():
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def get_rank():
    return dist.get_rank() if is_dist() else 0


def get_world_size():
    return dist.get_world_size() if is_dist() else 1


def all_reduce_sum(tensor):
    """Sum ``tensor`` over all ranks in place (no-op without a process group)."""
    if is_dist():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor):
    if is_dist():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def all_gather_object(obj):
    """List of ``obj`` from every rank (``[obj]`` alone)."""
    if not is_dist():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, src=0):
    if not is_dist():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier():
    if is_dist():
        dist.barrier()
