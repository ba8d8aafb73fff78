"""``run_search.py``: space checks, a 2-worker study, kill and continue, pruning, the best config rerun."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import DIGITS_CFG, TOOLS, run_cli, run_tool, tool_env

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.search.space import SearchSpace, check_path

optuna = pytest.importorskip('optuna')

SHORT = ['SOLVER.MAX_EPOCHS=2', 'SOLVER.EVAL_INTERVAL=1', 'SOLVER.LR_SCHEDULER.T_MAX=2', 'SOLVER.CODE_SNAPSHOT=false']
SPACE = {
    'METRIC': 'accuracy',
    'DIRECTION': 'maximize',
    'SEED': 3,
    'SOLVER.OPTIMIZER.LEARNING_RATE': {'type': 'float', 'low': 1.0e-4, 'high': 1.0e-2, 'log': True},
    'SOLVER.MODEL.BACKBONE.HIDDEN_DIMS': {'type': 'categorical', 'choices': [[32, 32], [128, 128]]},
}


def write_space(path, **changes):
    import yaml

    path.write_text(yaml.safe_dump({**SPACE, **changes}))
    return path


def search_cmd(base, space, *extra):
    return [
        os.path.join(TOOLS, 'run_search.py'),
        '--cfg',
        DIGITS_CFG,
        '--space',
        space,
        f'SOLVER.WORK_DIR={base}',
        *SHORT,
        *extra,
    ]


def load_study(base, name='space'):
    return optuna.load_study(study_name=name, storage=f'sqlite:///{base}/search.db')


def counted(study):
    return [t for t in study.get_trials() if t.state.name in ('COMPLETE', 'PRUNED')]


def eval_lines(work_dir, kind='eval'):
    with open(os.path.join(work_dir, 'metrics.jsonl')) as f:
        return [r for r in map(json.loads, f) if r['kind'] == kind]


# -- the space file ------------------------------------------------------------------------------
def test_space_settings_params_and_errors():
    cfg = Config(cfg_file=DIGITS_CFG)
    space = SearchSpace(
        dict(SPACE, SAMPLER='grid', **{'SOLVER.MAX_EPOCHS': {'type': 'int', 'low': 1, 'high': 5, 'step': 2}})
    )
    assert space.settings['METRIC'] == 'accuracy' and space.settings['FROM'] == 'last'
    assert [p.path for p in space.params][-1] == 'SOLVER.MAX_EPOCHS'
    assert space.params[-1].grid_values() == [1, 3, 5]
    assert space.params[1].encoded == ['[32, 32]', '[128, 128]']  # list choices travel as YAML text
    assert space.decode(
        {
            'SOLVER.OPTIMIZER.LEARNING_RATE': 0.5,
            'SOLVER.MODEL.BACKBONE.HIDDEN_DIMS': '[128, 128]',
            'SOLVER.MAX_EPOCHS': 3,
        }
    )['SOLVER.MODEL.BACKBONE.HIDDEN_DIMS'] == [128, 128]
    assert space.override_words({'A.B': 1e-05}) == ['A.B=1.0e-05']  # reads back as a float, not a string
    with pytest.raises(ConfigError, match='needs a finite set'):
        space.params[0].grid_values()
    # paths: in the file, declared by the component there (BETAS of AdamW, MAX_STEPS of the solver), ENV
    for path in (
        'SOLVER.OPTIMIZER.LEARNING_RATE',
        'SOLVER.OPTIMIZER.BETAS',
        'SOLVER.MAX_STEPS',
        'ENV.SEED',
        'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL',
        'SOLVER.TRAIN_DATA.BATCH_SIZE',
    ):
        check_path(cfg, path, path)
    bad = {
        'SOLVER.OPTIMIZER.LEARNING_RTE': 'unknown key SOLVER.OPTIMIZER.LEARNING_RTE; did you mean LEARNING_RATE?',
        'SOLVER.TRAIN_HOOKS.9.LOG_INTERVAL': 'is not an index of a list of 5',
        'SOLVER.MAX_EPOCHS.X': 'SOLVER.MAX_EPOCHS is a value, not a mapping',
    }
    for path, message in bad.items():
        with pytest.raises(ConfigError, match=message.replace('?', r'\?')):
            check_path(cfg, path, path)
    mistakes = {
        'METRC': ({'METRC': 'accuracy'}, 'unknown setting METRC; did you mean METRIC'),
        'sampler': ({'SAMPLER': 'cmaes'}, "SAMPLER: 'cmaes' is not one of tpe, random, grid"),
        'type': (
            {'A.B': {'type': 'flaot', 'low': 0, 'high': 1}},
            "'flaot' is not one of float, int, categorical; did you mean float",
        ),
        'order': ({'A.B': {'type': 'float', 'low': 1, 'high': 0.5}}, 'low 1.0 must be below high 0.5'),
        'log': ({'A.B': {'type': 'float', 'low': 0, 'high': 1, 'log': True}}, 'log: true needs low > 0'),
        'option': (
            {'A.B': {'type': 'int', 'low': 0, 'high': 3, 'lgo': True}},
            "unknown option 'lgo' for type int; did you mean low or log",
        ),
        'choices': ({'A.B': {'type': 'categorical', 'choices': []}}, 'non-empty list'),
    }
    for data, message in mistakes.values():
        with pytest.raises(ConfigError, match=message):
            SearchSpace(
                {**data, **({} if any('.' in k for k in data) else {'A.B': SPACE['SOLVER.OPTIMIZER.LEARNING_RATE']})}
            )


def test_cli_errors_are_one_line(tmp_path):
    space = write_space(
        tmp_path / 'space.yaml', **{'SOLVER.OPTIMIZER.WEIGHT_DECAYY': {'type': 'float', 'low': 0, 'high': 1}}
    )
    res = run_cli('run_search.py', *search_cmd(tmp_path / 'w', space)[1:], '--trials', '2')
    assert res.returncode == 2, res.stderr[-2000:]
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(
        'error: space.yaml: SOLVER.OPTIMIZER.WEIGHT_DECAYY: unknown key SOLVER.OPTIMIZER.WEIGHT_DECAYY;'
        ' did you mean WEIGHT_DECAY? (keys there: '
    )
    assert not (tmp_path / 'w').exists()
    fake = tmp_path / 'no_optuna' / 'optuna'  # an optuna that cannot be imported
    fake.mkdir(parents=True)
    (fake / '__init__.py').write_text("raise ImportError('No module named optuna')\n")
    env = tool_env(PYTHONPATH=f'{fake.parent}{os.pathsep}{tool_env()["PYTHONPATH"]}')
    res = run_tool('run_search.py', *search_cmd(tmp_path / 'w', space)[1:], env=env)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: hyperparameter search needs optuna >= 5; install it with pip install 'scepter_like[search]'"
    ]


# -- a study of six trials on two workers ---------------------------------------------------------
@pytest.fixture(scope='module')
def two_worker_search(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('search')
    base, space = tmp / 'w', write_space(tmp / 'space.yaml')
    res = run_tool('run_search.py', *search_cmd(base, space)[1:], '--trials', '6', '--workers', '2')
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return base, res


def test_two_workers_share_one_study_of_six_trials(two_worker_search):
    base, res = two_worker_search
    study = load_study(base)
    trials = study.get_trials()
    assert len(trials) == 6 and len(counted(study)) == 6
    assert sorted(t.number for t in trials) == list(range(6))
    assert len({t.user_attrs['worker'] for t in trials}) == 2  # both workers ran trials
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 6  # six distinct points
    for t in trials:  # each an ordinary run in its own folder
        work_dir = t.user_attrs['work_dir']
        assert work_dir == str(base / 'space' / f'trial_{t.number:04d}')
        assert os.path.isfile(os.path.join(work_dir, 'config.yaml')) and eval_lines(work_dir)
    with open(base / 'space' / 'search_summary.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and rows[0]['trial'] == str(study.best_trial.number)
    assert float(rows[0]['accuracy']) == pytest.approx(study.best_value)
    for name in ('search_summary.md', 'optimization_history.png', 'param_importances.png', 'best_config.yaml'):
        assert (base / 'space' / name).stat().st_size > 0


def test_best_config_reproduces_the_best_trial(two_worker_search):
    base, _ = two_worker_search
    best = load_study(base).best_trial
    res = run_cli('run_train.py', '--cfg', base / 'space' / 'best_config.yaml')
    assert res.returncode == 0, res.stderr[-3000:]
    rerun = eval_lines(base / 'space' / 'best_run')[-1]['values']['accuracy']
    assert rerun == best.value == eval_lines(best.user_attrs['work_dir'])[-1]['values']['accuracy']


# -- a study continues only from the config its trials trained from -----------------------------------
@pytest.mark.slow
def test_a_study_refuses_another_config_and_its_best_config_is_the_best_trials_own(tmp_path):
    cfg, base = tmp_path / 'cfg.yaml', tmp_path / 'w'
    cfg.write_text(f'_BASE_: {DIGITS_CFG}\nSOLVER:\n  MAX_EPOCHS: 1\n')
    space = write_space(tmp_path / 'space.yaml', PRUNER='none')
    args = ['--cfg', cfg, '--space', space, f'SOLVER.WORK_DIR={base}', *SHORT[1:]]
    res = run_cli('run_search.py', *args, '--trials', '1')
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (trial,) = load_study(base).get_trials()
    own = Config(cfg_file=os.path.join(trial.user_attrs['work_dir'], 'config.yaml')).to_dict()
    best = Config(cfg_file=str(base / 'space' / 'best_config.yaml')).to_dict()
    assert best['SOLVER'].pop('WORK_DIR') == str(base / 'space' / 'best_run')
    own['SOLVER'].pop('WORK_DIR')
    assert best == own  # the trial's config.yaml, every default as it ran
    cfg.write_text(f'_BASE_: {DIGITS_CFG}\nSOLVER:\n  MAX_EPOCHS: 2\n')  # the file edited: trials would train 2 epochs
    res = run_cli('run_search.py', *args, '--trials', '2')
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("error: study 'space' in sqlite:///") and 'was started from another config' in line
    assert line.endswith('start a new study with --study NAME')
    assert len(load_study(base).get_trials()) == 1


@pytest.mark.slow
def test_a_metric_or_direction_the_runs_contradict_ends_the_search_at_its_first_trial(tmp_path):
    for name, changes, message in (
        ('dir', {'DIRECTION': 'minimize'}, 'DIRECTION: minimize, but its metric says more accuracy is better'),
        ('metric', {'METRIC': 'acc'}, "METRIC: no eval metric is called 'acc'"),
    ):
        space, base = write_space(tmp_path / f'{name}.yaml', **changes), tmp_path / name
        res = run_cli('run_search.py', *search_cmd(base, space)[1:], '--trials', '3', '--workers', '1')
        assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f'error: {name}.yaml: {message}') and line.endswith('--study NAME'), line
        (trial,) = load_study(base, name).get_trials()  # the first trial met it; no other ran
        assert trial.state.name == 'FAIL' and message in trial.user_attrs['error']


# -- killed mid-trial, the same command completes the study ---------------------------------------
def test_killed_search_continues_with_the_same_command(tmp_path):
    base, space = tmp_path / 'w', write_space(tmp_path / 'space.yaml', PRUNER='none')
    cmd = [sys.executable, *search_cmd(base, space), '--trials', '2', '--heartbeat', '1']
    proc = subprocess.Popen(cmd, env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = base / 'space' / 'trial_0001' / 'metrics.jsonl'
    deadline = time.time() + 240
    while not second.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # in the middle of trial 1
    proc.wait()
    study = load_study(base)
    assert [t.state.name for t in study.get_trials()] == ['COMPLETE', 'RUNNING']
    res = subprocess.run(cmd, env=tool_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    trials = load_study(base).get_trials()
    assert len([t for t in trials if t.state.name == 'COMPLETE']) == 2
    killed = trials[1]
    assert killed.state.name == 'FAIL' and 'error' not in killed.user_attrs
    retry = [t for t in trials if t.system_attrs.get('failed_trial') == 1]
    assert len(retry) == 1 and retry[0].params == killed.params and retry[0].state.name == 'COMPLETE'
    assert trials[0].datetime_complete < killed.datetime_start  # trial 0 was kept, not run again


SIGNAL_ONCE = """
import os, signal
from scepter_like.solver.base_solver import BaseSolver

