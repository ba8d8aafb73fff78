"""Distributed training under real torchrun (gloo, CPU): DDP, FSDP, multi-node, faults, bad input.

Every torchrun run is shared by several tests (module-scoped fixtures) to keep the
suite short; each rank's stdout / stderr is kept apart with ``--log-dir --redirects 3``.
``tests/dist_probe.py`` (``--import``) dumps each rank's first gradients, final weights
and metric sums, injects NaN losses and SIGKILLs, and makes rank > 0 fail on any write
into the work dir.
"""

import glob
import logging
import os
import shutil
import statistics
import subprocess
import sys
from argparse import Namespace

import dist_probe  # noqa: F401  (registers DistProbeHook in this process)
import numpy as np
import pytest
import torch
import yaml
from conftest import DIGITS_CFG, REPO, free_port, tool_env, torchrun_pair
from safetensors.torch import load_file

from scepter_like.cli import load_config
from scepter_like.solver import SOLVERS

RUN_TRAIN = os.path.join(REPO, 'tools', 'run_train.py')
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'dist_probe.py')
TIMEOUT = 120  # seconds; a hang fails the test instead of blocking CI


def torchrun(cfg, overrides, cwd, name, nproc=2, launcher=(), env=None, new_session=False, timeout=TIMEOUT):
    """Run tools/run_train.py under torchrun; returns (CompletedProcess, {rank: (stdout, stderr)})."""
    log_dir = os.path.join(cwd, f'{name}-logs')
    launcher = list(launcher) or [f'--master_port={free_port()}']
    cmd = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={nproc}', *launcher]
    cmd += ['--log-dir', log_dir, '--redirects', '3', RUN_TRAIN, '--cfg', cfg, '--import', PROBE, *overrides]
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env or tool_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=new_session,
    )
    return proc, rank_logs(log_dir)


def rank_logs(log_dir):
    """{local rank: (stdout, stderr)} of the workers torchrun started under ``log_dir``."""
    logs = {}
    for folder in glob.glob(os.path.join(log_dir, '*', 'attempt_0', '*')):
        read = [open(os.path.join(folder, f)).read() for f in ('stdout.log', 'stderr.log')]
        logs[int(os.path.basename(folder))] = tuple(read)
    return logs


def probe_hook(out, **keys):
    return {'NAME': 'DistProbeHook', 'OUT': str(out), **keys}


def digits_cfg(tmp, probe_out, **probe_keys):
    """The digits job with step checkpoints every 30 steps, the last checkpoint, and the probe."""
    cfg = {
        '_BASE_': DIGITS_CFG,
        'SOLVER': {
            'MAX_EPOCHS': 2,
            'LR_SCHEDULER': {'NAME': 'CosineAnnealingLR', 'T_MAX': 2},
            'TRAIN_DATA': {'SPLIT': 'trainval'},  # 1,437 samples: 45 steps an epoch at global batch 32
            'TRAIN_HOOKS': [
                {'NAME': 'BackwardHook'},
                {'NAME': 'LogHook', 'LOG_INTERVAL': 20},
                {'NAME': 'LrHook', 'WARMUP_EPOCHS': 1, 'WARMUP_START_LR': 0.0002},
                {'NAME': 'CheckpointHook', 'STEP_INTERVAL': 30, 'SAVE_BEST_BY': '+accuracy', 'SAVE_LAST': True},
                {'NAME': 'DistSamplerHook'},
                probe_hook(probe_out, **probe_keys),
            ],
        },
    }
    path = os.path.join(tmp, f'digits-{os.path.basename(str(probe_out))}.yaml')
    with open(path, 'w') as f:
        yaml.safe_dump(cfg, f)
    return path


def write_noise(path, n=97, dim=8, classes=3):
    """``n`` samples whose labels are noise: accuracy stays far from 0 and 1, so a miscount shows."""
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.normal(size=(n, dim)).astype(np.float32), y=rng.integers(0, classes, n).astype(np.int64))
    return str(path)


