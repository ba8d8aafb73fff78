"""The loop's state: after_backward and GradNormHook, reshuffling by the loop, hooks that never assign solver state."""

import os
import pathlib
import re

import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

import scepter_like.solver.hooks
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.checkpoint import latest_checkpoint

HOOKS_DIR = pathlib.Path(scepter_like.solver.hooks.__file__).parent


@HOOKS.register_class()
class GradSeenHook(Hook):
    """Records, at after_backward, the global gradient norm it computes and the grad_norm already logged."""

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.seen = []

    def after_backward(self, solver):
        grads = [p.grad.flatten() for p in solver.unwrapped_model.parameters() if p.grad is not None]
        logged = solver.iter_outputs.get('grad_norm')
        self.seen.append((solver.step.index, torch.linalg.vector_norm(torch.cat(grads)).item(), logged))


@pytest.fixture
def blobs(tmp_path):
    return write_blobs(tmp_path / 'blobs.npz', n=64)  # 4 batches of 16


def test_no_hook_assigns_solver_state():
    """Hooks change the solver's state only through its named methods (request_stop, log_scalar, ...)."""
    assigns = re.compile(r'\bsolver(\.\w+)+\s*([-+*/|&]?=)(?!=)|setattr\(\s*solver\b')
    found = [
        f'{path.name}:{number}: {line.strip()}'
        for path in sorted(HOOKS_DIR.glob('*.py'))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if assigns.search(line)
    ]
    assert found == []


def _grad_norm_run(blobs, work, scaler=None):
    hooks = [
        {'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2, 'GRADIENT_CLIP': 1e-3},
        {'NAME': 'GradSeenHook', 'PRIORITY': -5},  # before GradNormHook (500)
        {'NAME': 'GradNormHook'},
        {'NAME': 'GradSeenHook', 'PRIORITY': 900},
    ]
    solver = build_solver(blob_solver_cfg(blobs, work, hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None))
    if scaler is not None:  # fp16's GradScaler, without the CUDA autocast: after_backward must see unscaled grads
        solver.updater.scaler = scaler
    solver.solve()
    early, late = (h for h in solver.hooks_dict['train'] if isinstance(h, GradSeenHook))
    return solver, early.seen, late.seen


def test_after_backward_sees_the_global_gradient_norm_on_optimizer_steps_only(blobs, tmp_path):
    solver, early, late = _grad_norm_run(blobs, tmp_path / 'w')
    assert [s for s, _, _ in early] == [s for s, _, _ in late] == [1, 3]  # each group's last micro-batch
    assert [n for _, n, _ in early] == [n for _, n, _ in late]  # whatever the PRIORITY
    assert all(logged is None for _, _, logged in early)  # GradNormHook (500) runs after the early hook ...
    for _, norm, logged in late:  # ... and before the late one, which sees its value
        assert logged is not None and logged.item() == pytest.approx(norm, rel=1e-6)
    assert min(n for _, n, _ in late) > 1e-3  # measured before clipping to 1e-3
    assert solver.iter_outputs['grad_norm'].item() == pytest.approx(late[-1][1], rel=1e-6)

    _, _, scaled = _grad_norm_run(blobs, tmp_path / 's', scaler=torch.amp.GradScaler('cpu', init_scale=2.0**12))
    assert [n for _, n, _ in scaled] == pytest.approx([n for _, n, _ in late], rel=1e-5)


def test_a_grad_norm_of_another_p_keeps_its_own_key_beside_the_clipping_norm(blobs, tmp_path):
    """GRADIENT_CLIP's L2 norm went to the key GradNormHook writes, so NORM_TYPE 1 logged an L2 norm."""
    hooks = [{'NAME': 'BackwardHook', 'GRADIENT_CLIP': 0.5}, {'NAME': 'GradNormHook', 'NORM_TYPE': 1.0}]
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None))
    norms = []

    def measure(s):  # the gradients before clipping, as both norms see them
        grads = [p.grad for p in s.unwrapped_model.parameters() if p.grad is not None]
        norms.append((torch.nn.utils.get_total_norm(grads, 1.0).item(), torch.nn.utils.get_total_norm(grads).item()))

    solver.register_stage_callback('after_backward', measure)
    solver.solve()
    assert solver.iter_outputs['grad_norm_l1'].item() == pytest.approx(norms[-1][0], rel=1e-5)
    assert solver.iter_outputs['grad_norm'].item() == pytest.approx(norms[-1][1], rel=1e-5)


