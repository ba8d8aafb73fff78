"""Where this process sits in the job, from torchrun's variables or, without them, SLURM's.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT.  ``srun python
tools/run_train.py ...`` starts one process per task with SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID; the rendezvous host is MASTER_ADDR when set, else the first host of
SLURM_NODELIST (or SLURM_JOB_NODELIST), which runs task 0, as Lightning's SLURMEnvironment
picks it (not SLURM_LAUNCH_NODE_IPADDR: under salloc that is the login node, which runs no
task); the port is MASTER_PORT when set, else one derived from SLURM_JOB_ID, so every task of
a job (and of its requeued run) picks the same one.
torchrun's variables win when both are present.  ``STOP_SIGNALS`` are the signals a launcher
sends to end a job (SLURM before its time limit, torchrun, Ctrl-C).
"""

import os
import re
import signal
import socket
from dataclasses import dataclass

from scepter_like.errors import DistributedError

DEFAULT_PORT = 29500
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)  # the training loop stops at a step boundary on them


@dataclass(frozen=True)
class LaunchEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = ''
    master_port: str = ''
    launcher: str = 'none'  # 'torchrun' | 'slurm' | 'none'

    def waiting_line(self, timeout_s):
        """What this process waits for as it joins the others: the join says nothing until ENV.DIST_TIMEOUT, and a
        node that failed at start (a missing IMPORTS file) would leave the rest waiting that long in silence."""
        who, others, starter = (
            (f'SLURM task {self.rank}', 'tasks', 'srun starts one per task')
            if self.launcher == 'slurm'
            else (f'rank {self.rank}', 'processes', "each node's torchrun starts its own")
        )
        return (
            f'{who} of {self.world_size}: waiting up to {timeout_s} s (ENV.DIST_TIMEOUT) for the other {others} at'
            f' {self.master_addr}:{self.master_port} ({starter})'
        )


def _int(env, name, default):
    value = env.get(name)
    if value is None or value == '':
        return default
    try:
        return int(value)
    except ValueError:
        raise DistributedError(f'environment variable {name}={value!r} is not an integer') from None


def first_host(nodelist):
    """The first host of a SLURM node list: ``node[03-05,7],gpu1`` -> ``node03``."""
    match = re.match(r'([^,\[]+)(?:\[([^\]]+)\])?', nodelist.strip())
    if not match:
        raise DistributedError(f'cannot read a host from SLURM node list {nodelist!r}; set MASTER_ADDR')
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    return prefix + ranges.split(',')[0].split('-')[0]


def read_launch_env(env=None):
    env = os.environ if env is None else env
    if env.get('RANK') not in (None, '') or env.get('WORLD_SIZE') not in (None, ''):
        return _rank_checked(
            LaunchEnv(
                _int(env, 'RANK', 0),
                _int(env, 'WORLD_SIZE', 1),
                _int(env, 'LOCAL_RANK', 0),
                env.get('MASTER_ADDR', ''),
                env.get('MASTER_PORT', ''),
                'torchrun',
            ),
            'RANK',
            'WORLD_SIZE',
        )
    if env.get('SLURM_PROCID') in (None, '') or _int(env, 'SLURM_NTASKS', 1) < 2:
        return LaunchEnv()
    addr = env.get('MASTER_ADDR')
    if not addr:
        nodelist = env.get('SLURM_NODELIST') or env.get('SLURM_JOB_NODELIST')
        if not nodelist:
            raise DistributedError('SLURM gives no SLURM_NODELIST; set MASTER_ADDR to the host of task 0')
        addr = first_host(nodelist)
    port = env.get('MASTER_PORT') or str(DEFAULT_PORT + 1 + _int(env, 'SLURM_JOB_ID', 0) % 20000)
    launch = LaunchEnv(
        _int(env, 'SLURM_PROCID', 0), _int(env, 'SLURM_NTASKS', 1), _int(env, 'SLURM_LOCALID', 0), addr, port, 'slurm'
    )
    return _rank_checked(launch, 'SLURM_PROCID', 'SLURM_NTASKS')


def _rank_checked(launch, rank_name, size_name):
    """``launch``, or a DistributedError when its rank is not one of the world's (the rendezvous would wait out
    its whole timeout for a rank that never comes)."""
    if not 0 <= launch.rank < launch.world_size:
        raise DistributedError(
            f'{rank_name} {launch.rank} is not below {size_name} {launch.world_size}; the launch gives each'
            f' process a rank from 0 to {size_name} - 1'
        )
    return launch


def launcher_jobs(env=None):
    """``{launcher: (this job's id under it, the times it has started the job again)}`` for the launchers that
    restart a job with the same command: SLURM's requeue (the job id stays) and torchrun's elastic agent (the
    rendezvous id; with the static rendezvous, whose id is ``none``, the agent's host and pid, which stay)."""
    env = os.environ if env is None else env
    found = {}
    if env.get('SLURM_JOB_ID'):
        found['slurm'] = (env['SLURM_JOB_ID'], _int(env, 'SLURM_RESTART_COUNT', 0))
    if env.get('TORCHELASTIC_RESTART_COUNT') not in (None, ''):
        run_id = env.get('TORCHELASTIC_RUN_ID') or 'none'
        job = run_id if run_id != 'none' else f'{socket.gethostname()}:{os.getppid()}'
        found['torchrun'] = (job, _int(env, 'TORCHELASTIC_RESTART_COUNT', 0))
    return found


def process_rank():
    """This process's rank before the process group exists (for the logger's rank prefix)."""
    return read_launch_env().rank