def blob_cfg(tmp, name, npz, hooks, batch=8, **solver_keys):
    data = {'NAME': 'NpzDataset', 'PATH': npz, 'KEY_MAP': {'x': 'img', 'y': 'label'}, 'BATCH_SIZE': batch}
    solver = {
        'NAME': 'TrainValSolver',
        'WORK_DIR': os.path.join(tmp, name),
        'MAX_EPOCHS': 2,
        'MODEL': {'NAME': 'Classifier', 'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 8, 'HIDDEN_DIMS': [16], 'OUT_DIM': 3}},
        'OPTIMIZER': {'NAME': 'AdamW', 'LEARNING_RATE': 0.01},
        'TRAIN_DATA': dict(data),
        'EVAL_DATA': dict(data, SHUFFLE=False),
        'TEST_DATA': dict(data, SHUFFLE=False),
        'METRICS': [{'NAME': 'AccuracyMetric'}],
        'TRAIN_HOOKS': hooks,
    }
    solver.update(solver_keys)
    path = os.path.join(tmp, f'{name}.yaml')
    with open(path, 'w') as f:
        yaml.safe_dump({'ENV': {'SEED': 0, 'NUM_THREADS': 1}, 'SOLVER': solver}, f)
    return path


def in_process_solver(cfg_path, overrides=(), logger=None):
    """The solver of ``cfg_path`` built and set up in this process (world size 1)."""
    cfg = load_config(Namespace(cfg=cfg_path, overrides=list(overrides), imports=[]))
    solver = SOLVERS.build(cfg.SOLVER, logger=logger or logging.getLogger('scepter_like.test.dist'))
    solver.set_up_pre()
    solver.set_up()
    return solver


def load(path):
    return torch.load(path, map_location='cpu', weights_only=False)


def assert_state_equal(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def assert_grads_close(a, b):
    assert a is not None and b is not None and a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-6, msg=key)


def error_lines(text):
    return [line for line in text.splitlines() if 'error:' in line]


# -- the digits job: 2 ranks x 16 vs 1 process x 32 -----------------------------------------------


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('digits')
    out = {'tmp': tmp}
    ref_cfg = digits_cfg(tmp, tmp / 'probe-ref')
    work = tmp / 'ddp'
    guard = tool_env(PROBE_GUARD_DIR=work)
    out['ddp'] = torchrun(
        ref_cfg, [f'SOLVER.WORK_DIR={work}', 'SOLVER.TRAIN_DATA.BATCH_SIZE=16'], tmp, 'ddp', env=guard
    )
    out['ddp_work'] = work
    # killed at step 40 (after the step-30 checkpoint), then resumed with RESUME_FROM=auto
    kill_cfg = digits_cfg(tmp, tmp / 'probe-kill', KILL_AT_STEP=40)
    resumed = tmp / 'resumed'
    args = [f'SOLVER.WORK_DIR={resumed}', 'SOLVER.TRAIN_DATA.BATCH_SIZE=16']
    out['killed'] = torchrun(kill_cfg, args, tmp, 'killed', new_session=True)
    out['after_kill'] = sorted(os.listdir(resumed / 'checkpoints'))
    resume_cfg = digits_cfg(tmp, tmp / 'probe-resumed')
    out['resumed'] = torchrun(resume_cfg, [*args, 'SOLVER.RESUME_FROM=auto'], tmp, 'resumed')
    out['resumed_work'] = resumed
    return out


@pytest.fixture(scope='module')
def digits_single(digits):
    """The same job in one process at the same global batch (32), trained here."""
    tmp = digits['tmp']
    cfg = digits_cfg(tmp, tmp / 'probe-single')
    solver = in_process_solver(cfg, [f'SOLVER.WORK_DIR={tmp / "single"}'])
    try:
        solver.solve()
    finally:
        solver.close()
    return solver, load(tmp / 'probe-single' / 'rank0.pt')


def test_torchrun_digits_runs_and_only_rank0_logs(digits):
    proc, logs = digits['ddp']
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(logs) == [0, 1]
    out0, err0 = logs[0]
    out1, err1 = logs[1]
    assert ' INFO ' in out0 and 'test final (360 samples)' in out0
    assert ' INFO ' not in out1 and ' INFO ' not in err1, out1[-2000:]
    assert 'Traceback' not in err0 + err1


def test_only_rank0_writes_files(digits):
    # rank 1 ran with an audit hook that fails any write under the work dir (the run passed)
    assert digits['ddp'][0].returncode == 0
    work = digits['ddp_work']
    run_records = {'config.yaml', 'env.json', 'metrics.jsonl'}
    assert set(os.listdir(work)) - {'code_snapshot'} == {'checkpoints', 'std_log.txt', '.run.lock'} | run_records
    ckpts = sorted(os.listdir(work / 'checkpoints'))
    assert ckpts == sorted(
        ['latest', 'job.json', 'checkpoint-best.pth', 'checkpoint-last.pth']
        + [f'checkpoint-epoch-{e}.pth' for e in (1, 2)]
        + [f'checkpoint-step-{s}.pth' for s in (30, 60, 90)]
    )
    log = (work / 'std_log.txt').read_text()
    assert 'test final' in log and '[rank 1]' not in log


def test_accuracy_matches_single_process_at_same_global_batch(digits, digits_single):
    solver, single = digits_single
    ranks = [load(digits['tmp'] / 'probe-ref' / f'rank{r}.pt') for r in (0, 1)]
    assert [r['world_size'] for r in ranks] == [2, 2]
    ddp_acc = ranks[0]['epoch_outputs']['test']['accuracy']
    single_acc = single['epoch_outputs']['test']['accuracy']
    assert ddp_acc > 0.8 and abs(ddp_acc - single_acc) <= 0.01, (ddp_acc, single_acc)
    # DDP keeps the replicas identical
    assert_state_equal(ranks[0]['weights'], ranks[1]['weights'])


def test_log_line_means_the_loss_over_every_rank(digits):
    """LogHook's line under DDP: the mean of the interval's losses of both ranks, the same on each rank.

    Two epochs of 45 steps, a line every 20 steps of an epoch: the last one (at the epoch's end) covers
    steps 86-90.
    """
    ranks = [load(digits['tmp'] / 'probe-ref' / f'rank{r}.pt') for r in (0, 1)]
    assert all(len(rank['losses']) == 90 for rank in ranks)
    interval = [loss for rank in ranks for loss in rank['losses'][85:]]
    assert ranks[0]['last_logged']['loss'] == pytest.approx(statistics.fmean(interval), rel=1e-12, abs=0)
    assert ranks[1]['last_logged'] == ranks[0]['last_logged']
    assert ranks[0]['losses'][85:] != ranks[1]['losses'][85:]  # the ranks' own means would differ


def test_ddp_first_step_gradients_equal_single_process(digits, digits_single):
    _, single = digits_single
    ranks = [load(digits['tmp'] / 'probe-ref' / f'rank{r}.pt') for r in (0, 1)]
    assert_grads_close(ranks[0]['first_grads'], single['first_grads'])
    assert_state_equal(ranks[0]['first_grads'], ranks[1]['first_grads'])


def test_eval_metrics_exact_under_ddp(digits, digits_single):
    """The test accuracy of 2 ranks equals one process's on the same weights; each sample counted once."""
    solver, _ = digits_single
    ranks = [load(digits['tmp'] / 'probe-ref' / f'rank{r}.pt') for r in (0, 1)]
    assert sum(r['metric_sums'][0][-3].item() for r in ranks) == 360  # the count state (then the label range's)
    solver.unwrapped_model.load_state_dict(ranks[0]['weights'])
    solver.solve_test()
    assert solver.epoch_outputs['test'] == ranks[0]['epoch_outputs']['test']


def test_kill_and_resume_under_torchrun_is_exact(digits):
    killed, _ = digits['killed']
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILLed with its workers
    assert digits['after_kill'] == ['checkpoint-step-30.pth', 'job.json', 'latest']
    proc, logs = digits['resumed']
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'resumed from' in logs[0][0] and 'step-30.pth' in logs[0][0]
    ref = load(digits['ddp_work'] / 'checkpoints' / 'checkpoint-last.pth')
    got = load(digits['resumed_work'] / 'checkpoints' / 'checkpoint-last.pth')
    assert_state_equal(ref['model'], got['model'])
    for i, state in ref['optimizer']['state'].items():
        assert_state_equal(state, got['optimizer']['state'][i])
    assert ref['solver']['epoch_outputs'] == got['solver']['epoch_outputs']


def test_resume_with_other_world_size_maps_position_and_warns(digits):
    """A 2-rank checkpoint (global batch 32) resumed by one process with batch 16."""
    ckpt_path = digits['ddp_work'] / 'checkpoints' / 'checkpoint-step-30.pth'
    ckpt = load(ckpt_path)
    tmp = digits['tmp']
    records = []
    logger = logging.getLogger('scepter_like.test.dist.resize')
    logger.addHandler(logging.Handler())
    logger.handlers[-1].emit = records.append
    cfg = digits_cfg(tmp, tmp / 'probe-resize')
    overrides = [
        f'SOLVER.WORK_DIR={tmp / "resize"}',
        'SOLVER.TRAIN_DATA.BATCH_SIZE=16',
        f'SOLVER.RESUME_FROM={ckpt_path}',
    ]
    solver = in_process_solver(cfg, overrides, logger=logger)
    solver.close()
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert any('saved with 2 processes and this run has 1' in w and 'data order' in w for w in warnings), warnings
    assert_state_equal(solver.unwrapped_model.state_dict(), ckpt['model'])
    for i, state in solver.optimizer.state_dict()['state'].items():
        assert_state_equal(state, ckpt['optimizer']['state'][i])
    # 30 batches of 2 x 16 = 960 samples into the epoch = 60 batches of 16
    assert (solver.progress.epoch, solver.progress.iters[solver.mode], solver.progress.total_iter) == (0, 60, 30)


# -- a NaN on one rank; too many in a row ---------------------------------------------------------


@pytest.fixture(scope='module')
def nan_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('nan')
    npz = write_noise(tmp / 'noise.npz', n=96)
    hooks = [
        {'NAME': 'BackwardHook', 'NONFINITE_POLICY': 'skip', 'MAX_NONFINITE_STEPS': 3},
        {'NAME': 'DistSamplerHook'},
        probe_hook(tmp / 'probe', NAN_STEPS=[2, 7, 8, 9], NAN_RANK=1),
    ]
    cfg = blob_cfg(tmp, 'nan', npz, hooks, MAX_EPOCHS=5)
    # a slow monitor: torchrun must not SIGTERM one rank before it printed its own error
    launcher = [f'--master_port={free_port()}', '--monitor-interval=2']
    proc, logs = torchrun(cfg, [], tmp, 'nan', launcher=launcher)
    return proc, logs, [load(tmp / 'probe' / f'rank{r}.pt') for r in (0, 1)]


def test_nan_on_one_rank_is_skipped_on_all_ranks(nan_run):
    _, logs, ranks = nan_run
    for rank in (0, 1):
        out = logs[rank][0]
        assert 'non-finite loss at step 2: optimizer step skipped (1 in a row, 1 in all)' in out, out[-2000:]
    assert '[rank 1] ' in logs[1][0]
    # both ranks skipped together: the replicas stay identical and finite
    assert_state_equal(ranks[0]['weights'], ranks[1]['weights'])
    assert all(torch.isfinite(v).all() for v in ranks[0]['weights'].values())


def test_too_many_nonfinite_steps_stop_every_rank(nan_run):
    proc, logs, ranks = nan_run
    assert proc.returncode != 0 and 'exitcode  : 2' in proc.stderr, proc.stderr[-2000:]
    for rank in (0, 1):
        err = logs[rank][1]
        lines = error_lines(err)
        assert len(lines) == 1 and '3 non-finite losses in a row' in lines[0], err[-2000:]
        assert 'Traceback' not in err
        # the third NaN in a row (step 9) ends the run inside its update: 8 steps were completed
        assert ranks[rank]['total_iter'] == 8 and 'TrainingError' in ranks[rank]['failed']
    assert error_lines(logs[1][1])[0].startswith('[rank 1] error: ')


def test_skipped_steps_advance_no_schedule_on_any_rank(tmp_path):
    """NaN on 3 of 40 steps (rank 1 only), NONFINITE_POLICY skip: 37 optimizer steps on both ranks, and the
    per-step LR schedule and the EMA advanced 37 times."""
    npz = write_noise(tmp_path / 'noise.npz', n=160)  # 20 steps an epoch at 2 ranks x 4
    hooks = [
        {'NAME': 'BackwardHook', 'NONFINITE_POLICY': 'skip', 'MAX_NONFINITE_STEPS': 2},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False, 'WARMUP_EPOCHS': 0},
        {'NAME': 'EMAHook', 'DECAY': 0.9},
        probe_hook(tmp_path / 'probe', NAN_STEPS=[5, 17, 30], NAN_RANK=1),
    ]
    schedule = {'NAME': 'LinearLR', 'START_FACTOR': 1.0, 'END_FACTOR': 0.0, 'TOTAL_ITERS': 50}
    cfg = blob_cfg(tmp_path, 'skip', npz, hooks, batch=4, LR_SCHEDULER=schedule, EVAL_DATA=None, TEST_DATA=None)
    proc, logs = torchrun(cfg, [], tmp_path, 'skip')
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [load(tmp_path / 'probe' / f'rank{r}.pt') for r in (0, 1)]
    for rank in ranks:
        assert rank['total_iter'] == 40 and rank['optimizer_steps'] == 37 and rank['ema_updates'] == 37
        assert rank['lr'] == pytest.approx(0.01 * (1 - 37 / 50))  # LinearLR after 37 steps, not 40
    assert_state_equal(ranks[0]['weights'], ranks[1]['weights'])


