"""MLflowLogHook, read back through MLflow's own client from a real SQLite store.

A six-step Poisson PINN (evaluations, field plots, best and last checkpoints) runs once
for the module; its run must hold the resolved config as params, metrics.jsonl's history
step for step, the commit / WORK_DIR / checkpoint tags and the files.  The blob job shows
a resume continuing the same run and a store removed mid-run costing one warning.
"""

import os
import textwrap

import pytest
import yaml
from tracking_support import (
    PINN_ARGS,
    blob_job,
    copy_store,
    empty_mlflow_store,
    git_repo,
    jsonl_history,
    run_train,
    tracker_word,
    unflatten,
)

from scepter_like.utils.checkpoint import latest_checkpoint
from scepter_like.utils.metrics_log import METRICS_FILE, read_metrics

pytest.importorskip('mlflow', reason="MLflowLogHook tests need mlflow: pip install -e '.[mlflow]'")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.slow  # each test trains (and MLflow's import alone takes seconds)


@pytest.fixture(scope='module')
def store_template(tmp_path_factory):
    return empty_mlflow_store(tmp_path_factory.mktemp('mlflow_template'))


def only_run(client, experiment):
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return run


def mlflow_history(client, run_id, key):
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


@pytest.fixture(scope='module')
def pinn(store_template, tmp_path_factory):
    """The PINN job run from a git work tree (its commit is recorded), with LOG_MODEL; MLflow's view of it."""
    tmp = tmp_path_factory.mktemp('mlflow_pinn')
    commit = git_repo(tmp)
    uri = copy_store(store_template, tmp)
    work_dir = tmp / 'run'
    hook = {'NAME': 'MLflowLogHook', 'TRACKING_URI': uri, 'EXPERIMENT': 'pinn', 'LOG_MODEL': True}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)  # MLflow keeps artifacts in ./mlruns/
        status = run_train([*PINN_ARGS, f'SOLVER.WORK_DIR={work_dir}', tracker_word(hook)])
    client = MlflowClient(tracking_uri=uri)
    return {'status': status, 'work_dir': work_dir, 'client': client, 'run': only_run(client, 'pinn'), 'commit': commit}


def test_params_are_the_resolved_config(pinn):
    assert pinn['status'] == 0
    run = pinn['run']
    assert run.info.status == 'FINISHED' and run.info.run_name == 'run'
    params = run.data.params
    assert params['SOLVER.OPTIMIZER.LEARNING_RATE'] == '0.001' and params['SOLVER.TRAIN_HOOKS.2.INTERVAL'] == '3'
    config = yaml.safe_load((pinn['work_dir'] / 'config.yaml').read_text())
    assert unflatten({k: yaml.safe_load(v) for k, v in params.items()}) == config


def test_metric_history_is_metrics_jsonl_step_for_step(pinn):
    client, run = pinn['client'], pinn['run']
    expected = jsonl_history(pinn['work_dir'])
    assert [s for s, _ in expected['train/loss']] == [2, 4, 6]  # one-step epochs: a line every LOG_INTERVAL steps
    assert [s for s, _ in expected['eval/relative_l2']] == [3, 6] and [s for s, _ in expected['test/relative_l2']] == [
        6
    ]
    assert set(run.data.metrics) == set(expected)
    for key, points in expected.items():
        assert mlflow_history(client, run.info.run_id, key) == points, key


def test_tags_name_the_commit_work_dir_and_checkpoints(pinn):
    tags, work_dir = pinn['run'].data.tags, pinn['work_dir']
    assert tags['git_commit'] == tags['mlflow.source.git.commit'] == pinn['commit']
    assert tags['work_dir'] == str(work_dir)
    assert tags['checkpoint.best'] == str(work_dir / 'checkpoints' / 'poisson2d-best.pth')
    assert tags['checkpoint.last'] == latest_checkpoint(str(work_dir / 'checkpoints'))
    assert tags['checkpoint.last'].endswith('poisson2d-last.pth')