def _train_orders(blobs, work, hooks):
    solver = build_solver(blob_solver_cfg(blobs, work, hooks=hooks, MAX_EPOCHS=2, EVAL_DATA=None))
    seen = []

    def record(module, args, kwargs):
        if module.training:
            seen.append(kwargs['img'][:, 0].clone())

    solver.unwrapped_model.register_forward_pre_hook(record, with_kwargs=True)
    solver.solve()
    return torch.cat(seen[:4]), torch.cat(seen[4:])


def test_each_epoch_reshuffles_without_dist_sampler_hook(blobs, tmp_path):
    first, second = _train_orders(blobs, tmp_path / 'plain', [{'NAME': 'BackwardHook'}])
    assert not torch.equal(first, second)  # a new order ...
    assert torch.equal(first.sort().values, second.sort().values)  # ... of the same samples
    with_hook = _train_orders(blobs, tmp_path / 'hook', [{'NAME': 'BackwardHook'}, {'NAME': 'DistSamplerHook'}])
    assert torch.equal(with_hook[0], first) and torch.equal(with_hook[1], second)


def test_request_stop_ends_training_at_the_step_boundary(blobs, tmp_path):
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', MAX_EPOCHS=3))

    def stop_at_6(s):
        if s.progress.total_iter == 6:
            s.request_stop('enough')
            s.request_stop('a later reason does not replace the first')

    solver.register_callback_on_iter_end(stop_at_6)
    solver.solve()
    assert solver.progress.total_iter == 6 and solver.stop_requested
    assert solver.progress.stop_reason == 'enough'
    # the cut epoch is still evaluated, at its step: no evaluation of epoch 2 (a resumed run evaluates it at its end)
    assert solver.epoch_outputs['eval'] and solver.last_eval_epoch == 0


def test_a_config_without_backward_or_lr_hook_gets_them_and_says_so(blobs, tmp_path, caplog):
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=[], MAX_EPOCHS=2, EVAL_DATA=None)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 1, 'GAMMA': 0.5}
    with caplog.at_level('INFO', logger='scepter_like.test'):
        solver = build_solver(cfg)
    names = [type(h).__name__ for h in solver.hooks_dict['train']]
    assert names == ['BackwardHook', 'LogHook', 'LrHook']
    assert 'has no BackwardHook: added' in caplog.text and 'has no LrHook: added' in caplog.text
    before = [p.detach().clone() for p in solver.unwrapped_model.parameters()]
    solver.solve()
    assert any(not torch.equal(a, b) for a, b in zip(before, solver.unwrapped_model.parameters()))  # it trained
    assert solver.optimizer.param_groups[0]['lr'] == pytest.approx(0.1 * 0.5)  # and followed its schedule


def test_a_solver_that_steps_the_optimizer_itself_gets_no_backward_hook(blobs, tmp_path):
    from scepter_like.solver import SOLVERS, TrainValSolver

    @SOLVERS.register_class()
    class SelfSteppingSolver(TrainValSolver):
        STEPS_OPTIMIZER_ITSELF = True

    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=[], NAME='SelfSteppingSolver', EVAL_DATA=None)
    assert [type(h).__name__ for h in build_solver(cfg).hooks_dict['train']] == ['LogHook']  # no BackwardHook


@pytest.mark.parametrize('returned', ['detached', 'attached'])
def test_a_solver_that_steps_the_optimizer_itself_without_saying_so_is_told_about_steps_optimizer_itself(
    blobs, tmp_path, returned
):
    """A run_step_train that does zero_grad, backward and step and returns the loss: the built-in update's backward
    fails (a detached loss; a graph backpropagated already), in one TrainingError naming STEPS_OPTIMIZER_ITSELF
    instead of torch's raw RuntimeError."""
    from scepter_like.errors import TrainingError
    from scepter_like.solver import SOLVERS, TrainValSolver

    @SOLVERS.register_class('StepsItselfUnsaid')
    class StepsItselfUnsaid(TrainValSolver):
        def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
            results = self.model(**batch_data)
            self.optimizer.zero_grad()
            results['loss'].backward()
            self.optimizer.step()
            return {**results, 'loss': results['loss'].detach()} if returned == 'detached' else results

    try:
        cfg = blob_solver_cfg(blobs, tmp_path / 'w', NAME='StepsItselfUnsaid', EVAL_DATA=None)
        with pytest.raises(TrainingError, match='sets STEPS_OPTIMIZER_ITSELF = True on its class'):
            build_solver(cfg).solve()
    finally:
        SOLVERS._entries.pop('StepsItselfUnsaid', None)


