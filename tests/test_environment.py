"""ENV: the intra-op thread count a run gets."""

import torch

from scepter_like.config import Config
from scepter_like.solver.environment import resolve_env, set_up_environment


def _env(**keys):
    return resolve_env(Config({'ENV': keys, 'SOLVER': {}}).SOLVER)


def test_one_intra_op_thread_by_default_and_zero_keeps_torchs_choice():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        set_up_environment(_env())  # the default: one thread, whatever torch chose
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        set_up_environment(_env(NUM_THREADS=0))  # 0: torch's own choice stays
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
