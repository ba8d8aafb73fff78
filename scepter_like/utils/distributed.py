"""torch.distributed set-up from torchrun's (or SLURM's) variables, and the few collectives we use.

Every function works at world size 1 without a process group, so code calls them
unconditionally.
"""

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from scepter_like.errors import DistributedError
from scepter_like.utils.launch_env import read_launch_env


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


def current_dist_info():
    """The DistInfo of this process as it stands (after ``init_distributed``): for what is built away from the
    solver, which keeps its own."""
    local_rank = int(os.environ.get('LOCAL_RANK', 0))
    device = torch.device('cuda', torch.cuda.current_device()) if torch.cuda.is_available() else torch.device('cpu')
    return DistInfo(rank=get_rank(), world_size=get_world_size(), local_rank=local_rank, device=device)


def default_device(local_rank):
    """``cuda:local_rank`` where CUDA is available, else the CPU: the device ENV.DEVICE '' picks."""
    return torch.device('cuda', local_rank) if torch.cuda.is_available() else torch.device('cpu')


def init_distributed(backend='', timeout_s=1800, device=''):
    """Read torchrun's (or SLURM's, see ``launch_env``) rank and world size; init the process group if > 1 process.

    ``backend`` '' picks nccl when CUDA is available and gloo otherwise; ``device`` ''
    picks ``cuda:LOCAL_RANK`` when CUDA is available and the CPU otherwise.
    """
    launch = read_launch_env()
    rank, world_size, local_rank = launch.rank, launch.world_size, launch.local_rank
    if launch.launcher == 'slurm':  # torchrun's names, for init_process_group and everything after it
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(local_rank),
            MASTER_ADDR=launch.master_addr,
            MASTER_PORT=launch.master_port,
        )
    cuda = torch.cuda.is_available()
    if device:
        dev = torch.device(device)
        if dev.type == 'cuda' and dev.index is None:
            dev = torch.device('cuda', local_rank)
    else:
        dev = default_device(local_rank)
    if dev.type == 'cuda':
        if not cuda:
            raise DistributedError(f'ENV.DEVICE is {device!r} but CUDA is not available; use cpu or leave it empty')
        if dev.index >= torch.cuda.device_count():
            raise DistributedError(
                f'ENV.DEVICE is {str(dev)!r} but this machine has {torch.cuda.device_count()} CUDA device(s);'
                ' use cuda:0 ... or leave it empty'
            )
        torch.cuda.set_device(dev)
    backend = backend or ('nccl' if dev.type == 'cuda' else 'gloo')
    if world_size > 1 and backend == 'nccl' and dev.type != 'cuda':
        raise DistributedError(
            f'ENV.BACKEND nccl runs on CUDA devices, and this process has {dev}; use gloo, or leave ENV.BACKEND empty'
        )
    if world_size > 1 and not dist.is_initialized():
        logging.getLogger(__name__).info(launch.waiting_line(timeout_s))  # the wait below is silent until then
        try:
            timeout = datetime.timedelta(seconds=timeout_s)
            dist.init_process_group(
                backend=backend,
                store=_attempt_store(launch, timeout),
                rank=rank,
                world_size=world_size,
                timeout=timeout,
                device_id=dev if dev.type == 'cuda' else None,
            )
        except (RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0].rstrip('.') if str(e).strip() else type(e).__name__
            hint = (
                f'; SLURM_NTASKS is {world_size}: start the tasks with srun (a plain python in a batch script is one'
                ' task, which waits for the others in vain)'
                if launch.launcher == 'slurm'
                else ''
            )
            raise DistributedError(
                f'could not join the process group (backend {backend}, rank {rank} of {world_size}): {first};'
                f' check MASTER_ADDR / MASTER_PORT and that every node started{hint}'
            ) from None
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=dev, backend=backend)


def _attempt_store(launch, timeout):
    """Under torchrun, the rendezvous store with its keys under this attempt's prefix; else None (env://).

    After an elastic restart, torch's own env:// rendezvous can hand a rank the address a
    peer of the failed attempt published, and gloo then fails to connect; a prefix per
    attempt (TORCHELASTIC_RESTART_COUNT) keeps the attempts apart.  The agent hosts the
    store when TORCHELASTIC_USE_AGENT_STORE says so; otherwise rank 0 does.
    """
    if 'TORCHELASTIC_RESTART_COUNT' not in os.environ:
        return None
    agent_hosts = os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True'
    store = dist.TCPStore(
        launch.master_addr or 'localhost',
        int(launch.master_port or 29500),
        launch.world_size,
        is_master=launch.rank == 0 and not agent_hosts,
        timeout=timeout,
        wait_for_workers=False,
    )
    return dist.PrefixStore(f'scepter_like/attempt{os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")}', store)


# what gloo and nccl say when another process of the job went away mid-collective
PEER_LOST_TEXTS = ('Connection closed by peer', 'Connection reset by peer', 'remote process exited')
PEER_LATE_TEXT = 'Timed out waiting'  # gloo: a peer took no part within the process group's timeout


def lost_peer(error):
    """Why ``error`` is a collective's failure for another process of the job, not a failure of this one: 'lost'
    (it died or left; its own log says why) or 'late' (it took no part within ENV.DIST_TIMEOUT: stopped, stuck, or
    far behind); None otherwise."""
    if isinstance(error, dist.DistNetworkError):
        return 'lost'
    if not isinstance(error, RuntimeError):
        return None
    text = str(error)
    if any(said in text for said in PEER_LOST_TEXTS):
        return 'lost'
    return 'late' if PEER_LATE_TEXT in text else None


def destroy_distributed():
    """Tear the process group down if one is up (safe to call at any time); whether one was."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        return True
    return False


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
