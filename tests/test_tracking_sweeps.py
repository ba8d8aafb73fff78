"""Trackers over many runs: a search study and a multirun are one parent with a child per run,
and under torchrun only rank 0 tracks.

Each test runs the blob job with both MLflowLogHook (a SQLite store) and WandbLogHook
(offline), and reads back what MLflow's client and W&B's run files hold.
"""

import os
import subprocess
import sys

import pytest
import yaml
from ckpt_support import SIGNAL_ENV
from conftest import REPO, free_port, tool_env
from tracking_support import (
    blob_job,
    copy_store,
    empty_mlflow_store,
    jsonl_history,
    run_in_process,
    run_train,
    tracker_word,
    wandb_folders,
    wandb_run,
)

pytest.importorskip('mlflow', reason="tracking sweep tests need mlflow: pip install -e '.[mlflow]'")
pytest.importorskip('wandb', reason="tracking sweep tests need wandb: pip install -e '.[wandb]'")
optuna = pytest.importorskip('optuna', reason="the search test needs optuna: pip install -e '.[search]'")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.slow  # trainings, subprocesses, torchrun


@pytest.fixture(scope='module')
def store_template(tmp_path_factory):
    return empty_mlflow_store(tmp_path_factory.mktemp('mlflow_template'))


@pytest.fixture
def place(store_template, tmp_path, monkeypatch):
    """The test's folder as the working directory, its own store, W&B's home folders inside it."""
    monkeypatch.chdir(tmp_path)
    for name in ('WANDB_CONFIG_DIR', 'WANDB_CACHE_DIR', 'WANDB_DATA_DIR'):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    uri = copy_store(store_template, tmp_path)
    words = [
        tracker_word({'NAME': 'MLflowLogHook', 'TRACKING_URI': uri, 'EXPERIMENT': 'sweep'}),
        tracker_word({'NAME': 'WandbLogHook', 'PROJECT': 'sweep'}),
    ]
    return {'tmp': tmp_path, 'uri': uri, 'words': words, 'job': blob_job(tmp_path)}


def runs_of(uri):
    """(the parent runs, {parent id: [child runs]}) of the experiment 'sweep'."""
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name('sweep').experiment_id])
    parents = [r for r in runs if 'mlflow.parentRunId' not in r.data.tags]
    children = {}
    for r in runs:
        if 'mlflow.parentRunId' in r.data.tags:
            children.setdefault(r.data.tags['mlflow.parentRunId'], []).append(r)
    return client, parents, children


def test_a_two_trial_search_is_one_parent_with_two_children(place):
    tmp = place['tmp']
    space = tmp / 'space.yaml'
    space.write_text(
        yaml.safe_dump(
            {
                'METRIC': 'accuracy',
                'SAMPLER': 'random',
                'SOLVER.OPTIMIZER.LEARNING_RATE': {'type': 'float', 'low': 0.01, 'high': 0.5, 'log': True},
            }
        )
    )
    args = ['--cfg', place['job'], '--space', space, '--trials', 2, f'SOLVER.WORK_DIR={tmp / "search"}']
    assert run_in_process('run_search.py', [*args, 'SOLVER.MAX_EPOCHS=2', *place['words']]) == 0
    study = optuna.load_study(study_name='space', storage=f'sqlite:///{tmp / "search" / "search.db"}')
    trials = {f'trial_{t.number:04d}': t for t in study.get_trials()}
    assert len(trials) == 2 and all(t.state.name == 'COMPLETE' for t in trials.values())

    client, parents, children = runs_of(place['uri'])
    (parent,) = parents
    assert parent.info.run_name == 'space' and parent.info.status == 'FINISHED'
    assert parent.data.params['METRIC'] == 'accuracy' and parent.data.metrics['best_objective'] == study.best_value
    assert 'search_summary.md' in {a.path for a in client.list_artifacts(parent.info.run_id)}
    kids = children[parent.info.run_id]
    assert sorted(r.info.run_name for r in kids) == sorted(trials)
    for child in kids:
        trial = trials[child.info.run_name]
        lr = yaml.safe_load(child.data.params['SOLVER.OPTIMIZER.LEARNING_RATE'])
        assert lr == trial.params['SOLVER.OPTIMIZER.LEARNING_RATE'] and child.data.metrics['objective'] == trial.value

    best = yaml.safe_load((tmp / 'search' / 'space' / 'best_config.yaml').read_text())
    for hook in best['SOLVER']['TRAIN_HOOKS'][-2:]:  # its rerun is a run of its own, no child of the study
        assert hook['RUN_NAME'] == '' and hook.get('PARENT_RUN_ID', '') == '' and hook.get('GROUP', '') == ''

    for name, trial in trials.items():  # W&B: the study is the group of its trials' runs
        (folder,) = wandb_folders(tmp / 'search' / 'space' / name)
        wb = wandb_run(folder)
        assert (wb['group'], wb['name']) == ('space', name)
        assert wb['config']['SOLVER.OPTIMIZER.LEARNING_RATE'] == trial.params['SOLVER.OPTIMIZER.LEARNING_RATE']
        assert wb['summary']['objective'] == trial.value


