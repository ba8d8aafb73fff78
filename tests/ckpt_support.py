"""Test-only registrations for the checkpoint tests (passed to tools with ``--import``).

``KillHook`` SIGKILLs its own process (no cleanup, no ``finally``, the way a crash or an
OOM kill ends a run) at ``SCEPTER_TEST_KILL_AT``: ``train:N`` when step N+1 begins (step N
is done, with any checkpoint it took; batch N+1 is loaded), ``eval:N`` after the first
eval step that follows train step N.  It first lets a checkpoint still being made durable
in the background land, so the kill point fixes which checkpoint a resume starts from.
``RecordingNpzDataset`` appends the indices of every batch it serves to RECORD, so a test
can see which batches a run loaded.  ``CounterHook`` carries state across a resume through both hook interfaces;
``FailAtEndHook`` raises in ``after_solve`` before CheckpointHook's turn.
With ``SCEPTER_TEST_TEAR_SAVE=N`` the N-th ``torch.save`` of the process writes half its
bytes and then SIGKILLs the process: a crash in the middle of a checkpoint write.  With
``SCEPTER_TEST_KILL_BEFORE_COMMIT=N`` the process SIGKILLs itself just before the N-th
checkpoint is fsynced and moved into place: a crash after the write, before the commit.
The process sends itself a signal with ``SCEPTER_TEST_SIGNAL_AT`` (as a train step begins),
``SCEPTER_TEST_SIGNAL_IN_SAVE`` (half-way into a ``torch.save``'s file) and
``SCEPTER_TEST_SIGNAL_IN_SET_UP`` (while the train data is built).
"""

import io
import os
import signal
import subprocess
import sys
import time

import torch

from scepter_like.data.datasets import NpzDataset
from scepter_like.data.registry import DATASETS
from scepter_like.solver.hooks import checkpoint as checkpoint_hook
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS

KILL_ENV = 'SCEPTER_TEST_KILL_AT'
SIGNAL_ENV = 'SCEPTER_TEST_SIGNAL_AT'  # 'SIGTERM:N': the process signals itself when train step N+1 begins
# ('SIGTERM:N:group': its whole process group; 'SIGTERM:N:parent': its parent, and waits until the signal is back)
SIGNAL_IN_SAVE_ENV = 'SCEPTER_TEST_SIGNAL_IN_SAVE'  # 'SIGTERM:N' / 'SIGTERM:TEXT': ... mid-write of a torch.save
SIGNAL_IN_SET_UP_ENV = 'SCEPTER_TEST_SIGNAL_IN_SET_UP'  # 'SIGTERM': ... while the train data is built
TEAR_ENV = 'SCEPTER_TEST_TEAR_SAVE'
COMMIT_ENV = 'SCEPTER_TEST_KILL_BEFORE_COMMIT'