def test_files_config_log_plots_and_checkpoints_are_artifacts(pinn, tmp_path):
    client, run_id, work_dir = pinn['client'], pinn['run'].info.run_id, pinn['work_dir']
    listed = {a.path for a in client.list_artifacts(run_id)}
    assert listed == {'config.yaml', 'std_log.txt', 'plots', 'checkpoints'}
    plots = sorted(os.listdir(work_dir / 'plots'))
    assert plots == ['field-eval-step3.png', 'field-eval-step6.png']
    assert sorted(a.path for a in client.list_artifacts(run_id, 'plots')) == [f'plots/{n}' for n in plots]
    assert {a.path for a in client.list_artifacts(run_id, 'checkpoints')} == {
        'checkpoints/poisson2d-best.pth',
        'checkpoints/poisson2d-last.pth',
    }
    local = client.download_artifacts(run_id, 'config.yaml', str(tmp_path))
    assert open(local).read() == (work_dir / 'config.yaml').read_text()


def test_resumed_training_continues_the_same_run(store_template, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = copy_store(store_template, tmp_path)
    job, work_dir = blob_job(tmp_path), tmp_path / 'run'
    hook = tracker_word({'NAME': 'MLflowLogHook', 'TRACKING_URI': uri, 'EXPERIMENT': 'blobs'})
    assert run_train(['--cfg', job, f'SOLVER.WORK_DIR={work_dir}', hook]) == 0
    client = MlflowClient(tracking_uri=uri)
    first = only_run(client, 'blobs').info.run_id
    resume = ['SOLVER.MAX_EPOCHS=3', 'SOLVER.RESUME_FROM=auto']
    assert run_train(['--cfg', job, f'SOLVER.WORK_DIR={work_dir}', *resume, hook]) == 0
    run = only_run(client, 'blobs')
    assert run.info.run_id == first and run.info.status == 'FINISHED'
    expected = jsonl_history(work_dir)
    assert [s for s, _ in expected['eval/accuracy']] == [4, 8, 12]  # both parts: the history goes on
    for key, points in expected.items():
        assert mlflow_history(client, first, key) == points, key
    assert run.data.params['SOLVER.MAX_EPOCHS'] == '1'  # MLflow params are immutable: the change is a tag
    assert 'SOLVER.MAX_EPOCHS: 1 -> 3' in run.data.tags['config_changes_on_resume']
    assert f'MLflowLogHook: continuing run {first}' in (work_dir / 'std_log.txt').read_text()


REMOVE_STORE = textwrap.dedent(
    """
    import os

    from scepter_like.solver.hooks.hook import Hook
    from scepter_like.solver.hooks.registry import HOOKS


    @HOOKS.register_class()
    class RemoveStoreHook(Hook):
        '''Deletes the MLflow store file after train step AT_STEP, as a cleanup job or a full disk might.'''

        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger)
            self.path, self.at_step = cfg.PATH, cfg.AT_STEP

        def after_iter(self, solver):
            if solver.progress.total_iter == self.at_step:
                os.remove(self.path)
    """
)


def test_a_store_removed_mid_run_is_one_warning_and_training_goes_on(store_template, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = copy_store(store_template, tmp_path)
    (tmp_path / 'remove_store.py').write_text(REMOVE_STORE)
    job, work_dir = blob_job(tmp_path), tmp_path / 'run'
    words = [
        tracker_word({'NAME': 'MLflowLogHook', 'TRACKING_URI': uri, 'EXPERIMENT': 'blobs'}),
        tracker_word({'NAME': 'RemoveStoreHook', 'PATH': str(tmp_path / 'mlflow.db'), 'AT_STEP': 2}),
    ]
    status = run_train(
        ['--cfg', job, '--import', 'remove_store.py', f'SOLVER.WORK_DIR={work_dir}', 'SOLVER.MAX_EPOCHS=2', *words]
    )
    assert status == 0
    log = (work_dir / 'std_log.txt').read_text()
    warnings = [line for line in log.splitlines() if 'MLflowLogHook' in line and 'failed' in line]
    assert len(warnings) == 1 and 'training goes on' in warnings[0], warnings
    records = read_metrics(str(work_dir / METRICS_FILE))
    assert [r['step'] for r in records if r['kind'] == 'eval'] == [4, 8]  # metrics.jsonl has the whole run
    assert (work_dir / 'checkpoints' / 'checkpoint-epoch-2.pth').is_file()