def test_a_dead_trials_child_run_is_ended_killed_when_the_search_retries_it(place):
    """A worker killed mid-trial (SIGKILL) leaves its trial RUNNING in the study and its MLflow child RUNNING; the
    continued search fails the trial on its stale heartbeat, queues it again, and ends that child as KILLED."""
    import time

    tmp = place['tmp']
    space = tmp / 'space.yaml'
    space.write_text(
        yaml.safe_dump(
            {'METRIC': 'accuracy', 'SOLVER.OPTIMIZER.LEARNING_RATE': {'type': 'float', 'low': 0.01, 'high': 0.5}}
        )
    )
    args = ['--cfg', place['job'], '--space', space, '--heartbeat', 1, f'SOLVER.WORK_DIR={tmp / "search"}']
    assert run_in_process('run_search.py', [*args, '--trials', 1, place['words'][0]]) == 0
    storage = optuna.storages.RDBStorage(f'sqlite:///{tmp / "search" / "search.db"}', heartbeat_interval=1)
    dead = optuna.load_study(study_name='space', storage=storage).ask()  # a trial whose worker then died
    storage.record_heartbeat(dead._trial_id)
    client, (parent,), _ = runs_of(place['uri'])
    tags = {'mlflow.parentRunId': parent.info.run_id}
    child = client.create_run(parent.info.experiment_id, run_name=f'trial_{dead.number:04d}', tags=tags)
    time.sleep(2.5)  # its heartbeat goes stale (2 x --heartbeat)
    assert run_in_process('run_search.py', [*args, '--trials', 2, place['words'][0]]) == 0
    trials = optuna.load_study(study_name='space', storage=storage).get_trials()
    assert [t.state.name for t in trials] == ['COMPLETE', 'FAIL', 'COMPLETE']
    assert client.get_run(child.info.run_id).info.status == 'KILLED'
    _, _, children = runs_of(place['uri'])
    assert sorted((r.info.run_name, r.info.status) for r in children[parent.info.run_id]) == [
        ('trial_0000', 'FINISHED'),
        ('trial_0001', 'KILLED'),
        ('trial_0002', 'FINISHED'),
    ]


def test_a_multirun_is_one_parent_with_a_child_per_run(place):
    tmp = place['tmp']
    sweep = ['-m', 'SOLVER.OPTIMIZER.LEARNING_RATE=0.1,0.05']  # the parent here, each run in a process of its own
    assert run_train(['--cfg', place['job'], f'SOLVER.WORK_DIR={tmp / "grid"}', *sweep, *place['words']]) == 0
    client, parents, children = runs_of(place['uri'])
    (parent,) = parents
    assert parent.info.run_name.startswith('grid-multirun-') and parent.info.status == 'FINISHED'
    assert parent.data.params == {'SOLVER.OPTIMIZER.LEARNING_RATE': '0.1,0.05'}
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {
        'multirun_summary.md',
        'multirun_summary.csv',
    }
    kids = {r.info.run_name: r for r in children[parent.info.run_id]}
    names = ['SOLVER.OPTIMIZER.LEARNING_RATE=0.1', 'SOLVER.OPTIMIZER.LEARNING_RATE=0.05']
    assert sorted(kids) == sorted(names)
    for name in names:
        work_dir = tmp / 'grid' / name
        assert kids[name].data.params['SOLVER.OPTIMIZER.LEARNING_RATE'] == name.split('=')[1]
        expected = jsonl_history(work_dir)
        for key, points in expected.items():
            got = sorted(client.get_metric_history(kids[name].info.run_id, key), key=lambda m: m.step)
            assert [(m.step, m.value) for m in got] == points
        (folder,) = wandb_folders(work_dir)
        wb = wandb_run(folder)
        assert (wb['group'], wb['name']) == (parent.info.run_name, name) and wb['history'] == expected


def test_a_multirun_stopped_by_a_signal_ends_its_parent_and_its_run_killed(place):
    """kill PID of a multirun: the run in progress stops with a checkpoint and its child run ends KILLED, as does the
    parent; no RUNNING run is left."""
    tmp = place['tmp']
    support = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ckpt_support.py')
    cmd = [sys.executable, os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', place['job'], '--import', support]
    cmd += [f'SOLVER.WORK_DIR={tmp / "grid"}', 'SOLVER.MAX_EPOCHS=3', tracker_word({'NAME': 'KillHook'})]
    cmd += ['-m', 'SOLVER.OPTIMIZER.LEARNING_RATE=0.1,0.05', place['words'][0]]
    env = tool_env(**{SIGNAL_ENV: 'SIGTERM:2:parent'})  # the first run signals the multirun as its step 3 begins
    res = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 143, res.stderr[-3000:]
    _, (parent,), children = runs_of(place['uri'])
    assert parent.info.status == 'KILLED'
    (child,) = children[parent.info.run_id]
    assert (child.info.run_name, child.info.status) == ('SOLVER.OPTIMIZER.LEARNING_RATE=0.1', 'KILLED')
    assert child.data.metrics['train/loss'] > 0  # it trained until the stop


def test_under_torchrun_only_rank0_tracks(place):
    tmp = place['tmp']
    work_dir = tmp / 'ddp'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}']
    cmd += [os.path.join(REPO, 'tools', 'run_train.py'), '--cfg', place['job'], f'SOLVER.WORK_DIR={work_dir}']
    env = tool_env(**{k: os.environ[k] for k in ('WANDB_CONFIG_DIR', 'WANDB_CACHE_DIR', 'WANDB_DATA_DIR')})
    res = subprocess.run(
        [*cmd, 'SOLVER.MAX_EPOCHS=2', *place['words']], cwd=tmp, env=env, capture_output=True, text=True, timeout=180
    )
    assert res.returncode == 0, res.stderr[-3000:]
    client, parents, _ = runs_of(place['uri'])
    (run_,) = parents  # one run, not one per rank
    expected = jsonl_history(work_dir)
    assert [s for s, _ in expected['eval/accuracy']] == [2, 4]  # 2 ranks: 2 steps an epoch
    for key, points in expected.items():
        got = sorted(client.get_metric_history(run_.info.run_id, key), key=lambda m: m.step)
        assert [(m.step, m.value) for m in got] == points
    (folder,) = wandb_folders(work_dir)
    assert wandb_run(folder)['history'] == expected
