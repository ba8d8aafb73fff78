"""ENV: the seed's range; the intra-op thread count a run gets; the CPU heap kept between steps."""

import resource
import subprocess
import sys

import pytest
import torch
from conftest import tool_env

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.solver.environment import SEED_MAX, resolve_env, set_up_environment
from scepter_like.utils.heap import glibc_version


def _env(**keys):
    return resolve_env(Config({'ENV': keys, 'SOLVER': {}}).SOLVER)


@pytest.mark.parametrize('seed', [2**64, -1, SEED_MAX + 1])
def test_a_seed_some_rng_would_refuse_or_fold_is_a_config_error_naming_the_range(seed):
    # 2**64 ended in torch's "Overflow when unpacking long long"; -1 ran 2**64 - 1's torch stream, 2**32 numpy's 0
    with pytest.raises(ConfigError, match=rf'^ENV\.SEED: must be an integer from 0 to {SEED_MAX} .*got {seed}$'):
        _env(SEED=seed)


def test_the_largest_seed_seeds_every_rng_unchanged():
    set_up_environment(_env(SEED=SEED_MAX))
    assert torch.initial_seed() == SEED_MAX


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


REFAULT_PROBE = """
import resource
import torch
from scepter_like.config import Config
from scepter_like.solver.environment import resolve_env, set_up_environment


def step():  # a step's activations: 24 blocks of 1 MiB, written, then all freed together
    blocks = [torch.ones(256, 1024) for _ in range(24)]
    return sum(float(b[0, 0]) for b in blocks)


def faults_of_ten_steps():
    for _ in range(3):  # the heap grows to its size
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        step()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


default = faults_of_ten_steps()  # glibc's own thresholds
set_up_environment(resolve_env(Config({'ENV': {'KEEP_CPU_HEAP': True}, 'SOLVER': {}}).SOLVER))
print(default, faults_of_ten_steps())
"""


@pytest.mark.slow
@pytest.mark.skipif(not glibc_version(), reason='KEEP_CPU_HEAP sets glibc parameters')
def test_keep_cpu_heap_stops_refaulting_the_memory_a_step_freed():
    """Ten steps that each allocate and free 24 MiB: glibc's defaults give the memory back and fault it in again
    (some 6,000 page faults a step); with KEEP_CPU_HEAP the heap keeps it and the steps fault almost nothing.

    Both measured in one process, defaults first.  Whether glibc's defaults trim depends on where
    the address-space layout put the heap (in about one process of four nothing is given back), so
    the probe runs again until its first ten steps fault; KEEP_CPU_HEAP is judged in that process.
    """
    pages_per_step = 24 * 2**20 // resource.getpagesize()
    for _ in range(5):
        res = subprocess.run([sys.executable, '-c', REFAULT_PROBE], env=tool_env(), capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-3000:]
        default, kept = map(int, res.stdout.split()[-2:])
        if default > 10 * pages_per_step / 2:  # half the pages of every step, at least, faulted again
            break
    else:
        pytest.fail(f'glibc kept the memory in 5 processes without KEEP_CPU_HEAP (faults {default}): no contrast')
    assert kept < pages_per_step, (default, kept)  # over all ten steps, less than one step's memory
