"""``scepter.modules.utils.distribute`` maps here: ``we``, ``barrier``, ``gather_data`` and friends.

scepter keeps the process's place in a mutable global (``we``) that its launcher fills
in.  Here ``we`` is a read-only view: every attribute is read, when asked, from the live
``torch.distributed`` process group and torchrun's environment variables, so it is
right whoever set the group up and cannot drift from it.
"""

import os

import torch
import torch.distributed as dist

from scepter_like.utils.distributed import all_gather_object, barrier, get_rank, get_world_size, is_dist

__all__ = [
    'we',
    'barrier',
    'gather_data',
    'gather_list',
    'gather_picklable',
    'get_dist_info',
    'broadcast',
    'all_reduce',
]


class WorkEnv:
    """Read-only view of this process's place in the job (scepter's ``we``)."""

    __slots__ = ()

    @property
    def initialized(self):
        return dist.is_available() and dist.is_initialized()

    @property
    def is_distributed(self):
        return is_dist()

    @property
    def rank(self):
        return get_rank() if self.initialized else int(os.environ.get('RANK', 0))

    @property
    def world_size(self):
        return get_world_size() if self.initialized else int(os.environ.get('WORLD_SIZE', 1))

    @property
    def local_rank(self):
        return int(os.environ.get('LOCAL_RANK', 0))

    @property
    def device_id(self):
        """The current CUDA device index, or ``'cpu'`` without CUDA (``tensor.to(we.device_id)`` works for both)."""
        return torch.cuda.current_device() if torch.cuda.is_available() else 'cpu'

    @property
    def device_count(self):
        return int(os.environ.get('LOCAL_WORLD_SIZE') or torch.cuda.device_count() or 1)

    @property
    def backend(self):
        return dist.get_backend() if self.initialized else ''

    @property
    def seed(self):
        """The seed torch was seeded with (the solver seeds it from ENV.SEED)."""
        return torch.initial_seed()

    @property
    def data_group_world_size(self):
        return self.world_size

    # scepter's switches this project does not have, fixed at their "off" values
    data_parallel_group = None  # the default group
    use_pl = False
    sync_bn = False
    debug = False
    data_online = False
    share_storage = False

    @property
    def launcher(self):
        return 'torchrun' if 'TORCHELASTIC_RUN_ID' in os.environ else None

    def get_env(self):
        """A snapshot of every attribute as a dict."""
        names = [n for n in dir(type(self)) if not n.startswith('_') and n not in ('get_env', 'init_env')]
        return {name: getattr(self, name) for name in names}

    def init_env(self, config, fn, logger=None):
        """scepter's launcher entry; the solver sets up the process group itself, so this runs ``fn(config)``."""
        return fn(config)

    def __repr__(self):
        return f'we(rank={self.rank}, world_size={self.world_size}, device_id={self.device_id!r})'


we = WorkEnv()


def get_dist_info():
    """(rank, world size) of the live process group ((0, 1) without one)."""
    return get_rank(), get_world_size()


def broadcast(tensor, src, group=None, **kwargs):
    if is_dist():
        return dist.broadcast(tensor, src, group, **kwargs)


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, **kwargs):
    if is_dist():
        return dist.all_reduce(tensor, op, group, **kwargs)


def gather_data(data):
    """Gather ``data`` from every rank to rank 0 (other ranks get None); walks dicts.

    A tensor is concatenated along its first dimension in rank order, a list is
    flattened, anything else becomes a list of every rank's object.  Without a process
    group ``data`` comes back unchanged.
    """
    if not is_dist():
        return data
    if isinstance(data, torch.Tensor):
        return _gather_tensor(data)
    if isinstance(data, dict):
        return {key: gather_data(data[key]) for key in sorted(data)}
    if isinstance(data, list):
        return gather_list(data)
    return gather_picklable(data)


def gather_list(data):
    """Every rank's list, concatenated in rank order on rank 0 (None elsewhere)."""
    lists = gather_picklable(data)
    return None if lists is None else [item for one in lists for item in one]


def gather_picklable(data):
    """The list of every rank's ``data`` on rank 0 (None elsewhere)."""
    gathered = all_gather_object(data)
    return gathered if get_rank() == 0 else None


def _gather_tensor(tensor):
    """Concatenate tensors of different lengths (dim 0) from every rank, on rank 0."""
    device = torch.device('cuda', torch.cuda.current_device()) if dist.get_backend() == 'nccl' else torch.device('cpu')
    local = tensor.detach().to(device)
    length = torch.tensor([local.shape[0]], device=device)
    lengths = [torch.zeros_like(length) for _ in range(get_world_size())]
    dist.all_gather(lengths, length)
    longest = int(max(n.item() for n in lengths))
    padded = local.new_zeros((longest, *local.shape[1:]))
    padded[: local.shape[0]] = local
    pieces = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(pieces, padded)
    if get_rank() != 0:
        return None
    return torch.cat([piece[: int(n.item())] for piece, n in zip(pieces, lengths)]).to(tensor.device)
