"""The ranks' agreement on a stop signal (solver/preemption.py), on a one-rank gloo group in this
process with a fake clock: agreement boundaries ``ENV.STOP_CHECK_SECONDS`` apart, the signal read
one interval after the boundary that carries it; 0 agrees at every optimizer step."""

import os
import signal

import pytest
import torch.distributed as dist

from scepter_like.solver import preemption
from scepter_like.solver.preemption import AgreedStop, StopSignals

STEP = 1 / 64  # seconds a step takes on the fake clock (exact in binary)


@pytest.fixture
def one_rank_group(monkeypatch):
    """A gloo group of one rank that StopSignals takes for DDP (is_dist() means world size > 1)."""
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
    monkeypatch.setattr(preemption, 'is_dist', lambda: True)
    yield
    dist.destroy_process_group()


def run_boundaries(monkeypatch, check_seconds, signal_before, count=20):
    """``agreed()`` at ``count`` step boundaries one STEP apart, the signal arriving before boundary
    ``signal_before`` (1-based); returns (answers, the boundaries that started an all-reduce)."""
    clock = [0.0]
    monkeypatch.setattr(preemption.time, 'monotonic', lambda: clock[0])
    started = []
    all_reduce = dist.all_reduce
    monkeypatch.setattr(dist, 'all_reduce', lambda *a, **k: started.append(boundary) or all_reduce(*a, **k))
    stop_signals = StopSignals()
    answers = []
    with stop_signals.training_loop(check_seconds):
        for boundary in range(1, count + 1):
            clock[0] += STEP
            if boundary == signal_before:
                stop_signals.received = signal.SIGTERM
            answers.append(stop_signals.agreed())
            answers[-1] = answers[-1].signal if answers[-1] else 0
            if answers[-1]:
                break
    return answers, started


def test_agreement_boundaries_are_check_seconds_apart_and_the_signal_lands_one_interval_later(
    one_rank_group, monkeypatch
):
    answers, started = run_boundaries(monkeypatch, check_seconds=4 * STEP, signal_before=7)
    # the first interval is one step (nothing measured yet); then 4 steps make 4 * STEP seconds
    assert started == [1, 2, 6, 10]
    # the signal arrives before boundary 7; boundary 10's all-reduce carries it, read at boundary 14
    assert answers == [0] * 13 + [signal.SIGTERM]


def test_check_seconds_0_agrees_at_every_step_and_stops_one_step_later(one_rank_group, monkeypatch):
    answers, started = run_boundaries(monkeypatch, check_seconds=0, signal_before=7)
    assert started == [1, 2, 3, 4, 5, 6, 7]
    assert answers == [0] * 7 + [signal.SIGTERM]


def test_slower_steps_shorten_the_interval(one_rank_group, monkeypatch):
    """Steps 4 times longer than the check time: an interval of one step, never zero."""
    answers, started = run_boundaries(monkeypatch, check_seconds=STEP / 4, signal_before=99, count=6)
    assert started == [1, 2, 3, 4, 5, 6] and answers == [0] * 6


def test_one_process_answers_at_once_without_a_collective(monkeypatch):
    answers, started = run_boundaries(monkeypatch, check_seconds=4 * STEP, signal_before=3)
    assert started == [] and answers == [0, 0, signal.SIGTERM]


def os_threads():
    """This process's OS threads (gloo's are not Python threads)."""
    return set(os.listdir('/proc/self/task'))


def test_close_releases_the_agreement_group_and_its_threads(one_rank_group):
    """A sweep that runs solver after solver in one process must not gather a gloo group (threads,
    sockets) per run: BaseSolver.close() closes its StopSignals."""
    before = os_threads()
    stop_signals = StopSignals()
    with stop_signals.training_loop(0):
        assert stop_signals._group is not None
        group_threads = os_threads() - before  # other tests' threads may come and go meanwhile
        assert group_threads
    stop_signals.close()
    assert stop_signals._group is None and not group_threads & os_threads()


def test_a_request_travels_in_the_agreement_and_between_epochs_takes_one_all_reduce(one_rank_group, monkeypatch):
    """A hook's request_stop under DDP waits for the agreement (STOP_CHECK_SECONDS 0: read one step later); one made
    outside the steps is agreed by the all-reduce between epochs.  In one process nothing is deferred."""
    stop_signals = StopSignals()
    with stop_signals.training_loop(0):
        assert stop_signals.agreed() is None  # boundary 1 starts an all-reduce without a request
        assert stop_signals.defer('enough', 'MyHook')
        assert stop_signals.agreed() is None  # boundary 2 reads boundary 1's, starts one carrying the request
        assert stop_signals.agreed() == AgreedStop(0, 'enough', 'MyHook')
        assert stop_signals.agreed_between_epochs() is None  # agreed once: nothing left to agree
        stop_signals.defer('after an epoch', 'MyHook')
        assert stop_signals.agreed_between_epochs() == AgreedStop(0, 'after an epoch', 'MyHook')
    monkeypatch.setattr(preemption, 'is_dist', lambda: False)
    assert not StopSignals().defer('enough', 'MyHook')
