"""Training-feature mistakes end before any step with one error line naming the key (exit 2)."""

import re

import pytest
from conftest import run_cli

CASES = {
    'fp16 on cpu': (
        ['SOLVER.TRAIN_HOOKS.0.USE_AMP=true', 'SOLVER.TRAIN_HOOKS.0.AMP_DTYPE=fp16'],
        r'AMP_DTYPE: fp16 needs CUDA .*use bf16',
    ),
    'scheduler argument type': (['SOLVER.LR_SCHEDULER.T_MAX=long'], r'SOLVER\.LR_SCHEDULER\.T_MAX: expected an int'),
    'scheduler length from MAX_EPOCHS -1': (  # the shipped digits config's T_MAX, on a run by MAX_STEPS
        ['SOLVER.MAX_EPOCHS=-1', 'SOLVER.MAX_STEPS=20', 'SOLVER.LR_SCHEDULER.T_MAX=${SOLVER.MAX_EPOCHS}'],
        r'SOLVER\.LR_SCHEDULER\.T_MAX \(written \$\{SOLVER\.MAX_EPOCHS\}\): must be at least 1, got -1',
    ),
    'early stopping metric': (
        ['SOLVER.EVAL_HOOKS=[{NAME: EarlyStoppingHook, MONITOR: f1}]'],
        r"EVAL_HOOKS\[0\]\.MONITOR: no eval metric is called 'f1'",
    ),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_training_feature_errors(case, digits_args, tmp_path):
    overrides, pattern = CASES[case]
    res = run_cli('run_train.py', *digits_args, *overrides)
    assert res.returncode == 2, res.stderr[-1500:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), res.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert ' step ' not in res.stdout  # no training step was logged
    assert not (tmp_path / 'run' / 'checkpoints' / 'latest').exists()
