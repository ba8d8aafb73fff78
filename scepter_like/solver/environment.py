"""The ENV config section (seeding, threads, the CPU allocator, device, the process group, Lightning's Trainer).

``NUM_THREADS`` defaults to 1 intra-op thread per process.  torch's own default (one
thread per core) makes the small ops of a small model wait on each other at every op:
on a 2-core machine that other work shares, an MLP step took 20-40x as long with 2
threads as with 1.  One thread is also what a GPU run and one of several processes per
node want (torchrun sets ``OMP_NUM_THREADS=1`` for them).  A large model trained on the
CPU of an otherwise idle machine gains from more: set N, or 0 for torch's choice (which
honours ``OMP_NUM_THREADS``).
"""

import contextlib

import torch

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.registry import resolve_params
from scepter_like.solver.lightning.settings import PL_PARA_DICT
from scepter_like.utils.distributed import init_distributed
from scepter_like.utils.file_system import check_local_file_system
from scepter_like.utils.heap import keep_heap
from scepter_like.utils.seed import seed_everything

SEED_MAX = 2**32 - 1  # numpy's legacy np.random.seed takes 0 .. 2**32 - 1; python's random and torch take all of those
ENV_PARA_DICT = {
    'SEED': {
        'value': 2024,
        'description': f'seed of python, numpy and torch, 0 to {SEED_MAX} (rank r uses SEED + r after model init)',
    },
    'DETERMINISTIC': {'value': False, 'description': 'torch.use_deterministic_algorithms and no cudnn autotuning'},
    'BACKEND': {'value': '', 'description': "process-group backend; '' picks nccl on CUDA, gloo on CPU"},
    'DEVICE': {'value': '', 'description': "'' picks cuda:LOCAL_RANK when CUDA is available, else cpu"},
    'DIST_TIMEOUT': {'value': 1800, 'description': 'seconds a collective (and the rendezvous) may wait', 'above': 0},
    'NUM_THREADS': {
        'value': 1,
        'description': "torch intra-op threads per process (0: torch's default, one per core)",
        'min': 0,
    },
    'KEEP_CPU_HEAP': {
        'value': True,
        'description': 'glibc: keep memory freed by a step for the next one instead of returning it to the kernel'
        ' and page-faulting it back (RSS stays at its peak; scepter_like.utils.heap)',
    },
    'STOP_CHECK_SECONDS': {
        'value': 1.0,
        'description': 'under DDP: seconds between the boundaries at which the ranks agree on a stop (a signal,'
        ' request_stop; 0: every optimizer step; solver/preemption.py, docs/clusters.md)',
        'min': 0,
    },
    'USE_PL': {'value': False, 'description': "run on PyTorch Lightning's Trainer (the [lightning] extra)"},
    'PL': {'value': {}, 'description': "Lightning's Trainer settings when USE_PL (docs/lightning.md)"},
}


def resolve_env(solver_cfg):
    """ENV of the config the solver's config belongs to, defaults filled (added if absent) and checked."""
    root = solver_cfg.root
    if root is solver_cfg:  # a solver built from a bare SOLVER dict
        return resolve_params(Config({}, path='ENV'), ENV_PARA_DICT, 'ENV')
    if root.get('ENV') is None:
        root['ENV'] = {}
    env = resolve_params(root['ENV'], ENV_PARA_DICT, 'ENV')
    resolve_params(env.PL, PL_PARA_DICT, 'ENV.PL')
    _check_seed(env)
    _check_device(env)
    check_local_file_system(solver_cfg.get('FILE_SYSTEM'), solver_cfg.path_of('FILE_SYSTEM'))  # where files live
    return env


def _check_seed(env):
    """ENV.SEED must be a seed every RNG it seeds takes as it is: torch's overflowed at 2**64 with a traceback, and
    a negative seed or one of 2**32 on was folded (python's random uses abs(), torch wraps to 64 bits, numpy took
    the seed mod 2**32), so two different seeds ran the same streams."""
    seed = env.SEED
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(
            f"{env.path_of('SEED')}: must be an integer from 0 to {SEED_MAX} (2**32 - 1, the seeds python's random,"
            f" numpy's and torch's generators all take unchanged), got {seed!r}"
        )


def _check_device(env):
    """ENV.DEVICE must be a torch device string ('' picks one); whether it exists is checked at set-up."""
    if env.DEVICE:
        try:
            torch.device(env.DEVICE)
        except (RuntimeError, TypeError):
            raise ConfigError(
                f'{env.path_of("DEVICE")}: {env.DEVICE!r} is not a device; write cpu, cuda, cuda:N (N a number)'
                " or '' to pick cuda:LOCAL_RANK when CUDA is available, else cpu"
            ) from None


def set_up_environment(env, join=None):
    """Seed, set threads, the allocator and join the process group; returns the DistInfo of this process.

    ``join()`` joins it another way (Lightning's, which may start the processes itself); by
    default from torchrun's or SLURM's variables.
    """
    if env.NUM_THREADS > 0:
        torch.set_num_threads(env.NUM_THREADS)
    if env.KEEP_CPU_HEAP:
        keep_heap()
    if join is None:
        info = init_distributed(backend=env.BACKEND, timeout_s=env.DIST_TIMEOUT, device=env.DEVICE)
    else:
        info = join()
    seed_everything(env.SEED)
    torch.use_deterministic_algorithms(env.DETERMINISTIC, warn_only=True)  # false too: not an earlier run's value
    torch.backends.cudnn.deterministic = env.DETERMINISTIC
    if env.DETERMINISTIC:
        torch.backends.cudnn.benchmark = False
    return info


class ProcessSettings:
    """torch's process-wide settings that ENV sets (DETERMINISTIC, NUM_THREADS) as they are when taken; ``apply()``
    puts them in place.  A Python session (``build_solver``) takes its own at the end of its set-up and holds them
    only for each of its calls (``in_force``): two open sessions never see each other's, whatever order they close
    in, and the program's code between the calls runs with the process's."""

    def __init__(self):
        self.deterministic = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        self.cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
        self.threads = torch.get_num_threads()

    def apply(self):
        enabled, warn_only = self.deterministic
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = self.cudnn
        torch.set_num_threads(self.threads)

    @contextlib.contextmanager
    def in_force(self):
        """These settings for the ``with`` block; the ones before it are put back when it ends."""
        before = ProcessSettings()
        self.apply()
        try:
            yield
        finally:
            before.apply()