def signal_once(real):
    def method(self, *args, **kwargs):
        if not os.path.exists(os.environ['SIGNALLED']):  # the first trial only: its rerun goes on
            open(os.environ['SIGNALLED'], 'w').close()
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, *args, **kwargs)
    return method

name = os.environ['SIGNAL_IN']
setattr(BaseSolver, name, signal_once(getattr(BaseSolver, name)))
"""


def signalled_search(tmp_path, where):
    """Run a 3-trial search whose first trial sends itself SIGTERM as ``BaseSolver.<where>`` starts, to the end
    of the command, which ends as a signalled search does (128 + 15); returns the command, its environment, the
    study's folder and the result."""
    base, space = tmp_path / 'w', write_space(tmp_path / 'space.yaml', PRUNER='none', SAMPLER='random')
    signaller = tmp_path / 'signal_once.py'
    signaller.write_text(SIGNAL_ONCE)
    cmd = [sys.executable, *search_cmd(base, space), '--trials', '3', '--import', str(signaller)]
    env = tool_env(SIGNAL_IN=where, SIGNALLED=tmp_path / 'signalled')
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 128 + signal.SIGTERM, res.stdout[-3000:] + res.stderr[-3000:]
    return cmd, env, base, res


def stop_a_search_by_signal(tmp_path, where):
    """``signalled_search`` of a signal in the trial's training or set-up: the trial is failed and queued again;
    returns the command, its environment and the study's folder."""
    cmd, env, base, res = signalled_search(tmp_path, where)
    assert '[search] trial 0 stopped by a signal: the search stops here' in res.stdout
    stopped, queued = load_study(base).get_trials()
    assert stopped.state.name == 'FAIL' and 'error' not in stopped.user_attrs
    assert queued.state.name == 'WAITING' and queued.system_attrs.get('failed_trial') == 0
    return cmd, env, base


