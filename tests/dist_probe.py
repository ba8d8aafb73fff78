"""Test support for torchrun runs, loaded with ``--import tests/dist_probe.py``.

- ``DistProbeHook`` records, per rank, the first optimizer step's gradients (full tensors), the
  global gradient norm it sees in ``after_backward``, the final weights, the local metric
  sums, each step's loss, LogHook's last means and the counters (DDP's gradient all-reduces
  too), into ``OUT/rank{r}.pt`` at after_solve (also after a failure); it can make one rank's
  loss NaN at given steps and SIGKILL torchrun and all its workers at a given step.
- On import in a rank other than 0 (of torchrun or of Lightning's launcher), with ``PROBE_GUARD_DIR``
  set, an audit hook makes any write under that folder (open for writing, mkdir, rename, remove)
  raise, so a run in which rank > 0 writes a file fails.
"""

import os
import signal
import sys
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.distributed import all_gather_object

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _install_write_guard(folder):
    folder = os.path.realpath(folder)

    def inside(path):
        if isinstance(path, int):
            return False
        path = os.fsdecode(path)
        return os.path.realpath(os.path.abspath(path)).startswith(folder)

    def guard(event, args):
        if event == 'open':
            path, mode, flags = args
            writes = (mode is not None and any(c in mode for c in 'wax+')) or bool((flags or 0) & _WRITE_FLAGS)
            if writes and inside(path):
                raise PermissionError(f'rank {os.environ.get("RANK")} wrote {path}')
        elif event in ('os.mkdir', 'os.remove', 'os.rmdir', 'os.truncate') and inside(args[0]):
            raise PermissionError(f'rank {os.environ.get("RANK")} {event} {args[0]}')
        elif event == 'os.rename' and (inside(args[0]) or inside(args[1])):
            raise PermissionError(f'rank {os.environ.get("RANK")} renamed {args[0]} -> {args[1]}')

    sys.addaudithook(guard)


# (a process Lightning's own launcher started has LOCAL_RANK and no RANK)
if os.environ.get('PROBE_GUARD_DIR') and os.environ.get('RANK', os.environ.get('LOCAL_RANK', '0')) != '0':
    _install_write_guard(os.environ['PROBE_GUARD_DIR'])


def _full(tensor):
    tensor = tensor.detach()
    return tensor.full_tensor() if hasattr(tensor, 'full_tensor') else tensor.clone()


