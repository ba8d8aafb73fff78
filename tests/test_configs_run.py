"""Every runnable YAML under configs/ trains for a few steps through tools/run_train.py, as the README runs them."""

import glob
import os

import pytest
import yaml
from conftest import REPO, run_cli

CONFIGS = sorted(
    path
    for path in glob.glob(os.path.join(REPO, 'configs', '*', '*.yaml'))
    if not path.endswith('_space.yaml')  # search spaces (tools/run_search.py), not run configs
)


@pytest.mark.parametrize('cfg', CONFIGS, ids=[os.path.relpath(p, os.path.join(REPO, 'configs')) for p in CONFIGS])
def test_shipped_config_runs(cfg, tmp_path):
    with open(cfg) as f:
        phases = yaml.safe_load(f)['SOLVER'].get('OPTIMIZER_PHASES')
    # a later optimizer phase starts at step 1, so that both phases run in the 2 steps
    switch = ['SOLVER.OPTIMIZER_PHASES.0.AT_STEP=1'] if phases else []
    res = run_cli('run_train.py', '--cfg', cfg, f'SOLVER.WORK_DIR={tmp_path / "run"}', 'SOLVER.MAX_STEPS=2', *switch)
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'Traceback' not in res.stderr
    assert os.path.isfile(tmp_path / 'run' / 'config.yaml')