SIGNAL_THE_MAIN_PROCESS = """
import os, signal, sys, time
from scepter_like.solver.base_solver import BaseSolver

real = BaseSolver._run_epochs

def run_epochs(self, *args, **kwargs):  # in the second worker's process only, its first trial
    if '--worker-index' in sys.argv and not os.path.exists(os.environ['SIGNALLED']):
        with open(os.environ['SIGNALLED'], 'w') as f:
            f.write(self.work_dir)  # which trial it was
        os.kill(os.getppid(), signal.SIGTERM)  # the search's main process alone (kill PID)
        deadline = time.monotonic() + 30
        while not self.stop_signals.received and time.monotonic() < deadline:
            time.sleep(0.01)  # until the main process has passed the signal on
    return real(self, *args, **kwargs)

BaseSolver._run_epochs = run_epochs
"""


@pytest.mark.slow  # a search process to signal, and its worker
def test_a_stop_signal_to_the_main_process_of_two_workers_stops_both_trials(tmp_path):
    """kill PID of a --workers 2 search: the main process stops its trial (or its wait for one) and passes the
    signal on, so the other worker stops its trial at a step boundary too; it is failed and queued again, and the
    command ends with 128 + 15 instead of waiting for the other worker's trials."""
    base, space = tmp_path / 'w', write_space(tmp_path / 'space.yaml', PRUNER='none', SAMPLER='random')
    signaller = tmp_path / 'signal_main.py'
    signaller.write_text(SIGNAL_THE_MAIN_PROCESS)
    cmd = [sys.executable, *search_cmd(base, space), '--trials', '4', '--workers', '2', '--import', str(signaller)]
    res = subprocess.run(cmd, env=tool_env(SIGNALLED=tmp_path / 'signalled'), capture_output=True, text=True)
    assert res.returncode == 128 + signal.SIGTERM, res.stdout[-3000:] + res.stderr[-3000:]
    trials = load_study(base).get_trials()
    signalled = (tmp_path / 'signalled').read_text()
    (other,) = [t for t in trials if t.user_attrs.get('work_dir') == signalled and t.state.name != 'WAITING']
    assert other.state.name == 'FAIL' and 'error' not in other.user_attrs  # stopped, not failed by a mistake
    assert f'[search] trial {other.number} stopped by a signal: the search stops here' in res.stdout
    # every trial stopped so (the main process's, when it was in one) is queued again; none is left RUNNING
    stopped = {t.number for t in trials if t.state.name == 'FAIL'}
    assert {t.system_attrs.get('failed_trial') for t in trials if t.state.name == 'WAITING'} == stopped
    assert {t.state.name for t in trials} <= {'COMPLETE', 'FAIL', 'WAITING'} and len(counted(load_study(base))) < 4