# -- multi-node FSDP: two torchrun agents on 127.0.0.1, uneven data ---------------------------------


@pytest.fixture(scope='module')
def noise_data(tmp_path_factory):
    """97 samples (odd: no world size x batch divides it) and the single-process reference (batch 16)."""
    tmp = tmp_path_factory.mktemp('noise')
    npz = write_noise(tmp / 'noise.npz', n=97)
    cfg = blob_cfg(tmp, 'single', npz, [{'NAME': 'BackwardHook'}, probe_hook(tmp / 'probe-single')], batch=16)
    solver = in_process_solver(cfg, ['SOLVER.MAX_STEPS=1'])
    solver.solve()
    solver.close()
    return tmp, npz, solver, load(tmp / 'probe-single' / 'rank0.pt')


def two_nodes(cfg, cwds, name, overrides=((), ())):
    """tools/run_train.py under two torchrun agents on 127.0.0.1 (``--nnodes=2``, one process each), node ``n``
    started in ``cwds[n]`` with ``overrides[n]``; returns (exit codes, agents' stderr, each worker's (stdout, stderr)).
    """
    port = free_port()
    procs = []
    for node in (0, 1):
        log_dir = os.path.join(cwds[node], f'{name}{node}-logs')
        launcher = ['--nnodes=2', f'--node_rank={node}', '--master_addr=127.0.0.1', f'--master_port={port}']
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=1', *launcher]
        cmd += ['--log-dir', log_dir, '--redirects', '3', RUN_TRAIN, '--cfg', cfg, '--import', PROBE, *overrides[node]]
        procs.append(
            subprocess.Popen(cmd, cwd=cwds[node], env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    try:
        results = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    logs = [rank_logs(os.path.join(cwds[node], f'{name}{node}-logs')).get(0, ('', '')) for node in (0, 1)]
    return [p.returncode for p in procs], [err.decode(errors='replace') for _, err in results], logs


@pytest.fixture(scope='module')
def multinode(noise_data):
    """One run serves the multi-node, FSDP and uneven-data tests (each torchrun costs seconds):
    2 nodes x 1 process, SOLVER.PARALLEL fsdp; then one node x 2 processes resumes its step-5
    checkpoint."""
    tmp, npz, _, _ = noise_data
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 5, 'SAVE_LAST': True},
        {'NAME': 'DistSamplerHook'},
        probe_hook(tmp / 'probe-mn'),
    ]
    cfg = blob_cfg(tmp, 'multinode', npz, hooks, PARALLEL='fsdp')
    # SOLVER.CODE_SNAPSHOT: a key rank 0 alone reads
    codes, agent_stderr, logs = two_nodes(cfg, (tmp, tmp), 'node', ([], ['SOLVER.CODE_SNAPSHOT=false']))
    step5 = tmp / 'multinode' / 'checkpoints' / 'checkpoint-step-5.pth'
    args = [
        f'SOLVER.WORK_DIR={tmp / "resumed"}',
        f'SOLVER.RESUME_FROM={step5}',
        f'SOLVER.TRAIN_HOOKS.3.OUT={tmp / "probe-resumed"}',
    ]
    resumed = torchrun(cfg, args, tmp, 'resumed') if step5.exists() else None
    return {
        'codes': codes,
        'agent_stderr': agent_stderr,
        'logs': logs,
        'ranks': [load(tmp / 'probe-mn' / f'rank{r}.pt') for r in (0, 1)],
        'last': tmp / 'multinode' / 'checkpoints' / 'checkpoint-last.pth',
        'resumed': resumed,
        'resumed_last': tmp / 'resumed' / 'checkpoints' / 'checkpoint-last.pth',
    }