def test_a_nan_loss_stops_the_run_at_its_log_line_by_default(blobs, tmp_path):
    from scepter_like.errors import TrainingError

    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LogHook', 'LOG_INTERVAL': 2, 'PROGRESS': 'off'},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 2},
    ]
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=2, EVAL_DATA=None))

    def poison(s):  # step 6's loss turns NaN, and with it the weights (CheckpointHook refuses NaN weights)
        if s.progress.total_iter == 5:
            with torch.no_grad():
                next(s.unwrapped_model.parameters()).fill_(float('nan'))

    solver.register_callback_on_iter_end(poison)
    with pytest.raises(TrainingError, match=r'the loss is nan in the log interval up to step 6; lower the learning'):
        solver.solve()
    latest = latest_checkpoint(str(tmp_path / 'w' / 'checkpoints'))
    assert latest.endswith('step-4.pth')  # the last good one: none was written at step 6


def test_a_fresh_run_refuses_a_work_dir_holding_another_runs_checkpoints(blobs, tmp_path):
    from scepter_like.errors import ConfigError

    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None)
    build_solver(cfg).solve()
    with pytest.raises(ConfigError, match=r'holds the checkpoints of an earlier run .*RESUME_FROM=auto'):
        build_solver(cfg).solve()
    cfg['SOLVER']['RESUME_FROM'] = 'auto'
    assert build_solver(cfg).resumed_from.endswith('checkpoint-epoch-1.pth')


HOLDS_THE_LOCK = """
import fcntl, os, sys, time
fd = os.open(os.path.join(sys.argv[1], '.run.lock'), os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print('held', flush=True)
    sys.exit()
os.write(fd, b'pid 4242 on node7')
print('locked', flush=True)
time.sleep(60)
"""


def test_a_run_training_in_a_work_dir_keeps_another_from_training_there(blobs, tmp_path):
    """A duplicate submission (or a requeue while the old job's workers run on) interleaved its lines and checkpoints
    with the running job's, and both exited 0."""
    import subprocess
    import sys

    from scepter_like.errors import ConfigError

    def other_process():
        return subprocess.Popen([sys.executable, '-c', HOLDS_THE_LOCK, str(work)], stdout=subprocess.PIPE)

    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}]
    work = tmp_path / 'w'
    cfg = blob_solver_cfg(blobs, work, hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None)
    work.mkdir()
    other = other_process()
    try:
        assert other.stdout.readline() == b'locked\n'
        with pytest.raises(ConfigError, match=r'another run is training in .*/w \(pid 4242 on node7\); wait for it'):
            build_solver(cfg)
        assert os.listdir(work) == ['.run.lock']  # nothing written there: not a line into the other run's log
    finally:
        other.kill()
        other.wait()
    solver = build_solver(cfg)  # the lock goes with its process, however it ends
    assert build_solver(cfg).run_lock._key is None  # a second solver of this process goes on, holding nothing
    prober = other_process()
    assert prober.communicate()[0] == b'held\n'  # from its set-up on
    solver.solve()
    prober = other_process()
    assert prober.stdout.readline() == b'locked\n'  # free once solve() has ended
    prober.kill()
    prober.wait()


