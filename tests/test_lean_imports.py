"""``import scepter_like.solver`` must not pull in the heavy optional packages."""

import subprocess
import sys

from conftest import REPO, tool_env

HEAVY = (
    'tensorboard',
    'fvcore',
    'safetensors',
    'sklearn',
    'matplotlib',
    'onnx',
    'onnxruntime',
    'onnxscript',
    'optuna',
    'sqlalchemy',
    'mlflow',
    'wandb',
    'PIL',
    'cv2',
    'torchvision',
    'lightning',
    'pytorch_lightning',
)


def test_solver_import_is_lean():
    code = f'import sys, scepter_like.solver; print(",".join(m for m in {HEAVY!r} if m in sys.modules))'
    res = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == '', f'imported eagerly: {res.stdout.strip()}'


def test_solver_import_adds_only_yaml_to_torch():
    """Beyond torch, numpy and the standard library the solver's import pulls in PyYAML only."""
    code = (
        'import sys, torch; before = set(sys.modules); import scepter_like.solver; '
        'new = {m.split(".")[0] for m in set(sys.modules) - before}; '
        'print(",".join(sorted(new - set(sys.stdlib_module_names) - {"scepter_like"})))'
    )
    res = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    extra = {m for m in res.stdout.strip().split(',') if m and not m.startswith(('_cython', 'cython_runtime'))}
    extra -= {'yaml', 'numpy'}  # the two hard dependencies besides torch (torch already imports numpy)
    assert not extra, f'import scepter_like.solver pulls in {sorted(extra)} beyond torch, numpy and yaml'
