"""ENV.USE_PL (docs/lightning.md): the configured solver on Lightning's Trainer, run as users run it
(``tools/run_train.py``, here through ``run_cli``; torchrun and Lightning's own launcher in processes).

The same steps, hooks, metrics, logs and checkpoints as the native loop, bit for bit; checkpoints move
between the two loops; a stop signal stops as in the native loop; bad input is one line.  The
Gaussian-blobs job is test_checkpoint_resume's (Dropout, per-step cosine schedule, step / epoch /
best / last checkpoints, a hook with state), so the RNG streams and every piece of state must match.
"""

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import torch
from ckpt_support import SIGNAL_ENV
from conftest import DIGITS_CFG, REPO, free_port, run_cli, run_tool, tool_env
from helpers import assert_same
from test_checkpoint_resume import SUPPORT, TOTAL, final_state, job_config, served
from test_distributed import RUN_TRAIN, TIMEOUT

from scepter_like.utils.checkpoint import latest_checkpoint

PL = 'ENV.USE_PL=true'
PROBE = os.path.join(REPO, 'tests', 'dist_probe.py')


def train(cfg, work, *overrides, record=None):
    args = ['--cfg', cfg, '--import', SUPPORT, f'SOLVER.WORK_DIR={work}']
    args += [f'SOLVER.TRAIN_DATA.RECORD={record or str(work) + ".rec"}', *overrides]
    return run_cli('run_train.py', *args)


def hook_order(stdout):
    return stdout[stdout.index('hook order per stage:') :].split('\n2', 1)[0]


def metrics_lines(work):
    """metrics.jsonl without its timings: what a run logged at each step and evaluation."""
    lines = []
    with open(os.path.join(work, 'metrics.jsonl')) as f:
        for line in f:
            record = json.loads(line)
            lines.append({k: v for k, v in record.items() if 'time' not in k and k not in ('wall', 'host')})
    return lines


@pytest.fixture(scope='module')
def blobs(tmp_path_factory):
    """The blobs job run by the native loop and under Lightning, each uninterrupted."""
    tmp = tmp_path_factory.mktemp('pl_blobs')
    cfg = job_config(tmp, 0)
    runs = {}
    for name, overrides in (('native', []), ('lightning', [PL])):
        res = train(cfg, tmp / name, *overrides)
        assert res.returncode == 0, res.stderr[-3000:]
        runs[name] = res
    return tmp, cfg, runs


@pytest.mark.slow
def test_lightning_ends_bit_for_bit_where_the_native_loop_ends(blobs):
    tmp, _, runs = blobs
    assert_same(final_state(tmp / 'native'), final_state(tmp / 'lightning'))  # model, optimizer, hooks, RNG
    assert sorted(os.listdir(tmp / 'native' / 'checkpoints')) == sorted(os.listdir(tmp / 'lightning' / 'checkpoints'))
    assert metrics_lines(tmp / 'native') == metrics_lines(tmp / 'lightning')  # every logged step and evaluation
    assert hook_order(runs['native'].stdout) == hook_order(runs['lightning'].stdout)
    assert "loop: Lightning's Trainer" in runs['lightning'].stdout and 'loop:' not in runs['native'].stdout
    assert served(tmp / 'native.rec') == served(tmp / 'lightning.rec')  # the same batches, in the same order


@pytest.mark.slow
@pytest.mark.parametrize(
    'update',
    [
        ['SOLVER.TRAIN_HOOKS.0.ACCUMULATE_STEP=4', 'SOLVER.TRAIN_HOOKS.0.GRADIENT_CLIP=0.5'],  # a short last group
        ['SOLVER.TRAIN_HOOKS.0.USE_AMP=true', 'SOLVER.TRAIN_HOOKS.0.AMP_DTYPE=bf16'],
    ],
    ids=['accumulate-clip', 'bf16-autocast'],
)
def test_accumulation_clipping_and_amp_come_from_backward_hooks_keys_and_match(blobs, tmp_path, update):
    _, cfg, _ = blobs
    for name, extra in (('native', []), ('lightning', [PL])):
        res = train(cfg, tmp_path / name, *update, 'SOLVER.TRAIN_HOOKS+={NAME: GradNormHook}', *extra)
        assert res.returncode == 0, res.stderr[-3000:]
    assert_same(final_state(tmp_path / 'native'), final_state(tmp_path / 'lightning'))
    assert metrics_lines(tmp_path / 'native') == metrics_lines(tmp_path / 'lightning')  # grad_norm from after_backward