def test_multinode_rendezvous_and_train_together(multinode, noise_data):
    assert multinode['codes'] == [0, 0], [e[-2000:] for e in multinode['agent_stderr']] + multinode['logs']
    ranks = multinode['ranks']
    assert [(r['rank'], r['local_rank'], r['world_size']) for r in ranks] == [(0, 0, 2), (1, 0, 2)]
    # each node computed half of the global batch: together they give one process's gradient
    assert_grads_close(ranks[0]['first_grads'], noise_data[3]['first_grads'])
    assert_state_equal(ranks[0]['weights'], ranks[1]['weights'])
    assert ' INFO ' in multinode['logs'][0][0] and ' INFO ' not in multinode['logs'][1][0]
    # the nodes were given different overrides: rank 0 says where their configs differ
    differ = "WARNING rank 1's config differs from rank 0's at SOLVER.CODE_SNAPSHOT (rank 0: True, rank 1: False);"
    assert differ in multinode['logs'][0][0]


def test_uneven_dataset_finishes_with_exact_metrics(multinode, noise_data):
    """97 samples, 2 ranks, batch 8: train pads to 7 batches each; eval (7 and 6 batches) counts each once."""
    assert multinode['codes'] == [0, 0]
    ranks = multinode['ranks']
    assert [r['total_iter'] for r in ranks] == [14, 14]  # 2 epochs of ceil(49 / 8) batches
    assert sum(r['metric_sums'][0][-3].item() for r in ranks) == 97  # the count state
    solver = noise_data[2]
    solver.unwrapped_model.load_state_dict(ranks[0]['weights'])
    solver.solve_test()
    assert solver.epoch_outputs['test'] == ranks[0]['epoch_outputs']['test']
    assert 0.0 < solver.epoch_outputs['test']['accuracy'] < 1.0


