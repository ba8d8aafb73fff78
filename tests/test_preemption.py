"""Preemption and clusters (docs/clusters.md): a stop signal checkpoints at a step boundary and
the resume is bit-exact (SIGTERM, SIGUSR1, a first SIGINT; one process and two torchrun ranks);
a second SIGINT, a signal in set-up and a signal during a checkpoint write; SLURM's variables
launch a job and its requeue resumes; torchrun's elastic restart resumes by itself; a torchrun
job exits 0 every time.

The single-process job is the kill-and-resume job of ``test_checkpoint_resume`` (Dropout MLP,
AdamW, per-step cosine schedule, step / epoch / best / last checkpoints, a hook with state).
"""

import os
import re
import signal
import subprocess
import sys

import pytest
import torch
from ckpt_support import SIGNAL_ENV, SIGNAL_IN_SAVE_ENV, SIGNAL_IN_SET_UP_ENV
from conftest import REPO, free_port, tool_env
from helpers import write_blobs
from test_checkpoint_resume import SUPPORT, TOTAL, assert_same, final_state, job_config, served, train
from test_distributed import (
    RUN_TRAIN,
    TIMEOUT,
    assert_state_equal,
    blob_cfg,
    load,
    probe_hook,
    rank_logs,
    torchrun,
)

from scepter_like.errors import DistributedError
from scepter_like.utils.checkpoint import latest_checkpoint
from scepter_like.utils.launch_env import first_host, read_launch_env


