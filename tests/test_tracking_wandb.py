"""WandbLogHook in offline mode (no account, no network), read back from the run files W&B wrote.

The six-step PINN runs once for the module; its offline run folder must hold the resolved
config, metrics.jsonl's history step for step, the commit / WORK_DIR / checkpoint paths in
the summary, config.yaml, the log and the plots as run files, and the checkpoints as a model
artifact.  A resumed run writes a second folder with the same run id (``wandb sync`` of
both makes one run).
"""

import os
import subprocess
import sys

import pytest
import yaml
from tracking_support import (
    PINN_ARGS,
    blob_job,
    git_repo,
    jsonl_history,
    run_train,
    tracker_word,
    unflatten,
    wandb_folders,
    wandb_run,
)

from scepter_like.utils.checkpoint import latest_checkpoint

pytest.importorskip('wandb', reason="WandbLogHook tests need wandb: pip install -e '.[wandb]'")

pytestmark = pytest.mark.slow  # each test trains and starts W&B's service


@pytest.fixture(scope='module')
def wandb_home(tmp_path_factory):
    """W&B's own config, cache and artifact staging folders inside the test's tmp (not the user's home)."""
    home = tmp_path_factory.mktemp('wandb_home')
    with pytest.MonkeyPatch.context() as mp:
        for name in ('WANDB_CONFIG_DIR', 'WANDB_CACHE_DIR', 'WANDB_DATA_DIR'):
            mp.setenv(name, str(home / name.lower()))
        yield home


@pytest.fixture(scope='module')
def pinn(wandb_home, tmp_path_factory):
    """The PINN job run from a git work tree with LOG_MODEL; the offline run it left."""
    tmp = tmp_path_factory.mktemp('wandb_pinn')
    commit = git_repo(tmp)
    work_dir = tmp / 'run'
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        status = run_train(
            [*PINN_ARGS, f'SOLVER.WORK_DIR={work_dir}', tracker_word({'NAME': 'WandbLogHook', 'LOG_MODEL': True})]
        )
    (folder,) = wandb_folders(work_dir)
    return {'status': status, 'work_dir': work_dir, 'folder': folder, 'run': wandb_run(folder), 'commit': commit}


def test_config_is_the_resolved_config(pinn):
    assert pinn['status'] == 0
    run = pinn['run']
    assert run['name'] == 'run' and run['group'] == ''
    assert run['config']['SOLVER.OPTIMIZER.LEARNING_RATE'] == 0.001
    assert unflatten(run['config']) == yaml.safe_load((pinn['work_dir'] / 'config.yaml').read_text())


def test_history_is_metrics_jsonl_step_for_step(pinn):
    expected = jsonl_history(pinn['work_dir'])
    assert [s for s, _ in expected['eval/relative_l2']] == [3, 6]
    assert pinn['run']['history'] == expected


def test_summary_names_the_commit_work_dir_and_checkpoints(pinn):
    summary, work_dir = pinn['run']['summary'], pinn['work_dir']
    assert summary['git_commit'] == pinn['commit'] and summary['work_dir'] == str(work_dir)
    assert summary['checkpoint.best'] == str(work_dir / 'checkpoints' / 'poisson2d-best.pth')
    assert summary['checkpoint.last'] == latest_checkpoint(str(work_dir / 'checkpoints'))
    assert summary['test/relative_l2'] == jsonl_history(work_dir)['test/relative_l2'][-1][1]


def test_files_and_the_model_artifact(pinn):
    run, folder, work_dir = pinn['run'], pinn['folder'], pinn['work_dir']
    plots = sorted(os.listdir(work_dir / 'plots'))
    assert len(plots) == 2
    expected = {'work_dir/config.yaml', 'work_dir/std_log.txt', *[f'work_dir/plots/{n}' for n in plots]}
    assert expected <= set(run['files'])
    for name in expected:  # a copy in the run folder, taken at the end of training
        assert os.path.isfile(os.path.join(folder, 'files', name)), name
    copied = open(os.path.join(folder, 'files', 'work_dir', 'config.yaml')).read()
    assert copied == (work_dir / 'config.yaml').read_text()
    (model,) = [a for a in run['artifacts'] if a['type'] == 'model']
    assert model['name'] == f'model-{run["id"]}' and {'best', 'last'} <= set(model['aliases'])
    assert sorted(model['paths']) == ['poisson2d-best.pth', 'poisson2d-last.pth']


def test_the_log_says_how_to_sync(pinn):
    assert f'upload it with: wandb sync {pinn["folder"]}' in (pinn['work_dir'] / 'std_log.txt').read_text()


def test_resumed_training_continues_the_same_run_id(wandb_home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job, work_dir = blob_job(tmp_path), tmp_path / 'run'
    hook = tracker_word({'NAME': 'WandbLogHook', 'PROJECT': 'blobs'})
    assert run_train(['--cfg', job, f'SOLVER.WORK_DIR={work_dir}', hook]) == 0
    resume = ['SOLVER.MAX_EPOCHS=3', 'SOLVER.RESUME_FROM=auto']
    assert run_train(['--cfg', job, f'SOLVER.WORK_DIR={work_dir}', *resume, hook]) == 0
    first, second = [wandb_run(f) for f in wandb_folders(work_dir)]
    assert first['id'] == second['id']
    joined = {
        k: first['history'].get(k, []) + second['history'].get(k, []) for k in {*first['history'], *second['history']}
    }
    expected = jsonl_history(work_dir)
    assert [s for s, _ in expected['eval/accuracy']] == [4, 8, 12]
    assert joined == expected
    assert second['config']['SOLVER.MAX_EPOCHS'] == 3 and first['config']['SOLVER.MAX_EPOCHS'] == 1
    # W&B's own CLI would upload both (same run id: synced in order of start time, into one run)
    res = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'wandb'), 'sync', '--dry-run', *wandb_folders(work_dir)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    assert 'Would sync 2 run(s)' in out and out.count(f'run-{first["id"]}.wandb') == 2