def test_fsdp_checkpoint_holds_the_full_unwrapped_state(multinode, noise_data):
    assert multinode['codes'] == [0, 0]
    ckpt = torch.load(multinode['last'], weights_only=True)
    own = noise_data[2].unwrapped_model.state_dict()
    assert {k: v.shape for k, v in ckpt['model'].items()} == {k: v.shape for k, v in own.items()}
    assert all(type(v) is torch.Tensor for v in ckpt['model'].values())
    shapes = sorted(tuple(v.shape) for v in own.values())
    assert sorted(tuple(s['exp_avg'].shape) for s in ckpt['optimizer']['state'].values()) == shapes
    assert_state_equal(ckpt['model'], multinode['ranks'][0]['weights'])


def test_fsdp_resume_is_exact(multinode):
    """The multi-node run's step-5 checkpoint, resumed by 2 processes on one node, ends bit-equal."""
    proc, logs = multinode['resumed']
    assert proc.returncode == 0, logs.get(0, ('', proc.stderr))[1][-3000:]
    ref = torch.load(multinode['last'], weights_only=True)
    got = torch.load(multinode['resumed_last'], weights_only=True)
    assert_state_equal(ref['model'], got['model'])
    for i, state in ref['optimizer']['state'].items():
        assert_state_equal(state, got['optimizer']['state'][i])


