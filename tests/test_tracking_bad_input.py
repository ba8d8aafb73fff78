"""Trackers and bad input: a hook whose package is missing, a store that cannot be reached.

Each is one ``error:`` line with exit status 2, before any train step.
"""

import sys

import pytest
from conftest import free_port
from tracking_support import blob_job, run_train, tracker_word

from scepter_like.utils.metrics_log import METRICS_FILE, read_metrics


def error_lines(err):
    return [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    'hook, module',
    [({'NAME': 'MLflowLogHook'}, 'mlflow'), ({'NAME': 'WandbLogHook'}, 'wandb')],
)
def test_a_tracker_without_its_package_names_the_extra(hook, module, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed: its import fails
    status = run_train(['--cfg', blob_job(tmp_path), f'SOLVER.WORK_DIR={tmp_path / "run"}', tracker_word(hook)])
    assert status == 2
    lines = error_lines(capsys.readouterr().err)
    assert lines == [
        f'error: SOLVER.TRAIN_HOOKS[3]: {hook["NAME"]} needs the {module} package; install it with'
        f" pip install 'scepter_like[{module}]' (or remove the hook)"
    ]
    assert not (tmp_path / 'run' / METRICS_FILE).exists()  # stopped while the hooks were built


@pytest.mark.slow  # MLflow's import alone takes seconds
@pytest.mark.parametrize('where', ['server', 'sqlite'])
def test_an_unreachable_store_stops_before_training(where, tmp_path, monkeypatch, capsys):
    pytest.importorskip('mlflow', reason="MLflowLogHook tests need mlflow: pip install -e '.[mlflow]'")
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'a_file').write_text('not a folder')
    uri = f'http://127.0.0.1:{free_port()}' if where == 'server' else f'sqlite:///{tmp_path}/a_file/mlflow.db'
    hook = tracker_word({'NAME': 'MLflowLogHook', 'TRACKING_URI': uri})
    status = run_train(['--cfg', blob_job(tmp_path), f'SOLVER.WORK_DIR={tmp_path / "run"}', hook])
    assert status == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f'error: SOLVER.TRAIN_HOOKS[3].TRACKING_URI: MLflow cannot use the store {uri} (')
    kinds = [r['kind'] for r in read_metrics(str(tmp_path / 'run' / METRICS_FILE))]
    assert 'train' not in kinds and not (tmp_path / 'run' / 'checkpoints' / 'latest').exists()
