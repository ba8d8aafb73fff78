"""docs/extending.md: its example module and config run as written; broken contracts are one error line."""

import os
import re

import pytest
from conftest import REPO, run_cli

from scepter_like.errors import DataError
from scepter_like.solver.model_call import forward_checked

DOC = os.path.join(REPO, 'docs', 'extending.md')


def code_blocks(language):
    with open(DOC, encoding='utf-8') as f:
        return re.findall(rf'```{language}\n(.*?)```', f.read(), flags=re.S)


def test_the_documented_example_runs(tmp_path):
    python, config = code_blocks('python')[-1], code_blocks('yaml')[-1]  # "A complete example"
    (tmp_path / 'my_ext.py').write_text(python)
    (tmp_path / 'sine.yaml').write_text(config)
    res = run_cli('run_train.py', '--cfg', 'sine.yaml', cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in ('loss_fit', 'loss_small', 'param_norm'):
        assert f' {name}: ' in res.stdout
    mae = float(re.search(r'summary: test mae ([0-9.]+)', res.stdout).group(1))
    assert mae < 0.2  # it learned sin(x)


def test_a_batch_that_is_not_a_dict_is_a_data_error():
    with pytest.raises(DataError, match=r'a batch must be a dict of named fields .* the dataset gave list'):
        forward_checked(lambda **kw: {}, [1, 2])


def test_a_loss_that_is_not_a_scalar_is_a_data_error(tmp_path):
    import torch
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.model import MODELS, BaseModel

    @MODELS.register_class()
    class PerSampleLoss(BaseModel):
        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger)
            self.fc = torch.nn.Linear(8, 3)

        def forward(self, img, label=None):
            return {'loss': torch.nn.functional.cross_entropy(self.fc(img), label, reduction='none')}

    cfg = blob_solver_cfg(write_blobs(tmp_path / 'b.npz', n=32), tmp_path / 'w', MAX_EPOCHS=1, EVAL_DATA=None)
    cfg['SOLVER']['MODEL'] = {'NAME': 'PerSampleLoss'}
    with pytest.raises(DataError, match=r"'loss' must be a scalar tensor, got a tensor of shape \[16\]"):
        build_solver(cfg).solve()