@pytest.mark.slow
@pytest.mark.parametrize('stop, resume', [('lightning', 'native'), ('native', 'lightning'), ('lightning', 'lightning')])
def test_a_sigterm_stops_at_the_step_boundary_and_resumes_bit_exact_in_either_loop(
    blobs, tmp_path, monkeypatch, stop, resume
):
    tmp, cfg, _ = blobs
    work = tmp_path / 'chain'
    monkeypatch.setenv(SIGNAL_ENV, 'SIGTERM:9')  # the process signals itself as step 10 begins
    res = train(cfg, work, *([PL] if stop == 'lightning' else []), record=tmp_path / 'a.rec')
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    assert 'stopped by SIGTERM after step 10' in res.stdout
    assert os.path.basename(latest_checkpoint(str(work / 'checkpoints'))) == 'preempted-step-10.pth'
    assert len(served(tmp_path / 'a.rec')) == 10  # no batch was loaded after the stop
    monkeypatch.delenv(SIGNAL_ENV)
    overrides = ['SOLVER.RESUME_FROM=auto', *([PL] if resume == 'lightning' else [])]
    res = train(cfg, work, *overrides, record=tmp_path / 'b.rec')
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(served(tmp_path / 'b.rec')) == TOTAL - 10  # resumed mid-epoch without loading the skipped batches
    assert_same(final_state(tmp / 'native'), final_state(work))


@pytest.mark.slow
def test_digits_three_epochs_give_the_native_lr_at_every_step_and_its_metrics(tmp_path):
    args = ['--cfg', DIGITS_CFG, 'SOLVER.MAX_EPOCHS=3', 'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=1']
    for name, extra in (('native', []), ('lightning', [PL])):
        res = run_cli('run_train.py', *args, f'SOLVER.WORK_DIR={tmp_path / name}', *extra)
        assert res.returncode == 0, res.stderr[-3000:]
    native, lightning = metrics_lines(tmp_path / 'native'), metrics_lines(tmp_path / 'lightning')
    lrs = [line['values']['lr'] for line in native if line['kind'] == 'train']
    assert len(lrs) == 3 * 41 and len(set(lrs)) == 3  # every step; warmup, then the cosine schedule by epoch
    assert native == lightning  # lr, loss at every step; eval and test metrics: equal, not close


@pytest.mark.slow
def test_the_digits_job_reaches_its_accuracy_and_checkpoints_as_the_native_loop(tmp_path):
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', PL)
    assert res.returncode == 0, res.stderr[-3000:]
    accuracy = float(re.search(r'test final \(360 samples\): accuracy: ([0-9.]+)', res.stdout).group(1))
    assert accuracy >= 0.97
    assert sorted(os.listdir(tmp_path / 'checkpoints')) == [
        'digits-best.pth',
        'digits-epoch-20.pth',
        'digits-epoch-30.pth',
        'latest',
    ]
    with open(tmp_path / 'std_log.txt') as f:
        log = f.read()
    assert 'update: AdamW' in log and 'epoch 30/30 iter 41/41' in log and 'test final' in log
    from scepter_like.solver.lightning.library import import_lightning

    version = import_lightning().__version__  # the run says which loop it is on, and the version
    assert f"loop: Lightning's Trainer (ENV.USE_PL; lightning {version})" in log
    assert json.loads((tmp_path / 'env.json').read_text())['lightning'] == version