@pytest.mark.parametrize('launcher', ['torchrun-static', 'torchrun-rdzv', 'slurm'])
def test_a_restart_resumes_its_own_jobs_checkpoints_and_refuses_another_runs(blobs, tmp_path, monkeypatch, launcher):
    """An elastic restart or a requeue resumes by itself, but only the checkpoints its own job wrote: a job refused
    another run's WORK_DIR is refused it again when restarted, instead of training on that run."""
    from scepter_like.errors import ConfigError

    counter, ids = {
        'torchrun-static': ('TORCHELASTIC_RESTART_COUNT', {'TORCHELASTIC_RUN_ID': 'none'}),
        'torchrun-rdzv': ('TORCHELASTIC_RESTART_COUNT', {'TORCHELASTIC_RUN_ID': 'job-7'}),
        'slurm': ('SLURM_RESTART_COUNT', {'SLURM_JOB_ID': '7'}),
    }[launcher]
    for name in ('TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_RUN_ID', 'SLURM_RESTART_COUNT', 'SLURM_JOB_ID'):
        monkeypatch.delenv(name, raising=False)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None)
    build_solver(cfg).solve()  # another run's, not under the launcher
    monkeypatch.setenv(counter, '1')
    for name, value in ids.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r'holds the checkpoints of an earlier run'):
        build_solver(cfg).solve()

    monkeypatch.setenv(counter, '0')  # the job's first attempt, in a WORK_DIR of its own
    cfg['SOLVER']['WORK_DIR'] = str(tmp_path / 'own')
    build_solver(cfg).solve()
    monkeypatch.setenv(counter, '1')
    assert build_solver(cfg).resumed_from.endswith('checkpoint-epoch-1.pth')
    other = {'TORCHELASTIC_RUN_ID': 'job-8', 'SLURM_JOB_ID': '8'}  # another job's restart
    for name in ids:
        monkeypatch.setenv(name, other[name] if ids[name] != 'none' else 'none')
    monkeypatch.setattr('os.getppid', lambda: -1)  # under the static rendezvous: another agent
    with pytest.raises(ConfigError, match=r'holds the checkpoints of an earlier run'):
        build_solver(cfg).solve()


def test_resuming_a_finished_run_says_so_and_eval_data_records_no_shuffle(blobs, tmp_path, caplog):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1)
    del cfg['SOLVER']['EVAL_DATA']['SHUFFLE']
    solver = build_solver(cfg)
    assert solver.cfg.EVAL_DATA.SHUFFLE is False and solver.cfg.TRAIN_DATA.SHUFFLE is True
    solver.solve()
    cfg['SOLVER']['RESUME_FROM'] = 'auto'
    with caplog.at_level('WARNING', logger='scepter_like.test'):
        build_solver(cfg).solve()
    assert 'ends a finished run (step 4, MAX_EPOCHS 1, MAX_STEPS 0): nothing is left to train' in caplog.text


def test_a_steps_outputs_are_detached_tensors_and_plain_numbers_join_them():
    """A model may return a count as a number (scepter's _reduce_scalar keeps it): the log sees it too."""
    from scepter_like.solver.loop_state import detached_outputs

    weight = torch.nn.Parameter(torch.tensor(2.0))
    loss = weight * 3
    out = detached_outputs({'loss': loss, 'weight': weight, 'hits': 7, 'rate': 0.5, 'flag': True, 'name': 'x'})
    assert sorted(out) == ['hits', 'loss', 'rate', 'weight']
    assert out['hits'].dim() == 0 and out['hits'].item() == 7.0 and out['rate'].item() == 0.5
    assert not out['loss'].requires_grad and not out['weight'].requires_grad
    with torch.no_grad():
        weight.add_(1.0)
    assert out['weight'].item() == 2.0  # fixed at this step's value


def test_max_epochs_minus_one_trains_as_many_epochs_as_max_steps_needs(blobs, tmp_path):
    """scepter's (and Lightning's) -1: no epoch limit, MAX_STEPS ends training; it was an error."""
    from scepter_like.errors import ConfigError
    from scepter_like.solver.loop_state import TrainingProgress

    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'w', MAX_EPOCHS=-1, MAX_STEPS=14))  # 4 batches an epoch
    assert solver.progress.max_epochs == 4
    solver.solve()
    assert (solver.progress.total_iter, solver.progress.epoch) == (14, 3)
    solver.close()
    for epochs, steps in [(-1, 0), (0, 5)]:
        with pytest.raises(ConfigError, match=rf'^SOLVER\.MAX_EPOCHS: {epochs} would never end training'):
            TrainingProgress(epochs, steps)