def test_a_stop_signal_in_a_trials_set_up_ends_the_search_with_the_trial_queued_again(tmp_path):
    """solve() before the training loop (metrics.jsonl written, evaluation not begun): the trial's solver holds the
    handlers from its set-up on, as run_train's does, so the command ends with 128 + 15 rather than dying of it."""
    stop_a_search_by_signal(tmp_path, 'before_solve')


def test_a_stop_signal_ends_the_search_and_the_same_command_continues_it_with_new_points(tmp_path):
    """SIGTERM in a trial's training ends the command (128 + 15) with the trial failed and queued again, not
    counted; the same command then runs it again and draws points it had not drawn (a sampler seeded as before
    would draw trial 0's first)."""
    cmd, env, base = stop_a_search_by_signal(tmp_path, '_run_epochs')
    stopped = load_study(base).get_trials()[0]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    trials = load_study(base).get_trials()
    assert [t.state.name for t in trials] == ['FAIL', 'COMPLETE', 'COMPLETE', 'COMPLETE']
    assert trials[1].params == stopped.params  # the stopped trial, run again
    drawn = [tuple(sorted(t.params.items(), key=str)) for t in trials[1:]]
    assert len(set(drawn)) == 3  # the continuation drew new points


@pytest.mark.parametrize('where', ['solve_final_test', 'close'])
def test_a_stop_signal_after_a_trials_training_keeps_the_trial_and_ends_the_search(tmp_path, where):
    """SIGTERM while a trial runs its final test or closes (its training done): the trial ends as it would have and
    is kept; the search then ends with 128 + 15 rather than going on to the next trial."""
    _, _, base, res = signalled_search(tmp_path, where)
    (trial,) = load_study(base).get_trials()
    assert trial.state.name == 'COMPLETE' and counted(load_study(base)) == [trial]
    assert '[search] a stop signal came after its trial trained: that trial is recorded' in res.stdout
    with open(base / 'space' / 'search_summary.csv', newline='') as f:
        (row,) = csv.DictReader(f)  # the kept trial is in the summary
    assert (row['trial'], row['state']) == ('0', 'complete')


