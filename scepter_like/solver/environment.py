"""The ENV config section (seeding, threads, device, the distributed process group); the run's dtype."""

import contextlib

import torch

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.registry import resolve_params
from scepter_like.utils.distributed import init_distributed
from scepter_like.utils.seed import seed_everything

ENV_PARA_DICT = {
    'SEED': {'value': 2024, 'description': 'seed of python, numpy and torch (rank r uses SEED + r after model init)'},
    'DETERMINISTIC': {'value': False, 'description': 'torch.use_deterministic_algorithms and no cudnn autotuning'},
    'BACKEND': {'value': '', 'description': "process-group backend; '' picks nccl on CUDA, gloo on CPU"},
    'DEVICE': {'value': '', 'description': "'' picks cuda:LOCAL_RANK when CUDA is available, else cpu"},
    'DIST_TIMEOUT': {'value': 1800, 'description': 'seconds a collective (and the rendezvous) may wait'},
    'NUM_THREADS': {'value': 0, 'description': 'torch intra-op threads per process (0: torch default)'},
    'USE_PL': {'value': False, 'description': "scepter's PyTorch Lightning switch: accepted when false"},
}


DTYPES = {'float32': torch.float32, 'float64': torch.float64}  # SOLVER.DTYPE


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype set to ``dtype`` inside, restored after (what SOLVER.DTYPE builds under)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def resolve_env(solver_cfg):
    """ENV of the config the solver's config belongs to, defaults filled (added if absent)."""
    root = solver_cfg.root
    if root is solver_cfg:  # a solver built from a bare SOLVER dict
        return resolve_params(Config({}, path='ENV'), ENV_PARA_DICT, 'ENV')
    if root.get('ENV') is None:
        root['ENV'] = {}
    env = resolve_params(root['ENV'], ENV_PARA_DICT, 'ENV')
    if env.USE_PL:
        raise ConfigError(f'{env.path_of("USE_PL")}: PyTorch Lightning is not supported; set it to false')
    return env


def set_up_environment(env):
    """Seed, set threads and join the process group; returns the DistInfo of this process."""
    if env.NUM_THREADS > 0:
        torch.set_num_threads(env.NUM_THREADS)
    info = init_distributed(backend=env.BACKEND, timeout_s=env.DIST_TIMEOUT, device=env.DEVICE)
    seed_everything(env.SEED, deterministic=env.DETERMINISTIC)
    return info