@pytest.mark.slow
def test_the_documented_example_hook_and_solver_run_unchanged(tmp_path):
    from test_extending_doc import code_blocks

    python, config = code_blocks('python')[-1], code_blocks('yaml')[-1]  # "A complete example"
    (tmp_path / 'my_ext.py').write_text(python)
    (tmp_path / 'sine.yaml').write_text(config)
    summaries = []
    for name, extra in (('native', []), ('lightning', [PL])):
        res = run_cli('run_train.py', '--cfg', 'sine.yaml', f'SOLVER.WORK_DIR={name}', *extra, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        assert ' param_norm: ' in res.stdout  # ParamNormHook's scalar in LogHook's line
        summaries.append(re.search(r'summary: test mae ([0-9.]+)', res.stdout).group(1))  # SineSolver.solve_test
    assert summaries[0] == summaries[1]


LIGHTNING_REPORTS = ('FIT Profiler Report', 'Total params')  # SimpleProfiler's report, ModelSummary's table


def test_lightnings_profiler_report_and_model_summary_show_when_trainer_turns_them_on(tmp_path):
    """In a process of its own: Lightning writes them with a handler of its own, made when it is imported (the
    default run shows neither: test_lightnings_launcher_keeps_num_threads_and_lightning_stays_quiet)."""
    trainer = ['ENV.PL.TRAINER.profiler=simple', 'ENV.PL.TRAINER.enable_model_summary=true']
    res = run_tool(
        'run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', 'SOLVER.MAX_EPOCHS=1', PL, *trainer
    )
    assert res.returncode == 0, res.stderr[-3000:]
    output = res.stdout + res.stderr
    assert all(text in output for text in LIGHTNING_REPORTS) and 'GPU available' in output  # its INFO lines too


# -- bad input: one line, exit 2 ---------------------------------------------------------------
def one_line_error(res):
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and 'Traceback' not in res.stderr, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    'override, expected',
    [
        (
            'ENV.PL.TRAINER.enable_progres_bar=true',
            "error: ENV.PL.TRAINER.enable_progres_bar: Lightning's Trainer has no argument 'enable_progres_bar';"
            ' did you mean enable_progress_bar',
        ),
        (
            'ENV.PL.TRAINER.max_epochs=3',
            'error: ENV.PL.TRAINER.max_epochs: under ENV.USE_PL the solver sets this Trainer argument from'
            ' SOLVER.MAX_EPOCHS; set that instead',
        ),
        (
            'ENV.PL.STRATEGY=dpp',
            "error: ENV.PL.STRATEGY: Lightning has no strategy 'dpp'; did you mean ddp?",  # (once: was 'ddp or ddp')
        ),
        (
            'ENV.PL.NUM_NODES=2',
            'error: ENV.PL.NUM_NODES: 2 nodes, but nothing started the others (no torchrun, srun or NODE_RANK)',
        ),
        (
            'ENV.PL.STRATEGY=ddp_spawn',
            "error: ENV.PL.STRATEGY: 'ddp_spawn' is not supported under ENV.USE_PL: its processes would start",
        ),
        (
            'ENV.PL.STRATEGY=fsdp',
            "error: ENV.PL.STRATEGY: 'fsdp' is not supported under ENV.USE_PL: the solver's update steps",
        ),
        ('ENV.PL.ACCELERATOR=tpu', "error: ENV.PL: Lightning's Trainer rejects these settings: "),
        ('ENV.PL.PRECISION=bf16-mixed', "error: ENV.PL.PRECISION: 'bf16-mixed' disagrees with this run's '32-true'"),
        ('ENV.PL.PRECISION=16-true', "error: ENV.PL.PRECISION: '16-true' is not supported under ENV.USE_PL"),
    ],
)
def test_bad_lightning_settings_are_one_line(tmp_path, override, expected):
    res = run_cli(
        'run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', 'SOLVER.MAX_EPOCHS=1', PL, override
    )
    assert one_line_error(res).startswith(expected)


def test_use_pl_without_lightning_installed_names_the_extra(tmp_path, monkeypatch):
    for name in ('lightning', 'lightning.pytorch', 'pytorch_lightning'):
        monkeypatch.setitem(sys.modules, name, None)  # what `import` finds when the package is not installed
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', PL)
    assert one_line_error(res) == (
        "error: ENV.USE_PL: PyTorch Lightning is not installed; pip install 'scepter_like[lightning]'"
        ' (or set ENV.USE_PL false)'
    )


def test_a_solver_that_runs_its_own_loop_is_refused(tmp_path):
    (tmp_path / 'own_loop.py').write_text(
        'from scepter_like.solver import SOLVERS, TrainValSolver\n\n\n'
        '@SOLVERS.register_class()\nclass OwnLoopSolver(TrainValSolver):\n'
        '    def run_train(self):\n        super().run_train()\n'
    )
    res = run_cli(
        'run_train.py', '--cfg', DIGITS_CFG, '--import', str(tmp_path / 'own_loop.py'), 'SOLVER.NAME=OwnLoopSolver',
        f'SOLVER.WORK_DIR={tmp_path / "w"}', PL,
    )  # fmt: skip
    assert one_line_error(res).startswith(
        "error: SOLVER.NAME: OwnLoopSolver overrides run_train, which Lightning's loop replaces under ENV.USE_PL"
    )


# -- several processes: torchrun and Lightning's own launcher (gloo, CPU) ------------------------------------
def launch(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3 * TIMEOUT)


