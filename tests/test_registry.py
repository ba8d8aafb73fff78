import re

import numpy as np
import pytest
import yaml

from scepter_like.config import Config
from scepter_like.errors import ConfigError, RegistryError
from scepter_like.registry import Registry


class Base:
    para_dict = {'PRIORITY': {'value': 5, 'description': 'order'}}

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger


@pytest.fixture
def reg():
    r = Registry('THINGS')

    @r.register_class()
    class Widget(Base):
        para_dict = {
            'SIZE': {'value': 3, 'description': 'how big'},
            'RATE': {'value': 0.5, 'description': 'a float'},
            'TAGS': {'value': ['a'], 'description': 'a list'},
        }

    @r.register_class('Legacy')
    class ScepterStyle(Base):  # no para_dict of its own: inherits PRIORITY, accepts extras
        pass

    @r.register_function()
    def make_pair(cfg, logger=None, offset=0):
        return (cfg.A + offset, logger)

    make_pair.para_dict = {'A': {'value': 1, 'description': 'first'}}
    return r


def test_build_fills_defaults_merged_over_parents(reg):
    w = reg.build({'NAME': 'Widget', 'SIZE': 7})
    assert w.cfg.SIZE == 7
    assert w.cfg.RATE == 0.5
    assert w.cfg.TAGS == ['a']
    assert w.cfg.PRIORITY == 5  # from the parent's para_dict


def test_int_accepted_for_float_and_converted(reg):
    w = reg.build({'NAME': 'Widget', 'RATE': 2})
    assert w.cfg.RATE == 2.0 and isinstance(w.cfg.RATE, float)


def test_logger_and_kwargs_are_passed(reg):
    value, logger = reg.build({'NAME': 'make_pair', 'A': 4}, logger='L', offset=10)
    assert value == 14 and logger == 'L'


def test_alias_and_class_without_para_dict_accepts_extra_keys_and_names_them(reg, caplog):
    with caplog.at_level('WARNING'):
        obj = reg.build({'NAME': 'Legacy', 'ANYTHING': 1, 'PRIORTY': 2})
    assert obj.cfg.ANYTHING == 1 and obj.cfg.PRIORTY == 2
    assert obj.cfg.PRIORITY == 5
    assert [r.getMessage() for r in caplog.records] == [
        'ANYTHING: not a key THINGS.Legacy declares, passed on as written (give the class a para_dict of its own to'
        ' make such a key an error)',
        'PRIORTY: not a key THINGS.Legacy declares, passed on as written; did you mean PRIORITY? (give the class a'
        ' para_dict of its own to make such a key an error)',
    ]
    caplog.clear()
    with caplog.at_level('WARNING'):
        reg.build({'NAME': 'Legacy', 'PRIORITY': 1})
    assert not caplog.records


def test_a_key_declared_not_to_fill_is_left_out_until_written():
    r = Registry('THINGS')

    @r.register_class()
    class Quiet(Base):
        para_dict = {'ORDER': {'value': 5, 'description': 'order', 'fill': False}}

    assert 'ORDER' not in r.build({'NAME': 'Quiet'}).cfg  # cfg.get('ORDER', own default) reads the class's default
    assert r.build({'NAME': 'Quiet', 'ORDER': 2}).cfg.ORDER == 2


def test_unknown_name_suggests_closest_and_path(reg):
    cfg = Config({'SOLVER': {'HOOKS': [{'NAME': 'Widget'}, {'NAME': 'Widgit'}]}})
    with pytest.raises(RegistryError) as e:
        reg.build(cfg.SOLVER.HOOKS[1])
    msg = str(e.value)
    assert 'SOLVER.HOOKS[1].NAME' in msg and 'Widgit' in msg and 'did you mean Widget' in msg and 'THINGS' in msg


def test_unknown_key_suggests_closest(reg):
    cfg = Config({'X': {'NAME': 'Widget', 'SIZ': 2}})
    with pytest.raises(ConfigError) as e:
        reg.build(cfg.X)
    assert 'X.SIZ' in str(e.value) and 'did you mean SIZE' in str(e.value)


def test_wrong_type_is_reported(reg):
    with pytest.raises(ConfigError, match=r'SIZE: expected an int.*abc'):
        reg.build({'NAME': 'Widget', 'SIZE': 'abc'})
    with pytest.raises(ConfigError, match='expected a bool|expected an int'):
        reg.build({'NAME': 'Widget', 'SIZE': True})
    # an array given where a file's path goes (from Python): its shape, not its repr, and where arrays go
    with pytest.raises(ConfigError) as e:
        reg.build({'NAME': 'Widget', 'SIZE': np.zeros((120, 8))})
    assert str(e.value) == (
        'SIZE: expected an int (like 3), got ndarray of shape (120, 8); save arrays to a file (np.savez(path, x=...,'
        ' label=...)) and give its path'
    )
    with pytest.raises(ConfigError, match=r"got 'x{76}\.\.\.; fix the value$"):
        reg.build({'NAME': 'Widget', 'SIZE': 'x' * 500})  # a long value cut to one short piece


def test_missing_name(reg):
    with pytest.raises(ConfigError, match='NAME is missing'):
        reg.build({'SIZE': 1})
    glued = yaml.safe_load('{NAME:Widget}')  # no space after the colon: YAML reads one key 'NAME:Widget'
    with pytest.raises(ConfigError, match=r"^THINGS: YAML read \{NAME:Widget\} as one key 'NAME:Widget' with no"):
        reg.build(glued)


