"""SignalRelay (utils/signal_relay.py): the stop signals a tool gets reach the processes it started, once each, and
a third Ctrl-C kills them."""

import os
import signal
import subprocess
import sys
import time

import pytest

from scepter_like.utils.signal_relay import SignalRelay

# a child that records every SIGTERM / SIGINT it gets, says it is ready, and ends on the file 'stop' (or a kill)
CHILD = """
import os, signal, sys, time
got = open(sys.argv[1], 'a', buffering=1)
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda n, f: got.write(signal.Signals(n).name + '\\n'))
print('ready', flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
"""


@pytest.fixture
def relay():
    """A SignalRelay whose children are killed at the end, whatever the test's outcome."""
    relay = SignalRelay()
    yield relay
    for child in relay.children:
        if child.poll() is None:
            child.kill()
            child.wait()


def start_child(relay, tmp_path):
    child = relay.start([sys.executable, '-c', CHILD, tmp_path / 'got', tmp_path / 'stop'], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b'ready\n'
    return child


def signals_got(tmp_path, count, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = (tmp_path / 'got').read_text().split() if (tmp_path / 'got').exists() else []
        if len(got) >= count:
            return got
        time.sleep(0.01)
    return got


def test_a_signal_to_this_process_reaches_the_child_once_and_the_handlers_come_back(relay, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with relay:
        child = start_child(relay, tmp_path)
        assert os.getsid(child.pid) == child.pid  # a session of its own: a signal to our group does not reach it
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals_got(tmp_path, 1) == ['SIGTERM']
        assert relay.signum == signal.SIGTERM
        (tmp_path / 'stop').touch()
        assert child.wait(10) == 0
    assert signal.getsignal(signal.SIGTERM) is before
    assert (tmp_path / 'got').read_text().split() == ['SIGTERM']  # once: not again by some other way


def test_a_third_ctrl_c_kills_the_child(relay, tmp_path):
    with relay:
        child = start_child(relay, tmp_path)
        for count in (1, 2):  # one at a time: two pending signals of a kind are one
            os.kill(os.getpid(), signal.SIGINT)
            assert signals_got(tmp_path, count) == ['SIGINT'] * count  # a run's graceful stop, then its stop at once
        os.kill(os.getpid(), signal.SIGINT)
        assert child.wait(10) == -signal.SIGKILL
    assert relay.signum == signal.SIGINT


def test_a_signal_before_a_child_starts_is_passed_on_when_it_starts(relay, tmp_path):
    """The race of a signal between a multirun's check and its next run's start: the run gets it as it starts."""
    (tmp_path / 'stop').touch()  # a child that got to its handlers records the signal and ends
    with relay:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # handled, with no child to pass it on to
        child = relay.start([sys.executable, '-c', CHILD, tmp_path / 'got', tmp_path / 'stop'])
        returncode = child.wait(10)
    got = (tmp_path / 'got').read_text().split() if (tmp_path / 'got').exists() else []
    assert returncode == -signal.SIGTERM or (returncode == 0 and got == ['SIGTERM'])