def test_final_test_weights_are_one_file_on_every_node(tmp_path):
    """Two nodes, each with its own WORK_DIR (the same relative path in its own folder): the best checkpoint rank 0
    names is missing on node 1, then (node 0's checkpoints copied over, but an older best) other bytes there.
    Either way every rank stops with one error line before testing, instead of rank 1 failing alone or testing
    other weights than rank 0 (the all-reduced accuracy a mix of two models)."""
    npz = write_noise(tmp_path / 'noise.npz', n=96)
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'CheckpointHook', 'STEP_INTERVAL': 5, 'SAVE_BEST_BY': '+accuracy', 'SAVE_LAST': True},
        {'NAME': 'DistSamplerHook'},
    ]
    cfg = blob_cfg(tmp_path, 'apart', npz, hooks, WORK_DIR='work')
    nodes = (tmp_path / 'node0', tmp_path / 'node1')
    for node in nodes:
        node.mkdir()
    best = os.path.join('work', 'checkpoints', 'checkpoint-best.pth')
    codes, agents, logs = two_nodes(cfg, nodes, 'fresh')
    assert codes == [1, 1] and 'exitcode  : 2' in agents[0] + agents[1], agents
    for _, err in logs:
        lines = error_lines(err)
        want = f'the test weights (best): checkpoint {best} does not exist on rank(s) [1]; put WORK_DIR on a'
        assert len(lines) == 1 and want in lines[0], err[-2000:]
    folder = nodes[1] / 'work' / 'checkpoints'
    shutil.copytree(nodes[0] / 'work' / 'checkpoints', folder)
    shutil.copyfile(folder / 'checkpoint-step-5.pth', folder / 'checkpoint-best.pth')  # node 1's older best
    resume = [f'SOLVER.RESUME_FROM={os.path.join("work", "checkpoints", "checkpoint-step-5.pth")}']
    codes, agents, logs = two_nodes(cfg, nodes, 'copied', (resume, resume))
    assert codes == [1, 1], agents
    assert 'resumed from' in logs[0][0]
    for _, err in logs:
        lines = error_lines(err)
        want = f'the test weights (best): checkpoint {best} holds other bytes on rank(s) [1] than on rank 0'
        assert len(lines) == 1 and want in lines[0], err[-2000:]


def test_fsdp_final_test_with_the_best_checkpoint(noise_data, tmp_path):
    """FSDP, TEST_WITH best: the best checkpoint's full weights are cut to each rank's shard for the test (a
    plain state dict into the sharded model was a crash blamed on the model), and the weights training ended
    with are back for SAVE_LAST (and SafetensorsHook's export, gathered on every rank).  EMAHook's state and
    eval_model are full tensors (each rank's DTensor shard before, which weights_only could not load), and a
    resume cuts them to shards again."""
    npz = write_noise(tmp_path / 'noise.npz', n=96)
    hooks = [
        {'NAME': 'BackwardHook'},
        # the least accuracy is 'best': an early epoch, so the test's weights are not those training ended with
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_BEST_BY': '-accuracy', 'SAVE_LAST': True},
        {'NAME': 'DistSamplerHook'},
        probe_hook(tmp_path / 'probe'),
        {'NAME': 'EMAHook', 'DECAY': 0.5},
        {'NAME': 'SafetensorsHook', 'INTERVAL': 0},
    ]
    cfg = blob_cfg(tmp_path, 'fsdp_best', npz, hooks, PARALLEL='fsdp', MAX_EPOCHS=3)
    proc, logs = torchrun(cfg, [], tmp_path, 'fsdp_best')
    assert proc.returncode == 0, logs.get(0, ('', proc.stderr))[1][-3000:]
    folder = tmp_path / 'fsdp_best' / 'checkpoints'
    assert f'testing with the weights of {folder / "checkpoint-best.pth"} (its evaluation weights)' in logs[0][0]
    best, last = (torch.load(folder / f'checkpoint-{n}.pth', weights_only=True) for n in ('best', 'last'))
    assert best['solver']['total_iter'] < last['solver']['total_iter']
    assert not all(torch.equal(best['model'][k], v) for k, v in last['model'].items())
    rank0 = load(tmp_path / 'probe' / 'rank0.pt')
    assert_state_equal(last['model'], rank0['weights'])  # the end's weights, back after the test
    final = tmp_path / 'fsdp_best' / 'safetensors' / 'weights-final.safetensors'
    assert_state_equal(last['model'], load_file(final))  # full tensors (rank 0 wrote its shards' DTensors: a crash)
    shapes = {k: v.shape for k, v in last['model'].items()}
    for ckpt in (best, last):
        assert {k: v.shape for k, v in ckpt['eval_model'].items()} == shapes
        assert all(type(v) is torch.Tensor for v in ckpt['eval_model'].values())
        assert_state_equal(ckpt['eval_model'], ckpt['hooks']['train.4.EMAHook']['ema'])
    # the test ran with the best checkpoint's EMA: one process testing those weights gives the same metrics
    solver = in_process_solver(cfg, [f'SOLVER.WORK_DIR={tmp_path / "single"}'])
    solver.unwrapped_model.load_state_dict(best['eval_model'])
    solver.solve_test()
    solver.close()
    assert solver.epoch_outputs['test'] == rank0['epoch_outputs']['test']
    resumed_args = [f'SOLVER.RESUME_FROM={folder / "checkpoint-last.pth"}', 'SOLVER.MAX_EPOCHS=4']
    resumed_args += [f'SOLVER.WORK_DIR={tmp_path / "resumed"}']
    proc, logs = torchrun(cfg, resumed_args, tmp_path, 'fsdp_resumed')
    assert proc.returncode == 0, logs.get(0, ('', proc.stderr))[1][-3000:]
    end = torch.load(tmp_path / 'resumed' / 'checkpoints' / 'checkpoint-last.pth', weights_only=True)
    assert end['hooks']['train.4.EMAHook']['updates'] == 4 * last['hooks']['train.4.EMAHook']['updates'] // 3