def test_a_stop_signal_outside_a_trial_ends_the_search_as_one_in_a_trial_does():
    """Between trials (optuna's bookkeeping, waiting for another worker's trial) no solver holds the handlers: the
    search's own handlers turn the signal into the Preempted the tools exit with 128 + signal on."""
    from scepter_like.errors import Preempted
    from scepter_like.search.runner import _signals_stop_the_search

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted) as stopped, _signals_stop_the_search():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in this thread before the sleep ends
    assert stopped.value.exit_status == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


# -- pruning ---------------------------------------------------------------------------------------
def test_a_pruned_trial_stops_before_its_last_epoch(tmp_path):
    # grid seed 1 runs the good rate first; after it completes, the median pruner stops the bad one
    lr = {'type': 'categorical', 'choices': [0.003, 1.0e-6]}
    width = {'type': 'categorical', 'choices': [[64, 64]]}
    space = write_space(
        tmp_path / 'space.yaml',
        SAMPLER='grid',
        SEED=1,
        PRUNE_STARTUP_TRIALS=1,
        **{'SOLVER.OPTIMIZER.LEARNING_RATE': lr, 'SOLVER.MODEL.BACKBONE.HIDDEN_DIMS': width},
    )
    base = tmp_path / 'w'
    res = run_cli('run_search.py', *search_cmd(base, space)[1:], 'SOLVER.MAX_EPOCHS=3', 'SOLVER.LR_SCHEDULER.T_MAX=3')
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'the grid has 2 point(s): running 2 trial(s), not 20' in res.stdout
    # a trial's warnings reach the console (its log file has them too): 1e-6 is below the config's warmup start
    warned = [line for line in res.stdout.splitlines() if 'WARMUP_START_LR' in line]
    assert warned == [
        '[search] trial 1 warning: SOLVER.TRAIN_HOOKS[2].WARMUP_START_LR: the warmup starts at 0.0002, above the'
        " optimizer's learning rate 1e-06 it warms up to, so it warms down: training starts at 200x the rate asked"
        ' for; set WARMUP_START_LR below the learning rate (e.g. 1e-07, a tenth of it) or WARMUP_EPOCHS: 0'
    ]
    good, bad = load_study(base).get_trials()
    assert good.state.name == 'COMPLETE' and max(good.intermediate_values) == 3
    assert bad.state.name == 'PRUNED' and bad.params['SOLVER.OPTIMIZER.LEARNING_RATE'] == 1.0e-6
    epochs = max(bad.intermediate_values)
    assert epochs < 3 and len(eval_lines(bad.user_attrs['work_dir'])) == epochs  # it stopped after that evaluation
    assert not eval_lines(bad.user_attrs['work_dir'], 'test')
    (pruned,) = eval_lines(bad.user_attrs['work_dir'], 'pruned')  # its run says it was pruned, not that it failed
    assert pruned['reason'].startswith(f'pruned after epoch {epochs}: accuracy ')
    assert not eval_lines(bad.user_attrs['work_dir'], 'failed')
    last = (open(os.path.join(bad.user_attrs['work_dir'], 'std_log.txt')).read().strip().splitlines())[-1]
    assert (
        'INFO' in last and f'the run ends here, pruned by the search (not failed): pruned after epoch {epochs}' in last
    )
    assert f'pruned after epoch {epochs}' in (base / 'space' / 'search_summary.md').read_text()
