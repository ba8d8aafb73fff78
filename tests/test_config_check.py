"""--print-config refuses what a run refuses, and component errors name their place in the config."""

import pytest
import torch

from scepter_like.cli import read_config
from scepter_like.config import Config
from scepter_like.config_check import checked_config
from scepter_like.errors import ConfigError
from scepter_like.solver.optimization import OptimizerPhases
from scepter_like.solver.stages import build_hooks
from scepter_like.utils.imports import import_user_modules

DIGITS = 'configs/cate_recognition/digits_mlp.yaml'


@pytest.mark.parametrize(
    'override, match',
    [
        ('SOLVER.MODEL.BACKBONE.NAME=MLPP', r"^SOLVER.MODEL.BACKBONE.NAME: 'MLPP' is not in registry MODELS"),
        ('SOLVER.MODEL.NAME=Clasifier', r"^SOLVER.MODEL.NAME: 'Clasifier' is not in registry MODELS"),
        ('SOLVER.MODEL=abc', r"^SOLVER.MODEL: expected a mapping with NAME \(a MODELS entry\), got 'abc'"),
        ('SOLVER.MODEL=[1]', r'^SOLVER.MODEL: expected a mapping with NAME \(a MODELS entry\), got \[1\]'),
        (
            'SOLVER.TEST_DATA=abc',
            r"^SOLVER.TEST_DATA: a data config is a mapping with NAME \(a DATASETS entry\), got 'abc'",
        ),
        ('SOLVER.TRAIN_HOOKS.1=null', r'^SOLVER.TRAIN_HOOKS\[1\]: a mapping with NAME \(a HOOKS entry\) is needed'),
        ('SOLVER.TRAIN_HOOKS+=LogHook', r"^SOLVER.TRAIN_HOOKS\[5\]: expected a mapping with NAME .*got 'LogHook'"),
        ('SOLVER.OPTIMIZER=abc', r'^SOLVER.OPTIMIZER: expected a mapping with NAME \(an? OPTIMIZERS entry\)'),
    ],
)
def test_print_config_refuses_what_a_run_refuses(override, match):
    """An unregistered model part or a word for a component config printed fine (or raised AttributeError)."""
    with pytest.raises(ConfigError, match=match):
        checked_config(read_config(DIGITS, [override]))


def test_a_run_names_the_place_of_a_hook_or_optimizer_that_is_not_a_mapping():
    """HOOKS: / OPTIMIZERS: named the registry, not the place to fix."""
    solver = Config({'SOLVER': {'TRAIN_HOOKS': [{'NAME': 'LogHook'}, None], 'EVAL_HOOKS': [], 'TEST_HOOKS': []}})
    with pytest.raises(ConfigError, match=r'^SOLVER.TRAIN_HOOKS\[1\]: a mapping with NAME'):
        build_hooks(solver.SOLVER, None)
    solver = Config({'SOLVER': {'OPTIMIZER': 'abc', 'LR_SCHEDULER': None, 'OPTIMIZER_PHASES': []}})
    with pytest.raises(ConfigError, match=r"^SOLVER.OPTIMIZER: expected a mapping with NAME .*got 'abc'"):
        OptimizerPhases(solver.SOLVER).build(0, [torch.nn.Parameter(torch.zeros(1))])


def test_a_run_names_the_place_of_a_model_or_data_config_that_is_not_a_mapping(tmp_path):
    from scepter_like import build_solver

    for override, match in [
        ('SOLVER.MODEL=abc', r"^SOLVER.MODEL: expected a mapping with NAME \(a MODELS entry\), got 'abc'"),
        ('SOLVER.TEST_DATA=[1]', r'^SOLVER.TEST_DATA: a data config is a mapping with NAME .*got \[1\]'),
    ]:
        with pytest.raises(ConfigError, match=match):
            build_solver(DIGITS, overrides=[override, f'SOLVER.WORK_DIR={tmp_path}'])


def test_importing_a_folder_says_it_is_a_folder(tmp_path):
    (tmp_path / 'ext' / 'pkg').mkdir(parents=True)
    (tmp_path / 'ext' / 'pkg' / '__init__.py').write_text('')
    with pytest.raises(ConfigError, match=r"IMPORTS: 'ext/pkg' is a folder; give a .py file, or the package by"):
        import_user_modules(['ext/pkg'], base_dir=str(tmp_path))


def test_an_override_of_a_key_of_a_defaulted_sub_config_keeps_the_defaults_name(tmp_path):
    """A config without LOSS and ``SOLVER.MODEL.LOSS.LABEL_SMOOTHING=0.1`` was ``LOSS: {LABEL_SMOOTHING: 0.1}``:
    'NAME is missing'.  The override lands in the default (CrossEntropyLoss); a NAME of one's own is kept."""
    from helpers import blob_solver_cfg

    from scepter_like.model.registry import MODELS

    plain = blob_solver_cfg(str(tmp_path / 'd.npz'), tmp_path / 'w')
    assert 'LOSS' not in plain['SOLVER']['MODEL']
    cfg = checked_config(read_config(plain, ['SOLVER.MODEL.LOSS.LABEL_SMOOTHING=0.1']))
    assert cfg.SOLVER.MODEL.LOSS.to_dict() == {'NAME': 'CrossEntropyLoss', 'LABEL_SMOOTHING': 0.1, 'WEIGHT': None}
    assert MODELS.build(cfg.SOLVER.MODEL).loss.label_smoothing == 0.1
    cfg = checked_config(read_config(plain, ['SOLVER.MODEL.LOSS={NAME: MSELoss}']))
    assert cfg.SOLVER.MODEL.LOSS.NAME == 'MSELoss'