@pytest.fixture(scope='module')
def two_processes(tmp_path_factory):
    """The digits job (3 epochs, 2 micro-batches a step: no_sync) in 2 processes: the native loop and Lightning
    under torchrun, Lightning's own launcher (ENV.PL.DEVICES=2) and Lightning under SLURM's variables; rank > 0
    may write nothing into WORK_DIR (dist_probe's guard)."""
    tmp = tmp_path_factory.mktemp('pl_ddp')
    args = ['--cfg', DIGITS_CFG, '--import', PROBE, 'SOLVER.MAX_EPOCHS=3', 'SOLVER.TRAIN_HOOKS.0.ACCUMULATE_STEP=2']
    torchrun = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2']
    runs = {
        'native': [*torchrun, f'--master_port={free_port()}', RUN_TRAIN, *args],
        'torchrun': [*torchrun, f'--master_port={free_port()}', RUN_TRAIN, *args, PL],
        'launcher': [sys.executable, RUN_TRAIN, *args, PL, 'ENV.PL.DEVICES=2'],
    }
    results = {}
    for name, cmd in runs.items():
        work = tmp / name
        env = tool_env(PROBE_GUARD_DIR=work, MASTER_PORT=free_port())
        if name == 'launcher':  # as a shell starts it: Lightning's launcher sets threads where this is unset
            del env['OMP_NUM_THREADS']
        results[name] = launch([*cmd, f'SOLVER.WORK_DIR={work}'], tmp, env)
    results['slurm'] = srun_like([sys.executable, RUN_TRAIN, *args, PL], tmp, tmp / 'slurm')
    return tmp, results


def srun_like(cmd, cwd, work):
    """Two tasks as ``srun --ntasks=2`` starts them (SLURM's variables only, no torchrun), writing into ``work``."""
    port, procs = free_port(), []
    for rank in (0, 1):
        slurm = {'SLURM_PROCID': rank, 'SLURM_NTASKS': 2, 'SLURM_LOCALID': rank, 'SLURM_JOB_ID': 1}
        env = tool_env(**slurm, MASTER_ADDR='127.0.0.1', MASTER_PORT=port, PROBE_GUARD_DIR=work)
        task = [*cmd, f'SOLVER.WORK_DIR={work}']
        procs.append(
            subprocess.Popen(task, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=3 * TIMEOUT) for p in procs]
    status = max(p.returncode for p in procs)
    return subprocess.CompletedProcess(cmd, status, outs[0][0] + outs[1][0], outs[0][1] + outs[1][1])


def test_two_processes_under_torchrun_srun_and_lightnings_launcher_match_the_native_ddp_run(two_processes):
    tmp, results = two_processes
    for name, res in results.items():
        assert res.returncode == 0, f'{name}: {res.stderr[-3000:]}'
    reference = torch.load(tmp / 'native' / 'checkpoints' / 'digits-best.pth', weights_only=True)
    for name in ('torchrun', 'launcher', 'slurm'):
        got = torch.load(tmp / name / 'checkpoints' / 'digits-best.pth', weights_only=True)
        assert_same(reference['model'], got['model'], name)
        assert reference['solver'] == got['solver'], name  # counters, eval and test metrics
        assert metrics_lines(tmp / 'native') == metrics_lines(tmp / name), name
    assert 'device cpu (1 intra-op thread per process), world size 2' in results['launcher'].stdout  # NUM_THREADS
    assert results['launcher'].stdout.count('hook order per stage:') == 1  # rank 1's console shows warnings only


def test_lightnings_launcher_keeps_num_threads_and_lightning_stays_quiet(tmp_path):
    """ENV.PL.STRATEGY=ddp in one process: Lightning's launcher sets cpu_count // processes threads (and
    OMP_NUM_THREADS) where OMP_NUM_THREADS is unset; the run keeps ENV.NUM_THREADS (the digits config's 1).
    Lightning's INFO lines stay out of a run whose TRAINER turns no report on."""
    env = tool_env()
    del env['OMP_NUM_THREADS']
    args = ['--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path}', 'SOLVER.MAX_EPOCHS=1', PL, 'ENV.PL.STRATEGY=ddp']
    res = run_tool('run_train.py', *args, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'device cpu (1 intra-op thread per process), world size 1' in res.stdout
    output = res.stdout + res.stderr
    assert not any(text in output for text in (*LIGHTNING_REPORTS, 'GPU available'))