def test_registering_a_taken_name_replaces_it_with_one_warning(reg, caplog):
    widget = reg.get('Widget')
    with caplog.at_level('WARNING', logger='scepter_like.registry'):
        reg.register_class('Widget')(widget)  # same object again: no warning
        assert not caplog.records

        @reg.register_class('Widget')
        class Other(Base):
            pass

    assert reg.get('Widget') is Other
    (record,) = caplog.records
    assert "THINGS: 'Widget' now names" in record.getMessage() and 'Other' in record.getMessage()


def test_config_template_lists_every_key_with_default_and_description(reg):
    import yaml

    text = reg.get_config_template('Widget')
    data = yaml.safe_load(text)
    assert data == {'NAME': 'Widget', 'PRIORITY': 5, 'SIZE': 3, 'RATE': 0.5, 'TAGS': ['a']}
    assert '# how big' in text
    built = reg.build(data)
    assert built.cfg.SIZE == 3


def test_torch_optimizers_and_schedulers_by_name():
    import torch

    from scepter_like.opt import LR_SCHEDULERS, OPTIMIZERS

    assert {'SGD', 'Adam', 'AdamW', 'RMSprop'} <= set(OPTIMIZERS.names())
    assert {'StepLR', 'CosineAnnealingLR', 'OneCycleLR', 'ReduceLROnPlateau'} <= set(LR_SCHEDULERS.names())
    model = torch.nn.Linear(2, 2)
    opt = OPTIMIZERS.build(
        {'NAME': 'SGD', 'LEARNING_RATE': 0.5, 'MOMENTUM': 0.9, 'WEIGHT_DECAY': 0.01}, params=model.parameters()
    )
    assert isinstance(opt, torch.optim.SGD)
    assert opt.param_groups[0]['lr'] == 0.5 and opt.param_groups[0]['momentum'] == 0.9
    sched = LR_SCHEDULERS.build({'NAME': 'CosineAnnealingLR', 'T_MAX': 4}, optimizer=opt)
    assert isinstance(sched, torch.optim.lr_scheduler.CosineAnnealingLR) and sched.T_max == 4
    with pytest.raises(ConfigError, match='T_MAX.*needs this key'):
        LR_SCHEDULERS.build({'NAME': 'CosineAnnealingLR'}, optimizer=opt)
    with pytest.raises(ConfigError, match='STEP_SIZE: expected an int'):
        LR_SCHEDULERS.build({'NAME': 'StepLR', 'STEP_SIZE': 'ten'}, optimizer=opt)
    with pytest.raises(RegistryError, match='did you mean SGD'):
        OPTIMIZERS.build({'NAME': 'SDG'}, params=model.parameters())


@pytest.mark.parametrize(
    'entry, message',
    [
        ({'NAME': 'CosineAnnealingLR', 'T_MAX': -1}, 'T_MAX: must be at least 1, got -1'),  # swings the rate
        ({'NAME': 'CosineAnnealingLR', 'T_MAX': 0}, 'T_MAX: must be at least 1, got 0'),  # divides by zero
        ({'NAME': 'CosineAnnealingWarmRestarts', 'T_0': 0}, 'T_0: must be at least 1'),
        ({'NAME': 'StepLR', 'STEP_SIZE': 0}, 'STEP_SIZE: must be at least 1'),
        ({'NAME': 'LinearLR', 'TOTAL_ITERS': 0}, 'TOTAL_ITERS: must be at least 1'),
        ({'NAME': 'OneCycleLR', 'MAX_LR': 0.1, 'TOTAL_STEPS': 0}, 'TOTAL_STEPS: must be at least 1'),
        ({'NAME': 'OneCycleLR', 'MAX_LR': 0.1, 'TOTAL_STEPS': 2.5}, 'TOTAL_STEPS: expected an int'),
        ({'NAME': 'ReduceLROnPlateau', 'PATIENCE': -1}, 'PATIENCE: must be at least 0'),
    ],
)
def test_scheduler_lengths_are_checked_at_set_up(entry, message):
    """torch takes a negative T_max (the rate swings between 0 and full) and a zero one (a ZeroDivisionError an
    epoch later): the scheduler's lengths and counts are refused when the config is read."""
    from scepter_like.opt import LR_SCHEDULERS

    with pytest.raises(ConfigError, match=re.escape(message)):
        LR_SCHEDULERS.resolve(entry)


@pytest.mark.parametrize('named_by', ['path', 'module'])
def test_an_imports_entry_changed_since_it_ran_runs_again_and_its_registrations_replace_the_old(
    tmp_path, monkeypatch, caplog, named_by
):
    """A notebook edits its IMPORTS file and builds again: the new code runs (the same size, within the same
    second, where Python's bytecode cache would not see the edit); an unchanged file is not run again."""
    from scepter_like.model.registry import MODELS
    from scepter_like.utils.imports import import_user_modules

    stem = f'changing_ext_{named_by}'
    ext = tmp_path / f'{stem}.py'

    def write(scale):
        ext.write_text(
            'from scepter_like.model.registry import MODELS\n'
            "RUNS = globals().get('RUNS', 0) + 1\n"
            f'@MODELS.register_class({stem!r})\n'
            f'class Net:\n    SCALE = {scale}\n'
        )

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(MODELS._entries, stem, None)  # (taken out again after the test)
    entry = str(ext) if named_by == 'path' else stem
    write(1)
    (module,) = import_user_modules([entry])
    assert MODELS.get(stem).SCALE == 1
    write(2)
    (again,) = import_user_modules([entry])
    assert again is module and module.RUNS == 2 and MODELS.get(stem).SCALE == 2
    assert f'IMPORTS: {entry} changed since this process imported it' in caplog.text
    import_user_modules([entry])
    assert module.RUNS == 2  # unchanged: not run again