def run_job(cfg, work, record, *overrides, own_group=False, **env):
    """tools/run_train.py on the job with ``env`` added (the signal points of ckpt_support.py); ``own_group``: in
    a process group of its own, which a signal to the group reaches and the tests' does not."""
    args = ['--cfg', cfg, '--import', SUPPORT, f'SOLVER.WORK_DIR={work}', f'SOLVER.TRAIN_DATA.RECORD={record}']
    return subprocess.run(
        [sys.executable, RUN_TRAIN, *args, *overrides],
        env=tool_env(**env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        start_new_session=own_group,
    )


def checkpoint_files(work):
    folder = work / 'checkpoints'
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def latest_name(work):
    return os.path.basename(latest_checkpoint(str(work / 'checkpoints')))


def saved_step(work, name):
    return torch.load(work / 'checkpoints' / name, weights_only=True)['solver']['total_iter']


@pytest.fixture(scope='module')
def alone(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('alone')
    cfg = job_config(tmp, 0)
    res = train(cfg, tmp / 'alone', tmp / 'alone.rec')
    assert res.returncode == 0, res.stderr
    return cfg, final_state(tmp / 'alone')


# a SLURM job, and its requeue: the same command, RESUME_FROM left empty, SLURM_RESTART_COUNT > 0
SLURM_JOB = {'SLURM_JOB_ID': 5, 'SLURM_PROCID': 0, 'SLURM_NTASKS': 1}
SLURM_REQUEUE = {**SLURM_JOB, 'SLURM_RESTART_COUNT': 1}


@pytest.mark.parametrize(
    'name, job_env, resume_overrides, resume_env',
    [('SIGTERM', {}, ['SOLVER.RESUME_FROM=auto'], {}), ('SIGUSR1', SLURM_JOB, [], SLURM_REQUEUE)],
    ids=['SIGTERM-resume-auto', 'SIGUSR1-slurm-requeue'],
)
def test_a_stop_signal_checkpoints_at_the_step_boundary_and_resumes_bit_exact(
    alone, tmp_path, name, job_env, resume_overrides, resume_env
):
    cfg, reference = alone
    work = tmp_path / 'chain'
    res = run_job(cfg, work, tmp_path / 'a.rec', **job_env, **{SIGNAL_ENV: f'{name}:9'})  # arrives as step 10 begins
    signum = getattr(signal, name)
    assert res.returncode == 128 + signum, res.stderr[-3000:]
    assert f'stopped by {name} after step 10' in res.stdout and 'RESUME_FROM=auto' in res.stdout
    assert re.search(r'epoch \d+/\d+ trained in \S+s \(stopped after iter \d+/\d+\)\n', res.stdout)  # not whole
    assert len(served(tmp_path / 'a.rec')) == 10  # step 10 ran to its end, no batch after it
    assert latest_name(work) == 'preempted-step-10.pth' and saved_step(work, 'preempted-step-10.pth') == 10
    # a requeued SLURM job resumes by itself: without it, this WORK_DIR would be refused (exit 2)
    res = run_job(cfg, work, tmp_path / 'b.rec', *resume_overrides, **resume_env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'resumed from' in res.stdout and 'preempted-step-10.pth' in res.stdout
    assert len(served(tmp_path / 'b.rec')) == TOTAL - 10
    assert_same(reference, final_state(work))


def test_a_stop_signal_to_the_whole_group_with_loader_workers_stops_at_the_step_boundary(alone, tmp_path):
    """SLURM signals every process of the step: the loader workers died first, and the run ended with a
    RuntimeError blamed on the model and no checkpoint of its last steps (SIGUSR1 and SIGINT: the test below)."""
    cfg, _ = alone
    name = 'SIGTERM'
    work = tmp_path / 'w'
    workers = 'SOLVER.TRAIN_DATA.NUM_WORKERS=2'
    res = run_job(cfg, work, tmp_path / 'a.rec', workers, own_group=True, **{SIGNAL_ENV: f'{name}:9:group'})
    assert res.returncode == 128 + getattr(signal, name), res.stderr[-3000:]
    assert f'stopped by {name} after step 10' in res.stdout and 'Traceback' not in res.stderr
    assert latest_name(work) == 'preempted-step-10.pth'


def test_a_first_sigint_stops_gracefully_and_a_signal_in_its_checkpoint_write_lets_it_finish(alone, tmp_path):
    cfg, reference = alone
    work = tmp_path / 'w'
    signals = {SIGNAL_ENV: 'SIGINT:9', SIGNAL_IN_SAVE_ENV: 'SIGTERM:preempted'}  # SIGTERM half-way into the file
    res = run_job(cfg, work, tmp_path / 'a.rec', **signals)
    assert res.returncode == 130, res.stderr[-3000:]
    assert 'stopped by SIGINT after step 10' in res.stdout and 'Traceback' not in res.stderr
    assert not [n for n in checkpoint_files(work) if n.startswith('.tmp')]
    assert latest_name(work) == 'preempted-step-10.pth' and saved_step(work, 'preempted-step-10.pth') == 10
    res = train(cfg, work, tmp_path / 'b.rec', resume=True)  # the file is whole: the resume is bit-exact
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same(reference, final_state(work))


def test_a_second_sigint_stops_at_once_and_the_previous_latest_stays(alone, tmp_path):
    """The second Ctrl-C comes half-way into the preempted checkpoint's file: that write is dropped."""
    cfg, _ = alone
    work = tmp_path / 'w'
    res = run_job(cfg, work, tmp_path / 'a.rec', **{SIGNAL_ENV: 'SIGINT:9', SIGNAL_IN_SAVE_ENV: 'SIGINT:preempted'})
    assert res.returncode == 130, res.stderr[-3000:]
    assert 'interrupted' in res.stderr and 'stopped by' not in res.stdout and 'Traceback' not in res.stderr
    names = checkpoint_files(work)
    assert not [n for n in names if n.startswith('.tmp') or n.startswith('preempted')], names
    assert latest_name(work) == 'checkpoint-step-8.pth' and saved_step(work, 'checkpoint-step-8.pth') == 8


def test_a_signal_during_a_periodic_checkpoint_write_lets_it_finish(alone, tmp_path):
    cfg, _ = alone
    work = tmp_path / 'w'
    # the third torch.save is the best checkpoint after epoch 1's evaluation (step 6)
    res = run_job(cfg, work, tmp_path / 'a.rec', **{SIGNAL_IN_SAVE_ENV: 'SIGTERM:3'})
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    names = checkpoint_files(work)
    assert not [n for n in names if n.startswith('.tmp')], names
    assert saved_step(work, 'checkpoint-best.pth') == 6  # the interrupted write completed
    assert latest_name(work) == 'preempted-step-7.pth'  # the next step boundary


def test_a_signal_during_set_up_ends_the_run_at_once(alone, tmp_path):
    """Nothing is trained yet: no checkpoint, one line, the signal's status (the train data is being built)."""
    cfg, _ = alone
    work = tmp_path / 'w'
    res = run_job(cfg, work, tmp_path / 'a.rec', **{SIGNAL_IN_SET_UP_ENV: 'SIGTERM'})
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    assert 'stopped by SIGTERM during set-up' in res.stderr and 'Traceback' not in res.stderr
    assert checkpoint_files(work) == [] and not os.path.exists(tmp_path / 'a.rec')  # no step ran


def test_launch_env_reads_slurm_and_prefers_torchrun():
    slurm = {'SLURM_PROCID': '3', 'SLURM_NTASKS': '4', 'SLURM_LOCALID': '1', 'SLURM_JOB_ID': '77'}
    got = read_launch_env({**slurm, 'SLURM_NODELIST': 'gpu[07-09,12],cpu1'})
    assert (got.launcher, got.rank, got.world_size, got.local_rank) == ('slurm', 3, 4, 1)
    assert (got.master_addr, got.master_port) == ('gpu07', str(29500 + 1 + 77))
    # under salloc SLURM_LAUNCH_NODE_IPADDR is the login node, which runs no task; the first host runs task 0
    salloc = {**slurm, 'SLURM_NODELIST': 'gpu[07-08]', 'SLURM_LAUNCH_NODE_IPADDR': '10.0.0.5'}
    assert read_launch_env(salloc).master_addr == 'gpu07'
    assert read_launch_env({**salloc, 'MASTER_ADDR': '10.0.0.6'}).master_addr == '10.0.0.6'  # (Lightning's order)
    with pytest.raises(
        DistributedError, match=r'^SLURM gives no SLURM_NODELIST; set MASTER_ADDR to the host of task 0'
    ):
        read_launch_env({**slurm, 'SLURM_LAUNCH_NODE_IPADDR': '10.0.0.5'})
    torchrun_env = {**slurm, 'RANK': '1', 'WORLD_SIZE': '2', 'LOCAL_RANK': '1', 'MASTER_ADDR': 'h', 'MASTER_PORT': '5'}
    assert read_launch_env(torchrun_env).launcher == 'torchrun' and read_launch_env(torchrun_env).rank == 1
    assert read_launch_env({'SLURM_PROCID': '0', 'SLURM_NTASKS': '1'}).world_size == 1  # one task: no group
    assert first_host('node5') == 'node5' and first_host('a[1-2]') == 'a1'
    with pytest.raises(DistributedError, match=r'^SLURM_PROCID 3 is not below SLURM_NTASKS 2; the launch gives'):
        read_launch_env({**slurm, 'SLURM_NTASKS': '2', 'SLURM_NODELIST': 'a1'})  # (it waited out DIST_TIMEOUT)
    with pytest.raises(DistributedError, match=r'^RANK 2 is not below WORLD_SIZE 2'):
        read_launch_env({'RANK': '2', 'WORLD_SIZE': '2'})


def test_a_torchrun_worker_says_what_it_waits_for_before_joining(monkeypatch, caplog):
    """A worker whose peers never come (the other node failed at start: its IMPORTS file missing) waited
    DIST_TIMEOUT (30 minutes by default) in silence; now it says, once, before joining, for whom and how long."""
    from scepter_like.utils.distributed import init_distributed

    port = free_port()
    for key, value in {'RANK': '0', 'WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(port)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv('TORCHELASTIC_RESTART_COUNT', raising=False)
    with caplog.at_level('INFO'), pytest.raises(DistributedError):
        init_distributed(backend='gloo', timeout_s=1, device='cpu')
    waiting = [r.getMessage() for r in caplog.records if 'waiting up to' in r.getMessage()]
    assert waiting == [
        f'rank 0 of 2: waiting up to 1 s (ENV.DIST_TIMEOUT) for the other processes at 127.0.0.1:{port}'
        " (each node's torchrun starts its own)"
    ]


def test_a_slurm_task_started_without_srun_says_what_it_waits_for_and_why_it_timed_out(monkeypatch, caplog):
    """The batch step of ``sbatch --ntasks=4`` sets SLURM_PROCID 0 and SLURM_NTASKS 4; a plain python there is one
    task of four, and it waited DIST_TIMEOUT (30 minutes by default) in silence."""
    from scepter_like.utils.distributed import init_distributed

    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'TORCHELASTIC_RESTART_COUNT'):
        monkeypatch.setenv(key, '')  # recorded, so the variables init_distributed sets are gone after the test
        monkeypatch.delenv(key)
    slurm = {'SLURM_PROCID': '0', 'SLURM_NTASKS': '4', 'SLURM_JOB_ID': '9', 'SLURM_NODELIST': '127.0.0.1'}
    for key, value in {**slurm, 'MASTER_PORT': str(free_port())}.items():
        monkeypatch.setenv(key, value)
    with caplog.at_level('INFO'), pytest.raises(DistributedError) as failed:
        init_distributed(timeout_s=1)
    assert 'SLURM task 0 of 4: waiting up to 1 s (ENV.DIST_TIMEOUT) for the other tasks at 127.0.0.1:' in caplog.text
    assert str(failed.value).endswith(
        'SLURM_NTASKS is 4: start the tasks with srun (a plain python in a batch script is one task, which waits for'
        ' the others in vain)'
    )


def test_nccl_without_cuda_and_a_timeout_of_zero_are_one_line_each(monkeypatch):
    from scepter_like.config import Config
    from scepter_like.errors import ConfigError
    from scepter_like.solver.environment import resolve_env
    from scepter_like.utils.distributed import init_distributed

    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('WORLD_SIZE', '2')
    with pytest.raises(DistributedError, match=r'^ENV.BACKEND nccl runs on CUDA devices, and this process has cpu;'):
        init_distributed(backend='nccl', device='cpu')
    with pytest.raises(ConfigError, match=r'^ENV\.DIST_TIMEOUT: must be above 0, got 0'):
        resolve_env(Config({'ENV': {'DIST_TIMEOUT': 0}, 'SOLVER': {}}).SOLVER)


# -- 2 processes ------------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def blobs_job(tmp_path_factory):
    """A 2-rank job on 96 blobs (global batch 16: 6 steps an epoch, 3 epochs) and its uninterrupted run."""
    tmp = tmp_path_factory.mktemp('preempt')
    npz = write_blobs(tmp / 'blobs.npz', n=96)

    def config(name, **probe):
        hooks = [
            {'NAME': 'BackwardHook'},
            {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'STEP_INTERVAL': 4, 'SAVE_LAST': True},
            probe_hook(tmp / f'probe-{name}', **probe),
        ]
        return blob_cfg(tmp, name, npz, hooks, MAX_EPOCHS=3, TEST_DATA=None)

    proc, logs = torchrun(config('ref'), [], tmp, 'ref')
    assert proc.returncode == 0, logs.get(0, ('', proc.stderr))[1][-3000:]
    return tmp, config, load(tmp / 'ref' / 'checkpoints' / 'checkpoint-last.pth')


@pytest.mark.parametrize(
    'target, name, check_seconds, stop_steps',
    [('rank1', 'SIGUSR1', 0, {8}), ('launcher', 'SIGTERM', 0.05, {8, 9, 10})],
    ids=['rank1-SIGUSR1-every-step', 'launcher-SIGTERM-every-50ms'],
)
def test_a_stop_signal_under_torchrun_stops_every_rank_at_one_step_and_resumes_bit_exact(
    blobs_job, target, name, check_seconds, stop_steps
):
    """The signal reaches rank 1 during step 7 (or torchrun, which forwards it to both workers).
    Agreeing at every step (STOP_CHECK_SECONDS 0), every rank stops after step 8, the step the
    agreement's all-reduce overlaps.  Agreeing every 50 ms on steps of >= 20 ms, the ranks agree
    at most every 2 steps: the all-reduce that carries the signal starts at step 7 or 8 and is
    read one interval later, so every rank stops after step 8, 9 or 10."""
    tmp, config, reference = blobs_job
    cfg = config(f'sig-{target}', SIGNAL_AT_STEP=7, SIGNAL_TARGET=target, SIGNAL=name, STEP_SECONDS=0.02)
    proc, logs = torchrun(cfg, [f'ENV.STOP_CHECK_SECONDS={check_seconds}'], tmp, f'sig-{target}', new_session=True)
    assert proc.returncode == 1  # torchrun's own status: its workers failed (138), or it got SIGTERM itself
    if target == 'launcher':
        assert 'death signal, shutting down workers' in proc.stderr  # torchrun forwarded it
    else:
        assert f'exitcode  : {128 + getattr(signal, name)}' in proc.stderr  # torchrun's report of rank 1
    work = tmp / f'sig-{target}'
    preempted = [f for f in checkpoint_files(work) if f.startswith('preempted-step-')]
    assert len(preempted) == 1 and latest_name(work) == preempted[0], checkpoint_files(work)
    step = saved_step(work, preempted[0])
    assert step in stop_steps and preempted[0] == f'preempted-step-{step}.pth'
    assert f'stopped by {name} after step {step}' in logs[0][0], logs[0][0][-2000:]
    for rank in (0, 1):
        assert 'Traceback' not in logs[rank][1], logs[rank][1][-2000:]
    proc, logs = torchrun(cfg, ['SOLVER.RESUME_FROM=auto', 'SOLVER.TRAIN_HOOKS.2.SIGNAL_AT_STEP=0'], tmp, f'r-{target}')
    assert proc.returncode == 0, logs.get(0, ('', proc.stderr))[1][-3000:]
    got = load(work / 'checkpoints' / 'checkpoint-last.pth')
    assert_state_equal(reference['model'], got['model'])


@pytest.mark.parametrize(
    'where, stop_step',
    [({'AT_STEP': 10}, 11), ({'AT_EPOCH': 1}, 6)],
    ids=['in-a-step', 'in-after-epoch'],
)
def test_a_stop_requested_on_one_rank_stops_every_rank_at_one_step(tmp_path, where, stop_step):
    """Only rank 1 calls request_stop (a rank-local condition): the ranks agree on it, as on a signal.  Asked in step
    10 with STOP_CHECK_SECONDS 0, the all-reduce that carries it is read at step 11's boundary; asked in the first
    epoch's after_epoch, it is agreed before the second epoch.  Both ranks stop there, the last checkpoint is of that
    step, the job exits 0 and both ranks say why (rank 1 on its console, which shows warnings only)."""
    npz = write_blobs(tmp_path / 'blobs.npz', n=96)  # 2 ranks of batch 8: 6 steps an epoch
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'RequestStopHook', 'RANK': 1, **where},
        {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'SAVE_LAST': True},
    ]
    cfg = blob_cfg(tmp_path, 'run', npz, hooks, MAX_EPOCHS=3, TEST_DATA=None)
    proc, logs = torchrun(cfg, ['ENV.STOP_CHECK_SECONDS=0'], tmp_path, 'run')
    assert proc.returncode == 0, (proc.stderr[-2000:], logs)
    assert load(tmp_path / 'run' / 'checkpoints' / 'checkpoint-last.pth')['solver']['total_iter'] == stop_step
    said = 'training stops at the next step boundary: a condition only rank 1 sees'
    asker = '(asked by RequestStopHook (SOLVER.TRAIN_HOOKS[1])'
    assert said in logs[0][0] and f'{asker} on rank 1)' in logs[0][0], logs[0][0][-2000:]
    assert said in logs[1][0] and f'{asker})' in logs[1][0], logs[1][0][-2000:]  # its own request
    assert said in (tmp_path / 'run' / 'std_log.txt').read_text()


def test_elastic_restart_resumes_from_latest_by_itself(blobs_job):
    """rank 1 dies at step 9; torchrun restarts both workers, which resume from the step-8 checkpoint."""
    tmp, config, reference = blobs_job
    cfg = config('elastic', WORKER_KILL_AT_STEP=9)
    launcher = ['--rdzv-backend=c10d', f'--rdzv-endpoint=127.0.0.1:{free_port()}', '--max-restarts=1']
    proc, _ = torchrun(cfg, [], tmp, 'elastic', launcher=launcher)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = load(tmp / 'elastic' / 'checkpoints' / 'checkpoint-last.pth')
    assert_state_equal(reference['model'], got['model'])
    restarted = (tmp / 'elastic' / 'std_log.txt').read_text()
    assert 'resumed from' in restarted and 'step-8.pth' in restarted


def test_slurm_variables_launch_two_processes_without_torchrun(blobs_job):
    tmp, config, reference = blobs_job
    cfg = config('slurm')
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = tool_env(
            SLURM_PROCID=rank,
            SLURM_NTASKS=2,
            SLURM_LOCALID=rank,
            SLURM_JOB_ID=1,
            MASTER_ADDR='127.0.0.1',
            MASTER_PORT=port,
        )
        cmd = [sys.executable, RUN_TRAIN, '--cfg', cfg, '--import', os.path.join(REPO, 'tests', 'dist_probe.py')]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    ranks = [load(tmp / 'probe-slurm' / f'rank{r}.pt') for r in (0, 1)]
    assert [(r['rank'], r['world_size']) for r in ranks] == [(0, 2), (1, 2)]
    got = load(tmp / 'slurm' / 'checkpoints' / 'checkpoint-last.pth')
    assert_state_equal(reference['model'], got['model'])  # the same run as under torchrun


EXIT_JOB = os.path.join(REPO, 'tests', 'ddp_exit_job.py')
EXIT_WORKERS = 8


def test_a_finished_torchrun_job_exits_0_every_time(tmp_path):
    """Interpreter shutdown used to race gloo's threads, which DDP keeps alive (SIGABRT now and
    then); the tools end such a process with os._exit.  The job makes the race likely (about half
    of such launches aborted), and its atexit line shows whether a worker went through interpreter
    shutdown at all: without os._exit every worker prints it, so the check fails every time."""
    log_dir = tmp_path / 'logs'
    cmd = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={EXIT_WORKERS}']
    cmd += [f'--master_port={free_port()}', '--log-dir', str(log_dir), '--redirects', '3', EXIT_JOB]
    proc = subprocess.run(cmd, env=tool_env(), capture_output=True, text=True, timeout=TIMEOUT)
    logs = rank_logs(str(log_dir))
    aborted = [rank for rank, (_, err) in logs.items() if 'terminate called' in err]
    assert proc.returncode == 0 and not aborted, (aborted, proc.stderr[-2000:])
    assert sorted(logs) == list(range(EXIT_WORKERS))
    assert all('done' in out for out, _ in logs.values())
    assert not [rank for rank, (out, _) in logs.items() if 'interpreter shutdown' in out]


WORKERS_AND_THEIR_SIGNALS = """
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
from scepter_like.data.worker_start import start_worker

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        if i >= 8:
            time.sleep(60)  # busy when its loader shuts it down
        return torch.tensor(float(i))

def loader(context):
    return iter(DataLoader(Slow(), batch_size=4, num_workers=1, worker_init_fn=start_worker,
                           multiprocessing_context=context))

if __name__ == '__main__':
    shut, kept = loader(sys.argv[1]), loader(sys.argv[1])
    next(shut), next(kept)
    workers = shut._workers + kept._workers
    if os.fork() == 0:  # a SIGTERM from a process other than the workers' parent, as slurmstepd's
        for worker in workers:
            for signum in (15, 10, 2):  # SIGTERM, SIGUSR1, SIGINT
                os.kill(worker.pid, signum)
        os._exit(0)
    os.wait()
    time.sleep(0.5)
    print('outlived', sum(w.is_alive() for w in workers))
    del shut  # torch joins a busy worker for 5 s, then SIGTERMs it
    print('after shutdown', workers[0].is_alive(), workers[1].is_alive())
"""  # and exits with ``kept`` alive: multiprocessing ends its worker with SIGTERM


@pytest.mark.parametrize('context', ['fork', 'forkserver'])  # forkserver: the workers' OS parent is not the loader's
def test_loader_workers_outlive_a_strangers_stop_signal_and_end_at_their_parents(tmp_path, context):
    """A worker lets pass a stop signal that is not its parent's SIGTERM, and exits on that: torch's shutdown of it and
    multiprocessing's at the parent's exit (ignoring SIGTERM outright had hung the exit)."""
    script = tmp_path / 'workers.py'
    script.write_text(WORKERS_AND_THEIR_SIGNALS)
    res = subprocess.run(
        [sys.executable, str(script), context], env=tool_env(), capture_output=True, text=True, timeout=90
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == ['outlived 2', 'after shutdown False True'], res.stdout