def test_fsdp_with_swa_is_one_error_line_before_training(noise_data, tmp_path):
    """SWA keeps a deep copy of the model, which FSDP forbids: one error line per rank naming the hook, exit 2."""
    npz = write_noise(tmp_path / 'noise.npz', n=96)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'DistSamplerHook'}, {'NAME': 'SWAHook'}]
    cfg = blob_cfg(tmp_path, 'fsdp_swa', npz, hooks, PARALLEL='fsdp')
    launcher = [f'--master_port={free_port()}', '--monitor-interval=2']
    proc, logs = torchrun(cfg, [], tmp_path, 'fsdp_swa', launcher=launcher)
    assert proc.returncode != 0 and 'exitcode  : 2' in proc.stderr, proc.stderr[-2000:]
    for rank in (0, 1):
        err = logs[rank][1]
        lines = error_lines(err)
        assert len(lines) == 1 and 'SOLVER.TRAIN_HOOKS[2]: SWAHook' in lines[0] and 'fsdp' in lines[0], err[-2000:]
        assert 'Traceback' not in err
    assert 'step 1 ' not in logs[0][0]


def test_ddp_accumulation_all_reduces_once_per_optimizer_step(noise_data, tmp_path):
    """Micro-steps run their forward under no_sync: 2 ranks x 2 micro-batches of 4 = one process's batch of 16."""
    npz, single = noise_data[1], noise_data[3]
    hooks = [{'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2}, {'NAME': 'DistSamplerHook'}, probe_hook(tmp_path / 'p')]
    cfg = blob_cfg(tmp_path, 'accumulate', npz, hooks, batch=4)
    proc, logs = torchrun(cfg, ['SOLVER.MAX_STEPS=4'], tmp_path, 'accumulate')
    assert proc.returncode == 0, logs.get(0, ('', proc.stderr))[1][-3000:]
    ranks = [load(tmp_path / 'p' / f'rank{r}.pt') for r in (0, 1)]
    assert [(r['total_iter'], r['optimizer_steps']) for r in ranks] == [(4, 2), (4, 2)]
    assert [r['allreduces'] for r in ranks] == [2, 2]  # the tiny model's gradients fit one bucket
    assert_grads_close(ranks[0]['first_grads'], single['first_grads'])
    # after_backward (the probe runs before BackwardHook) sees the all-reduced gradients, on optimizer steps only
    norms = [r['backward_norms'] for r in ranks]
    assert [[step for step, _ in n] for n in norms] == [[1, 3], [1, 3]]  # the last micro-batch of each group
    assert [float(v) for _, v in norms[0]] == [float(v) for _, v in norms[1]]
    single_norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in single['first_grads'].values()]))
    torch.testing.assert_close(norms[0][0][1], single_norm, rtol=1e-4, atol=1e-6)
    assert_state_equal(ranks[0]['weights'], ranks[1]['weights'])


ONE_RANK_FAILS = """
import sys

import torch
import torch.distributed as dist
from scepter_like.cli import run
from scepter_like.errors import ConfigError
from scepter_like.utils.distributed import init_distributed


def main(argv):
    init_distributed(backend='gloo', timeout_s=60, device='cpu')
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == 1:
        raise ConfigError('SOLVER.X: rank 1 alone finds it wrong; fix it')
    dist.all_reduce(torch.ones(1))  # rank 0 waits for rank 1 here, in vain


sys.exit(run(main, []))
"""


