"""Shared test helpers: the repo root, running tools as subprocesses, small configs."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(REPO, 'tools')
DIGITS_CFG = os.path.join(REPO, 'configs', 'cate_recognition', 'digits_mlp.yaml')

if REPO not in sys.path:
    sys.path.insert(0, REPO)


def tool_env(**extra):
    env = dict(os.environ)
    env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
    env.setdefault('OMP_NUM_THREADS', '1')
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        env.pop(key, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_tool(tool, *args, cwd=None, timeout=300, env=None):
    """Run ``tools/<tool>`` with this Python; returns the CompletedProcess (text)."""
    cmd = [sys.executable, os.path.join(TOOLS, tool), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd or REPO, env=env or tool_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def digits_args(tmp_path):
    """Overrides that make the digits job short and write into tmp_path."""
    return [
        '--cfg',
        DIGITS_CFG,
        f'SOLVER.WORK_DIR={tmp_path / "run"}',
        'SOLVER.MAX_EPOCHS=2',
        'SOLVER.LR_SCHEDULER.T_MAX=2',
    ]
