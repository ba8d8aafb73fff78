"""``import scepter_like.solver`` must not pull in the heavy optional packages."""

import subprocess
import sys

from conftest import REPO, tool_env

HEAVY = ('tensorboard', 'fvcore', 'safetensors', 'sklearn', 'matplotlib', 'onnx', 'onnxruntime', 'onnxscript')


def test_solver_import_is_lean():
    code = f'import sys, scepter_like.solver; print(",".join(m for m in {HEAVY!r} if m in sys.modules))'
    res = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == '', f'imported eagerly: {res.stdout.strip()}'