def _save_in_halves(real_save, obj, f, between, *args, **kwargs):
    """``real_save(obj, f)`` written in two halves, ``between(out)`` called after the first (flushed) half."""
    buffer = io.BytesIO()
    real_save(obj, buffer, *args, **kwargs)
    data = buffer.getvalue()
    with open(f, 'wb') as out:
        out.write(data[: len(data) // 2])
        out.flush()
        between(out)
        out.write(data[len(data) // 2 :])


def _tear_save_number(n):
    real_save, count = torch.save, [0]

    def tear(out):
        os.fsync(out.fileno())
        os.kill(os.getpid(), signal.SIGKILL)  # half the file on disk, and no cleanup

    def save(obj, f, *args, **kwargs):
        count[0] += 1
        if count[0] < n:
            return real_save(obj, f, *args, **kwargs)
        _save_in_halves(real_save, obj, f, tear, *args, **kwargs)

    torch.save = save


def _kill_before_commit_number(n):
    real_commit, count = checkpoint_hook.commit_temp, [0]

    def commit(tmp, path):
        count[0] += 1
        if count[0] >= n:
            os.kill(os.getpid(), signal.SIGKILL)
        real_commit(tmp, path)

    checkpoint_hook.commit_temp = commit


def _signal_in_save(spec):
    """``NAME:N``: signal the N-th torch.save; ``NAME:TEXT``: the first whose file name holds TEXT.

    The signal comes with half the file written; the rest follows if the handler returns.
    """
    name, _, which = spec.partition(':')
    real_save, count = torch.save, [0]

    def save(obj, f, *args, **kwargs):
        count[0] += 1
        chosen = count[0] == int(which) if which.isdigit() else which in os.path.basename(str(f))
        if not chosen:
            return real_save(obj, f, *args, **kwargs)
        # the handler runs mid-write
        _save_in_halves(real_save, obj, f, lambda out: os.kill(os.getpid(), getattr(signal, name)), *args, **kwargs)

    torch.save = save


if os.environ.get(SIGNAL_IN_SAVE_ENV):
    _signal_in_save(os.environ[SIGNAL_IN_SAVE_ENV])
if os.environ.get(TEAR_ENV):
    _tear_save_number(int(os.environ[TEAR_ENV]))
if os.environ.get(COMMIT_ENV):
    _kill_before_commit_number(int(os.environ[COMMIT_ENV]))


def signal_group_from_outside(signum):
    """Send ``signum`` to this process's group from a process outside it, as slurmstepd or ``timeout`` does: torch's
    loader workers exit quietly on a SIGTERM from their own parent, so signalling the group from here proves nothing."""
    killer = f'import os; os.killpg({os.getpgid(0)}, {int(signum)})'
    subprocess.run([sys.executable, '-c', killer], start_new_session=True, check=True)


@HOOKS.register_class()
class KillHook(Hook):
    para_dict = {'PRIORITY': {'value': 1000, 'description': 'after every built-in hook'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        spec = os.environ.get(KILL_ENV, '')
        self.mode, _, step = spec.partition(':')
        self.step = int(step) if step else -1

    def _maybe_kill(self, solver):
        if solver.mode == self.mode and solver.progress.total_iter == self.step:
            for hook in solver.hooks_dict['train']:
                if isinstance(hook, checkpoint_hook.CheckpointHook):
                    hook.writer.wait()
            os.kill(os.getpid(), signal.SIGKILL)

    def before_iter(self, solver):
        if solver.mode == 'train':
            self._maybe_kill(solver)
            name, _, at = os.environ.get(SIGNAL_ENV, '').partition(':')
            step, _, whom = at.partition(':')
            if name and solver.progress.total_iter == int(step):
                if whom == 'group':  # as SLURM, timeout and kill -- -PGID signal: every process, loader workers too
                    signal_group_from_outside(getattr(signal, name))
                    time.sleep(0.5)  # a worker that dies of it is noticed inside this step (SIGCHLD)
                elif whom == 'parent':  # the process that started this one (a multirun), which passes it on
                    os.kill(os.getppid(), getattr(signal, name))
                    deadline = time.monotonic() + 30
                    while not solver.stop_signals.received and time.monotonic() < deadline:
                        time.sleep(0.01)  # it stops at this step's boundary, whatever the machine's load
                else:
                    os.kill(os.getpid(), getattr(signal, name))

    def after_iter(self, solver):
        if solver.mode == 'eval':
            self._maybe_kill(solver)


@DATASETS.register_class()
class RecordingNpzDataset(NpzDataset):
    para_dict = {'RECORD': {'value': '', 'description': 'file that gets one line of indices per served batch'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.record = cfg.RECORD
        if os.environ.get(SIGNAL_IN_SET_UP_ENV):
            os.kill(os.getpid(), getattr(signal, os.environ[SIGNAL_IN_SET_UP_ENV]))

    def __getitems__(self, indices):
        with open(self.record, 'a') as f:
            f.write(' '.join(map(str, indices)) + '\n')
        return super().__getitems__(indices)


@HOOKS.register_class()
class CounterHook(Hook):
    """Counts train steps in its state_dict and writes a tensor into the checkpoint itself."""

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.steps = 0
        self.extra = None
        self.loaded_extra = None

    def after_iter(self, solver):
        if solver.mode == 'train':
            self.steps += 1

    def before_save_checkpoint(self, solver, checkpoint):
        checkpoint['counter_extra'] = torch.full((2,), float(self.steps))

    def after_load_checkpoint(self, solver, checkpoint):
        self.loaded_extra = checkpoint['counter_extra']

    def state_dict(self):
        return {'steps': self.steps}

    def load_state_dict(self, state):
        self.steps = state['steps']


@HOOKS.register_class()
class FailAtEndHook(Hook):
    """Raises in after_solve before CheckpointHook's turn (a failed final export, say)."""

    para_dict = {'PRIORITY': {'value': 250, 'description': 'before CheckpointHook'}}

    def after_solve(self, solver):
        raise RuntimeError('final export failed')