def test_torchrun_names_the_rank_whose_error_stopped_the_job(tmp_path):
    """Rank 1 raises a user error, rank 0 then loses its peer; both have exited when torchrun looks (a slow
    monitor), which saw them in rank order within one second and called rank 0 the root cause.  Each writes its
    line to torchrun's error file: rank 1's second rounded down, rank 0's (a bystander) rounded up."""
    job = tmp_path / 'job.py'
    job.write_text(ONE_RANK_FAILS)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}']
    cmd += ['--monitor-interval=2', str(job)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=tool_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 1, proc.stderr[-3000:]
    others, root = proc.stderr.split('Root Cause (first observed failure):')
    assert 'rank      : 1 (local_rank: 1)' in root and 'exitcode  : 2' in root, proc.stderr[-3000:]
    assert 'traceback : error: SOLVER.X: rank 1 alone finds it wrong; fix it' in root, proc.stderr[-3000:]
    assert (
        'rank      : 0 (local_rank: 0)' in others and 'traceback : error: another process of the job stopped' in others
    )


# -- bad input: one error line per process, exit 2 -------------------------------------------------


def test_world_size_the_sampler_cannot_split(tmp_path):
    npz = write_noise(tmp_path / 'small.npz', n=20)
    cfg = blob_cfg(tmp_path, 'small', npz, [{'NAME': 'BackwardHook'}], batch=16)
    launcher = [f'--master_port={free_port()}', '--monitor-interval=2']
    proc, logs = torchrun(cfg, ['SOLVER.TRAIN_DATA.DROP_LAST=true'], tmp_path, 'small', launcher=launcher)
    assert proc.returncode != 0 and 'exitcode  : 2' in proc.stderr
    for rank in (0, 1):
        err = logs[rank][1]
        lines = error_lines(err)
        assert len(lines) == 1 and 'cannot give each of 2 ranks one batch of 16' in lines[0], err
        assert 'Traceback' not in err
    assert not os.path.exists(tmp_path / 'small' / 'checkpoints')


def test_unreachable_rendezvous_times_out_with_one_error(tmp_path):
    """A worker whose peers never join (torchrun's variables, nobody at MASTER_PORT for rank 1)."""
    npz = write_noise(tmp_path / 'd.npz', n=20)
    cfg = blob_cfg(tmp_path, 'alone', npz, [{'NAME': 'BackwardHook'}])
    env = tool_env(RANK=0, LOCAL_RANK=0, WORLD_SIZE=2, MASTER_ADDR='127.0.0.1', MASTER_PORT=free_port())
    cmd = [sys.executable, RUN_TRAIN, '--cfg', cfg, 'ENV.DIST_TIMEOUT=2']
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: could not join the process group'), proc.stderr
    assert 'rank 0 of 2' in lines[0] and 'MASTER_ADDR' in lines[0]


PEER_DIES = """
import datetime, os, sys, time
import torch
import torch.distributed as dist
from scepter_like.cli import run

store_file, rank, peer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = dist.FileStore(store_file, 2)
dist.init_process_group('gloo', store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=3))
if rank == 1:
    dist.all_reduce(torch.ones(1))
    if peer == 'hangs':  # stopped (kill -STOP), stuck or far behind: it takes no part in the next collective
        time.sleep(60)
    os._exit(9)  # dies between two collectives, as an OOM-killed or crashed rank does


def main(argv):
    dist.all_reduce(torch.ones(1))
    time.sleep(1)
    dist.all_reduce(torch.ones(1))


sys.exit(run(main, []))
"""


@pytest.mark.parametrize(
    'peer, said',
    [
        ('dies', 'error: another process of the job stopped, so this one cannot go on; the cause is in that process'),
        ('hangs', 'error: a collective waited ENV.DIST_TIMEOUT for another process of the job in vain'),
    ],
    ids=['dies', 'hangs'],
)
def test_a_collective_that_lost_its_peer_is_one_line_not_a_traceback(tmp_path, peer, said):
    """Another node's process died, or hangs: this one's traceback (30 lines into backward) only said where it
    waited."""
    store = str(tmp_path / 'store')
    other = subprocess.Popen([sys.executable, '-c', PEER_DIES, store, '1', peer], env=tool_env())
    try:
        res = subprocess.run(
            [sys.executable, '-c', PEER_DIES, store, '0', peer],
            env=tool_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        other.kill()
        other.wait(timeout=60)
    assert res.returncode == 1 and other.returncode == (9 if peer == 'dies' else -9), res.stderr[-2000:]
    assert res.stderr.startswith(said) and res.stderr.count('\n') == 1, res.stderr[-2000:]
    assert ('(Connection closed by peer [127.0.0.1]:' if peer == 'dies' else '(Timed out waiting 3000ms') in res.stderr


def test_save_eval_data_holds_the_rows_in_dataset_order_on_two_processes(tmp_path):
    """Rank r evaluates samples r, r + 2, ...; SAVE_EVAL_DATA's file (and a whole-pass metric's inputs) still hold
    the rows in dataset order, so the 2-process file equals the 1-process one row by row (45 samples: uneven
    shares).  The evaluation of a model without training, so the logits agree too."""
    rng = np.random.default_rng(0)
    npz = tmp_path / 'rows.npz'
    n = 45
    np.savez(npz, x=rng.normal(size=(n, 8)).astype(np.float32), y=rng.integers(0, 3, n), index=np.arange(n))
    cfg = blob_cfg(
        tmp_path, 'run', str(npz), [], EXTRA_KEYS=['index'], TRAIN_DATA=None, TEST_DATA=None, SAVE_EVAL_DATA=True
    )
    saved = {}
    for procs in (1, 2):
        work = tmp_path / f'w{procs}'
        args = [RUN_TRAIN, '--cfg', cfg, f'SOLVER.WORK_DIR={work}']
        if procs == 1:
            res = subprocess.run(
                [sys.executable, *args], env=tool_env(), capture_output=True, text=True, timeout=TIMEOUT
            )
        else:
            res = torchrun_pair(*args, timeout=TIMEOUT)
        assert res.returncode == 0, res.stderr[-3000:]
        saved[procs] = torch.load(work / 'eval_00000.pth', weights_only=True)
    assert saved[1]['index'].tolist() == list(range(n))
    assert torch.equal(saved[2]['index'], saved[1]['index']) and torch.equal(saved[2]['label'], saved[1]['label'])
    torch.testing.assert_close(saved[2]['logits'], saved[1]['logits'])