@HOOKS.register_class()
class DistProbeHook(Hook):
    para_dict = {
        'PRIORITY': {'value': -10, 'description': 'early among the hooks'},
        'OUT': {'value': '', 'description': 'folder for rank{r}.pt'},
        'NAN_STEPS': {'value': [], 'description': 'steps (1-based) whose batch (so loss) becomes NaN on NAN_RANK'},
        'NAN_RANK': {'value': 1, 'description': 'the rank that sees the NaN'},
        'KILL_AT_STEP': {'value': 0, 'description': 'rank 0 SIGKILLs torchrun and every worker at this step'},
        'SIGNAL_AT_STEP': {
            'value': 0,
            'description': 'send SIGNAL to SIGNAL_TARGET in this train step (after_iter) and wait until it arrives',
        },
        'SIGNAL': {'value': 'SIGTERM', 'description': 'the signal of SIGNAL_AT_STEP'},
        'SIGNAL_TARGET': {
            'value': 'rank1',
            'description': "'launcher': torchrun (from rank 0); 'rank1': rank 1 itself",
        },
        'STEP_SECONDS': {'value': 0.0, 'description': 'each train step lasts at least this long (after_iter sleeps)'},
        'WORKER_KILL_AT_STEP': {'value': 0, 'description': 'rank 1 SIGKILLs itself at this step, first attempt only'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.out = cfg.OUT
        self.nan_steps = set(cfg.NAN_STEPS)
        self.nan_rank = cfg.NAN_RANK
        self.kill_at = cfg.KILL_AT_STEP
        self.signal_at, self.signal, self.signal_target = cfg.SIGNAL_AT_STEP, cfg.SIGNAL, cfg.SIGNAL_TARGET
        self.worker_kill_at = cfg.WORKER_KILL_AT_STEP
        self.step_seconds = cfg.STEP_SECONDS
        self.first_grads = None
        self.worker_pids = []
        self.allreduces = 0
        self.backward_norms = []  # (step index, global gradient norm) at each after_backward
        self.losses = []  # this rank's loss of each train step

    def before_solve(self, solver):
        names = {id(p): n for n, p in solver.unwrapped_model.named_parameters()}

        def grab(optimizer, args, kwargs):
            if self.first_grads is None:
                self.first_grads = {
                    names[id(p)]: _full(p.grad)
                    for g in optimizer.param_groups
                    for p in g['params']
                    if p.grad is not None
                }

        solver.optimizer.register_step_pre_hook(grab)
        if hasattr(solver.model, 'register_comm_hook'):  # DDP: count its gradient all-reduces
            solver.model.register_comm_hook(None, self._counted_allreduce)
        if self.kill_at:
            self.worker_pids = all_gather_object(os.getpid())

    def _counted_allreduce(self, state, bucket):
        self.allreduces += 1
        return default_hooks.allreduce_hook(state, bucket)

    def _kill_everything(self):
        """SIGKILL torchrun (our parent), the other workers (each in its own session), then this one."""
        with open(f'/proc/{os.getppid()}/cmdline', 'rb') as f:
            assert b'torch.distributed.run' in f.read(), 'KILL_AT_STEP only under torchrun'
        os.kill(os.getppid(), signal.SIGKILL)
        for pid in self.worker_pids:
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    def after_backward(self, solver):
        grads = [_full(p.grad) for p in solver.unwrapped_model.parameters() if p.grad is not None]
        self.backward_norms.append(
            (solver.step.index, torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])))
        )

    def after_iter(self, solver):
        step = solver.progress.total_iter
        if 'loss' in solver.step.outputs:
            self.losses.append(float(solver.step.outputs['loss']))
        if self.step_seconds:
            time.sleep(self.step_seconds)
        if step == self.kill_at and solver.rank == 0:
            self._kill_everything()
        if step == self.signal_at:
            signum = getattr(signal, self.signal)
            if self.signal_target == 'launcher' and solver.rank == 0:
                os.kill(os.getppid(), signum)
                self._wait_for_signal(solver)  # torchrun forwards it: this rank has it before step N ends
            elif self.signal_target == 'rank1' and solver.rank == 1:
                os.kill(os.getpid(), signum)
                self._wait_for_signal(solver)
        restart = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0))
        if step == self.worker_kill_at and solver.rank == 1 and restart == 0:
            for hook in solver.hooks_dict['train']:  # the checkpoint before the kill lands first
                if hasattr(hook, 'writer'):
                    hook.writer.wait()
            os.kill(os.getpid(), signal.SIGKILL)

    def before_iter(self, solver):
        batch = solver.step.batch
        if solver.progress.total_iter + 1 in self.nan_steps and solver.rank == self.nan_rank and batch is not None:
            for key, value in batch.items():  # the forward then gives a NaN loss, as bad data would
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    batch[key] = value * float('nan')

    @staticmethod
    def _wait_for_signal(solver, timeout=60):
        deadline = time.monotonic() + timeout
        while not solver.stop_signals.received and time.monotonic() < deadline:
            time.sleep(0.01)

    def after_solve(self, solver):
        if not self.out:
            return
        os.makedirs(self.out, exist_ok=True)
        record = {
            'rank': solver.rank,
            'world_size': solver.world_size,
            'local_rank': solver.dist_info.local_rank,
            'first_grads': self.first_grads,
            'weights': {k: _full(v) for k, v in solver.unwrapped_model.state_dict().items()},
            'metric_sums': [m._state.clone() if m._state is not None else None for m in solver.metrics],
            'total_iter': solver.progress.total_iter,
            'optimizer_steps': solver.progress.optimizer_steps,
            'lr': solver.optimizer.param_groups[0]['lr'],
            'ema_updates': next((h.updates for h in solver.hooks_dict['train'] if type(h).__name__ == 'EMAHook'), None),
            'allreduces': self.allreduces,
            'backward_norms': self.backward_norms,
            'losses': self.losses,
            'last_logged': next(
                (h.last_logged for h in solver.hooks_dict['train'] if type(h).__name__ == 'LogHook'), None
            ),
            'epoch_outputs': solver.epoch_outputs,
            'failed': repr(solver.failed) if solver.failed is not None else None,
        }
        torch.save(record, os.path.join(self.out, f'rank{solver.rank}.pt'))


@HOOKS.register_class()
class RequestStopHook(Hook):
    """Requests a stop on one rank only (a rank-local condition: a wall-clock limit, a STOP file only it reads),
    after the train step AT_STEP or, with AT_STEP 0, in the train ``after_epoch`` of epoch AT_EPOCH (1-based)."""

    para_dict = {
        'RANK': {'value': 1, 'description': 'the rank that asks'},
        'AT_STEP': {'value': 0, 'description': 'after this train step (0: not in a step)'},
        'AT_EPOCH': {'value': 0, 'description': 'in the train after_epoch of this epoch (0: not there)'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.rank, self.at_step, self.at_epoch = cfg.RANK, cfg.AT_STEP, cfg.AT_EPOCH

    def after_iter(self, solver):
        if solver.rank == self.rank and solver.progress.total_iter == self.at_step:
            solver.request_stop(f'a condition only rank {self.rank} sees, at step {self.at_step}')

    def after_epoch(self, solver):
        if solver.mode == 'train' and solver.rank == self.rank and solver.progress.epoch + 1 == self.at_epoch:
            solver.request_stop(f'a condition only rank {self.rank} sees, after epoch {self.at_epoch}')
