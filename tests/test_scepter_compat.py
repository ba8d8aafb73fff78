"""Code written for scepter runs after the rename ``scepter.modules.`` -> ``scepter_like.``.

Apart from scepter's AnnealingLR / StepAnnealingLR (copied with their copyright line), no
scepter code ships here: the hooks, metric, scheduler and dataset below are small ones written
in scepter's style (list ``para_dict``, its imports after the rename).
"""

import itertools
import json
import logging
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from conftest import DIGITS_CFG, free_port, run_cli, run_tool, tool_env

from scepter_like.config import Config
from scepter_like.errors import ConfigError, DataError, RegistryError
from scepter_like.registry import Registry
from scepter_like.solver.base_solver import BaseSolver

# A hook file exactly as a scepter user writes one, after the import rename.
SCEPTER_HOOK_FILE = """
# -*- coding: utf-8 -*-
import json
import logging
import math
import os.path as osp

from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.config import dict_to_yaml
from scepter_like.utils.distribute import we
from scepter_like.utils.file_system import FS
from scepter_like.utils.logger import LogAgg

_DEFAULT_RECORD_PRIORITY = 250


@HOOKS.register_class()
class StepRecordHook(Hook):
    para_dict = [{
        'PRIORITY': {
            'value': _DEFAULT_RECORD_PRIORITY,
            'description': 'the priority for processing!'
        },
        'INTERVAL': {
            'value': 5,
            'description': 'the interval of records!',
            'min': 1
        },
        'SAVE_NAME': {
            'value': 'steps.json',
            'description': 'the file name under WORK_DIR/records!'
        }
    }]

    def __init__(self, cfg, logger=None):
        super(StepRecordHook, self).__init__(cfg, logger=logger)
        self.priority = cfg.get('PRIORITY', _DEFAULT_RECORD_PRIORITY)
        self.interval = cfg.get('INTERVAL', 5)
        self.save_name = cfg.get('SAVE_NAME', 'steps.json')
        self.log_agg = LogAgg()
        self.steps = []

    def after_iter(self, solver):
        self.log_agg.update(solver.iter_outputs, 1)
        self.steps.append(solver.total_iter)

    def after_solve(self, solver):
        if we.rank == 0:
            save_dir = osp.join(solver.work_dir, 'records')
            FS.make_dir(save_dir)
            with FS.put_to(osp.join(save_dir, self.save_name)) as local_path:
                with open(local_path, 'w') as f:
                    json.dump({
                        'steps': self.steps,
                        'interval': self.interval,
                        'world_size': we.world_size,
                        'loss': self.log_agg.aggregate(self.interval)['loss'],
                        'template': StepRecordHook.get_config_template()
                    }, f)

    @staticmethod
    def get_config_template():
        return dict_to_yaml('HOOK',
                            __class__.__name__,
                            StepRecordHook.para_dict,
                            set_name=True)
"""

# A user module replacing a built-in hook under its own name (scepter's rule).
OVERRIDING_HOOK_FILE = """
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS


@HOOKS.register_class()
class LogHook(Hook):
    para_dict = [{'PRIORITY': {'value': 100, 'description': 'p'},
                  'EVERY': {'value': 3, 'description': 'my own key', 'min': 1}}]
"""


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture
def things():
    return Registry('THINGS')


# -- declarations -------------------------------------------------------------------------------
def test_list_para_dict_is_the_same_declaration(things):
    @things.register_class()
    class Recorder:
        para_dict = [
            {'INTERVAL': {'value': 5, 'description': 'every'}, 'NAME_PREFIX': {'value': 'x', 'description': 'n'}}
        ]

        def __init__(self, cfg, logger=None):
            self.cfg = cfg

    built = things.build({'NAME': 'Recorder', 'INTERVAL': 7, 'NAME_PREFIX': 'y'})  # both keys known
    assert (built.cfg.INTERVAL, built.cfg.NAME_PREFIX) == (7, 'y')
    assert things.build({'NAME': 'Recorder'}).cfg.INTERVAL == 5  # defaults filled
    with pytest.raises(ConfigError, match=r'INTERVL: unknown key.*did you mean INTERVAL'):
        things.build(Config({'NAME': 'Recorder', 'INTERVL': 3}))
    assert yaml.safe_load(things.get_config_template('Recorder')) == {
        'NAME': 'Recorder',
        'INTERVAL': 5,
        'NAME_PREFIX': 'x',
    }


def test_scepter_entries_without_a_value_declare_a_key_with_a_null_default(things):
    @things.register_class()
    class Solverish:
        para_dict = {'MODEL': {}, 'TRAIN_HOOKS': [], 'TRAIN_DATA': {'description': 'data'}, 'EPOCHS': {'value': 2}}

        def __init__(self, cfg, logger=None):
            self.cfg = cfg

    built = things.build({'NAME': 'Solverish', 'MODEL': {'NAME': 'M'}, 'TRAIN_HOOKS': [{'NAME': 'H'}]})
    assert built.cfg.MODEL.NAME == 'M' and built.cfg.TRAIN_DATA is None and built.cfg.EPOCHS == 2


def test_a_malformed_para_dict_is_one_registry_error(things):
    @things.register_class()
    class Broken:
        para_dict = ['INTERVAL']

    with pytest.raises(RegistryError, match=r'Broken.para_dict: a list form holds mappings'):
        things.build({'NAME': 'Broken'})


# -- declared value checks ----------------------------------------------------------------------------
@pytest.fixture
def checked(things):
    @things.register_class()
    class Checked:
        para_dict = {
            'INTERVAL': {'value': 1, 'description': 'every', 'min': 1},
            'DECAY': {'value': 0.9, 'description': 'ema decay', 'min': 0, 'below': 1},
            'MODE': {'value': 'max', 'description': 'direction', 'choices': ['max', 'min']},
            'TOPK': {'value': [1], 'description': 'k', 'min': 1},
            'RATE': {'value': None, 'description': 'lr', 'type': (int, float), 'above': 0},
        }

        def __init__(self, cfg, logger=None):
            self.cfg = cfg

    return things


def test_declared_bounds_and_choices_name_the_key_config_path(checked):
    hooks = Config({'SOLVER': {'TRAIN_HOOKS': [{'NAME': 'Checked'}] * 2 + [{'NAME': 'Checked', 'INTERVAL': 0}]}})
    with pytest.raises(ConfigError) as e:
        checked.build(hooks.SOLVER.TRAIN_HOOKS[2])
    assert str(e.value) == 'SOLVER.TRAIN_HOOKS[2].INTERVAL: must be at least 1, got 0'
    for key, value, message in [
        ('DECAY', 1.0, 'DECAY: must be below 1, got 1.0'),
        ('DECAY', -0.5, 'DECAY: must be at least 0, got -0.5'),
        ('MODE', 'mix', "MODE: must be one of 'max', 'min', got 'mix'; did you mean min or max?"),
        ('TOPK', [1, 0], 'TOPK: must be at least 1, got 0'),
        ('RATE', 0, 'RATE: must be above 0, got 0'),
        ('RATE', 'fast', "RATE: expected an int or a number, got 'fast'; fix the value"),
    ]:
        with pytest.raises(ConfigError) as e:
            checked.build(Config({'X': {'NAME': 'Checked', key: value}}).X)
        assert str(e.value) == f'X.{message}'
    ok = checked.build({'NAME': 'Checked', 'INTERVAL': 3, 'DECAY': 0, 'MODE': 'min', 'TOPK': [1, 5], 'RATE': 0.1})
    assert (ok.cfg.DECAY, ok.cfg.MODE, ok.cfg.TOPK) == (0.0, 'min', [1, 5])


def test_template_shows_types_ranges_and_choices(checked):
    text = checked.get_config_template('Checked')
    assert 'INTERVAL: 1  # every [at least 1]' in text
    assert 'DECAY: 0.9  # ema decay [at least 0, below 1]' in text
    assert 'MODE: max  # direction [one of: max, min]' in text
    assert 'RATE: null  # lr [int or float, above 0]' in text
    assert yaml.safe_load(text)['MODE'] == 'max'


def test_unambiguous_values_become_the_declared_type_and_wrong_ones_are_rejected(things):
    @things.register_class()
    class Typed:
        para_dict = [
            {
                'CLIP': {'value': -1.0, 'description': 'a float'},
                'T_MAX': {'value': 10, 'description': 'an int'},
                'TOPK': {'value': [1], 'description': 'a one-element list'},
                'KEYS': {'value': ['a', 'b'], 'description': 'a longer list'},
                'RESUME_FROM': {'value': '', 'description': 'an empty string'},
                'FUNC': {'value': 'linear', 'description': 'a non-empty string'},
            }
        ]

        def __init__(self, cfg, logger=None):
            self.cfg = cfg

    cfg = things.build({'NAME': 'Typed', 'CLIP': 1, 'T_MAX': 200.0, 'TOPK': 3, 'RESUME_FROM': None}).cfg
    assert cfg.CLIP == 1.0 and isinstance(cfg.CLIP, float)
    assert cfg.T_MAX == 200 and isinstance(cfg.T_MAX, int)
    assert cfg.TOPK == [3] and cfg.RESUME_FROM == ''
    for key, value, expected in [
        ('T_MAX', 2.5, 'expected an int'),
        ('T_MAX', True, 'expected an int'),
        ('TOPK', 'one', 'expected an int'),
        ('KEYS', 'a', 'expected a list'),
        ('FUNC', None, 'expected a string'),
        ('CLIP', 'big', 'expected a number'),
    ]:
        with pytest.raises(ConfigError, match=f'^{key}: {expected}'):
            things.build(Config({'NAME': 'Typed', key: value}))


def test_yaml11_exponent_without_a_dot_is_explained(things):
    @things.register_class()
    class Opt:
        para_dict = {'WEIGHT_DECAY': {'value': 0.0, 'description': 'wd'}, 'STEPS': {'value': 1, 'description': 's'}}

        def __init__(self, cfg, logger=None):
            self.cfg = cfg

    cfg = Config(yaml.safe_load('OPT: {NAME: Opt, WEIGHT_DECAY: 1e-3}'))
    assert cfg.OPT.WEIGHT_DECAY == '1e-3'  # what YAML 1.1 makes of it
    with pytest.raises(ConfigError) as e:
        things.build(cfg.OPT)
    assert (
        str(e.value)
        == "OPT.WEIGHT_DECAY: expected a number (like 0.0), got '1e-3'; that is a string, not a number: give the number"
        ' 1e-3 (unquoted; 1.0e-3 where a YAML 1.1 loader reads it)'
    )
    with pytest.raises(ConfigError, match=r'give the number 2e5 \(unquoted; 2\.0e\+5 where'):
        things.build({'NAME': 'Opt', 'STEPS': '2e5'})
    assert things.build(yaml.safe_load('{NAME: Opt, WEIGHT_DECAY: 1.0e-3}')).cfg.WEIGHT_DECAY == 1e-3


def test_config_files_and_overrides_read_exponent_numbers_as_yaml_1_2_does(tmp_path):
    from scepter_like.config import apply_overrides, parse_override

    path = tmp_path / 'opt.yaml'
    path.write_text('OPT: {WEIGHT_DECAY: 5e-4, LR: 1E+2, STEPS: 2e5, NOTE: 5e, QUOTED: "1e-3", PLAIN: 1.0e-3}\n')
    cfg = Config(cfg_file=str(path))
    assert cfg.OPT.to_dict() == {
        'WEIGHT_DECAY': 5e-4,
        'LR': 100.0,
        'STEPS': 2e5,
        'NOTE': '5e',
        'QUOTED': '1e-3',
        'PLAIN': 1e-3,
    }
    assert parse_override('OPT.WEIGHT_DECAY=1e-3')[1] == 1e-3 and parse_override('OPT.N=1e3')[1] == 1000.0
    apply_overrides(cfg, ['OPT.LR=3e-4'])
    assert cfg.OPT.LR == 3e-4 and isinstance(cfg.OPT.LR, float)


# -- names ---------------------------------------------------------------------------------------------
def test_non_string_name_and_misuse_are_one_registry_error(things):
    with pytest.raises(
        RegistryError, match=r"^X.NAME: NAME must be a string naming an entry of THINGS, got \['a', 'b'\]"
    ):
        things.build(Config({'X': {'NAME': ['a', 'b']}}).X)
    with pytest.raises(RegistryError, match='with parentheses'):

        @things.register_class
        class Bare:
            pass

    with pytest.raises(RegistryError, match='a registered name must be a non-empty string'):
        things.register_class(['Alias'])(type('Listed', (), {}))


def test_user_module_replaces_a_builtin_with_one_warning_line(tmp_path):
    user = write(tmp_path / 'my_log.py', OVERRIDING_HOOK_FILE)
    res = run_tool('config_template.py', '--import', user, 'LogHook', cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load(res.stdout) == {'NAME': 'LogHook', 'PRIORITY': 100, 'EVERY': 3}  # the user's LogHook
    assert 'EVERY: 3  # my own key [at least 1]' in res.stdout  # its declared range shown
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "HOOKS: 'LogHook' now names _scepter_user_my_log.LogHook, replacing" in lines[0]


# -- a scepter hook through tools/run_train.py ----------------------------------------------------------
def digits_with_hook(tmp_path, **hook_keys):
    cfg = {
        '_BASE_': DIGITS_CFG,
        'SOLVER': {
            'WORK_DIR': str(tmp_path / 'run'),
            'MAX_EPOCHS': 1,
            'MAX_STEPS': 12,
            'EVAL_DATA': None,
            'TEST_DATA': None,
            'TRAIN_HOOKS': [
                {'NAME': 'BackwardHook'},
                {'NAME': 'LogHook', 'LOG_INTERVAL': 5},
                {'NAME': 'StepRecordHook', **hook_keys},
            ],
        },
    }
    path = tmp_path / 'scepter_style.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_scepter_style_hook_runs_through_run_train(tmp_path):
    hook_file = write(tmp_path / 'record_hook.py', SCEPTER_HOOK_FILE)
    cfg = digits_with_hook(tmp_path, INTERVAL=4.0)  # a whole float for the int INTERVAL
    res = run_cli('run_train.py', '--cfg', cfg, '--import', hook_file, 'SOLVER.LR_SCHEDULER=', cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    with open(tmp_path / 'run' / 'records' / 'steps.json') as f:
        record = json.load(f)
    assert len(record['steps']) == 12 and record['steps'] == sorted(set(record['steps']))  # one call per step
    assert record['interval'] == 4 and record['world_size'] == 1
    mean_recent, mean_all = record['loss']
    assert 0 < mean_recent < 5 and 0 < mean_all < 5
    assert yaml.safe_load(record['template']) == {
        'NAME': 'StepRecordHook',
        'PRIORITY': 250,
        'INTERVAL': 5,
        'SAVE_NAME': 'steps.json',
    }
    assert not [n for n in os.listdir(tmp_path / 'run' / 'records') if n != 'steps.json']  # no temporary left


def test_declared_range_and_a_number_in_quotes_end_run_train_with_one_error_line(tmp_path):
    hook_file = write(tmp_path / 'record_hook.py', SCEPTER_HOOK_FILE)
    cfg = digits_with_hook(tmp_path)
    for override, message in [
        ('SOLVER.TRAIN_HOOKS.2.INTERVAL=0', 'error: SOLVER.TRAIN_HOOKS[2].INTERVAL: must be at least 1, got 0'),
        ('SOLVER.OPTIMIZER.WEIGHT_DECAY="5e-4"', "got '5e-4'; that is a string, not a number: give the number 5e-4"),
    ]:
        res = run_cli('run_train.py', '--cfg', cfg, '--import', hook_file, override, cwd=tmp_path)
        assert res.returncode == 2, res.stderr[-2000:]
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith('error: ') and message in lines[0], res.stderr
        assert 'Traceback' not in res.stdout + res.stderr


# -- Config ---------------------------------------------------------------------------------------------
def test_config_takes_scepters_arguments_and_methods(tmp_path):
    cfg = Config(load=False, cfg_dict={'A': {'B': 1}})
    assert cfg.have('A') and not cfg.have('C') and cfg.A.have('B')
    plain = cfg.get_dict()
    plain['A']['B'] = 2
    assert cfg.A.B == 1 and plain == {'A': {'B': 2}}
    cfg.set('C', [1])
    assert cfg.C == [1]
    path = tmp_path / 'c.yaml'
    path.write_text('X: 3\n')
    assert Config(load=True, cfg_file=str(path)).X == 3
    assert Config(load=False, cfg_file=str(path)) == {}  # scepter's load=False reads no file
    with pytest.raises(ConfigError, match=r'Config\(load=True\) needs cfg_file'):
        Config(load=True)


def test_dict_to_yaml_renders_both_forms():
    from scepter_like.utils.config import dict_to_yaml

    para = [{'A': {'value': 1, 'description': 'first'}, 'B': {'value': [1, 2], 'description': 'second'}}]
    text = dict_to_yaml('HOOK', 'MyHook', para, set_name=True)
    assert text.startswith('# HOOK\n') and yaml.safe_load(text) == {'NAME': 'MyHook', 'A': 1, 'B': [1, 2]}
    assert yaml.safe_load(dict_to_yaml('HOOK', 'MyHook', para[0], exclude_keys=['B'])) == {'A': 1}


# -- FS, data, logger utilities ------------------------------------------------------------------------
def test_a_scepter_dataset_naming_a_remote_file_system_is_one_error_before_anything_is_read(tmp_path):
    from scepter_like.config import Config
    from scepter_like.data.loader import build_data
    from scepter_like.utils.distributed import DistInfo

    cfg = Config({'SOLVER': {'TRAIN_DATA': {'NAME': 'ImageClassifyPublicDataset', 'BATCH_SIZE': 4}}})
    data = cfg.SOLVER.TRAIN_DATA
    data['FILE_SYSTEM'] = [{'NAME': 'LocalFs'}, {'NAME': 'ModelscopeFs', 'TEMP_DIR': str(tmp_path)}]
    single = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device('cpu'), backend='gloo')
    with pytest.raises(ConfigError, match=r"^SOLVER\.TRAIN_DATA\.FILE_SYSTEM: 'ModelscopeFs' is not supported;"):
        build_data(data, 'train', single, seed=0)


def test_fs_reads_and_writes_local_files_atomically(tmp_path):
    from scepter_like.utils.file_system import FS

    target = str(tmp_path / 'a' / 'b.bin')
    assert not FS.exists(target) and FS.make_dir(str(tmp_path / 'a')) and FS.isdir(str(tmp_path / 'a'))
    assert FS.put_object(b'one', target) and FS.get_object(target) == b'one'
    with pytest.raises(RuntimeError):
        with FS.put_to(target) as local:
            with open(local, 'wb') as f:
                f.write(b'half')
            raise RuntimeError('crash while writing')
    assert FS.get_object(f'file://{target}') == b'one' and os.listdir(tmp_path / 'a') == ['b.bin']
    with FS.put_to(target) as local:
        assert local.endswith('.bin') and local != target
        with open(local, 'wb') as f:
            f.write(b'two')
    with FS.get_from(target) as local:
        assert open(local, 'rb').read() == b'two'
    copy = FS.get_from(target, local_path=str(tmp_path / 'copy.bin'))
    assert open(copy, 'rb').read() == b'two' and FS.size(copy) == 3
    link = str(tmp_path / 'latest')
    assert FS.make_link(link, target) and os.path.realpath(link) == os.path.realpath(target)
    with FS.get_fs_client(target) as client:
        assert client.map_to_local(target) == (target, False)
    with pytest.raises(DataError, match='file not found'):
        FS.get_object(str(tmp_path / 'missing'))
    for remote in ('oss://bucket/x.pth', 'http://host/x.pth', 'https://host/x'):
        with pytest.raises(ConfigError, match='remote paths .* are not supported'):
            FS.exists(remote)
    with pytest.raises(ConfigError, match="'AliyunOssFs' is not supported"):
        FS.init_fs_client(Config({'NAME': 'AliyunOssFs'}))


def test_transfer_data_moves_nested_tensors_and_never_forces_cuda():
    from scepter_like.utils.data import transfer_data_to_cpu, transfer_data_to_cuda

    batch = {'img': torch.ones(2, 3, requires_grad=True) * 2, 'meta': {'ids': [torch.arange(2), 'x']}, 'n': 3}
    cpu = transfer_data_to_cpu(batch)
    assert not cpu['img'].requires_grad and cpu['meta']['ids'][1] == 'x' and cpu['n'] == 3
    moved = transfer_data_to_cuda(cpu)
    if torch.cuda.is_available():
        assert moved['img'].device == torch.device('cuda', torch.cuda.current_device())
        assert moved['meta']['ids'][0].is_cuda
    else:
        assert moved is cpu  # nothing to move to


def test_log_agg_and_time_since():
    from scepter_like.utils.logger import LogAgg, time_since

    agg = LogAgg()
    for step in range(4):
        agg.update({'loss': torch.tensor(float(step)), 'lr': 0.5, 'vec': torch.ones(3), 'tag': 'x'}, 1)
    out = agg.aggregate(2)
    assert out == {'loss': (2.5, 1.5), 'lr': (0.5, 0.5)}
    agg.reset()
    assert agg.aggregate(2) == {}
    text = time_since(0, 0.5)
    assert '50.00%' in text and 'secs' in text


# -- module paths after the rename ------------------------------------------------------------------------
def test_scepter_module_paths_resolve():
    from scepter_like.data.dataset import DATASETS, BaseDataset
    from scepter_like.data.dataset.base_dataset import BaseDataset as BaseDataset2
    from scepter_like.data.dataset.registry import DATASETS as DATASETS2
    from scepter_like.model.base_model import BaseModel
    from scepter_like.model.metric import METRICS, BaseMetric
    from scepter_like.model.metric.registry import METRICS as METRICS2
    from scepter_like.model.registry import BACKBONES, HEADS, LOSSES, MODELS, NECKS
    from scepter_like.model.registry import METRICS as METRICS3
    from scepter_like.opt.lr_schedulers import LR_SCHEDULERS
    from scepter_like.opt.lr_schedulers.base_scheduler import BaseScheduler
    from scepter_like.opt.optimizers import OPTIMIZERS
    from scepter_like.transform import TRANSFORMS, ImageTransform
    from scepter_like.transform.registry import TRANSFORMS as TRANSFORMS2
    from scepter_like.transform.registry import build_pipeline

    assert TRANSFORMS is TRANSFORMS2 and issubclass(TRANSFORMS.get('Resize'), ImageTransform) and build_pipeline
    assert BACKBONES is MODELS and NECKS is MODELS and HEADS is MODELS and LOSSES.name == 'LOSSES'
    assert METRICS is METRICS2 is METRICS3 and DATASETS is DATASETS2 and BaseDataset is BaseDataset2
    assert issubclass(BaseModel, torch.nn.Module) and BaseMetric and BaseScheduler
    assert 'CosineAnnealingLR' in LR_SCHEDULERS and 'SGD' in OPTIMIZERS


def test_scepter_shaped_components_build():
    """A backbone, a callable metric, a build-then-call scheduler and optimizer, a dataset, scepter's way."""
    from scepter_like.data.dataset import DATASETS, BaseDataset
    from scepter_like.data.loader import build_data
    from scepter_like.model.base_model import BaseModel
    from scepter_like.model.metric import METRICS, BaseMetric
    from scepter_like.model.registry import BACKBONES, MODELS
    from scepter_like.opt.lr_schedulers import LR_SCHEDULERS, BaseScheduler, build_lr_scheduler
    from scepter_like.opt.optimizers import OPTIMIZERS, BaseOptimize, build_optimizer
    from scepter_like.utils.distributed import DistInfo

    @BACKBONES.register_class('CompatTinyMLP')
    class TinyMLP(BaseModel):
        para_dict = {'IN_DIM': {'value': [4, 3], 'description': 'dims'}}

        def __init__(self, cfg, logger=None):
            super(TinyMLP, self).__init__(cfg, logger=logger)  # noqa: UP008  (scepter's style)
            self.fc = torch.nn.Linear(cfg.IN_DIM[0], cfg.IN_DIM[1])

        def forward(self, x):
            return self.fc(x)

    @METRICS.register_class('CompatTopAccuracy')
    class TopAccuracy(BaseMetric):
        para_dict = [{'TOPK': {'value': 1, 'description': 'topk accuracy!'}}]

        def __call__(self, logits, labels):
            return {f'acc@{self.cfg.TOPK}': (logits.argmax(-1) == labels).float().mean()}

    @LR_SCHEDULERS.register_class('CompatWarmup')
    class Warmup(BaseScheduler):
        para_dict = {'WARMUP_STEPS': {'value': 10, 'description': 'warmup steps', 'min': 1}}

        def __call__(self, optimizer):
            steps = self.cfg.WARMUP_STEPS
            return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, step / steps))

    @OPTIMIZERS.register_class('CompatSGD')
    class PlainSGD(BaseOptimize):
        para_dict = {'LEARNING_RATE': {'value': 0.1, 'description': 'lr', 'above': 0}}

        def __call__(self, parameters):
            return torch.optim.SGD(parameters, lr=self.cfg.LEARNING_RATE)

    @DATASETS.register_class('CompatPairs')
    class Pairs(BaseDataset):
        para_dict = {'SIZE': {'value': 6, 'description': 'items'}}
        para_dict.update(BaseDataset.para_dict)

        def __len__(self):
            return self.cfg.SIZE

        def _get(self, index):
            return {'meta': {}, 'img': torch.full((4,), float(index)), 'label': torch.tensor(index % 3)}

    try:
        model = MODELS.build({'NAME': 'CompatTinyMLP'})
        metric = METRICS.build({'NAME': 'CompatTopAccuracy', 'KEYS': ['logits', 'label']})
        assert metric.cfg.KEYS == ['logits', 'label']  # KEYS comes from BaseMetric
        data = DATASETS.build({'NAME': 'CompatPairs', 'MODE': 'eval'})
        assert len(data) == 6 and data[4]['label'] == 1 and data.mode == 'eval'
        with pytest.raises(ConfigError, match="MODE: must be one of 'train', 'eval', 'test', got 'val'"):
            DATASETS.build({'NAME': 'CompatPairs', 'MODE': 'val'})
        rename = [{'NAME': 'Rename', 'INPUT_KEY': ['img'], 'OUTPUT_KEY': ['x']}]  # the data config's TRANSFORMS
        cfg = Config({'D': {'NAME': 'CompatPairs', 'BATCH_SIZE': 6, 'SHUFFLE': False, 'TRANSFORMS': rename}}).D
        batch = next(build_data(cfg, 'train', DistInfo(), seed=0).iterate())
        assert set(batch) == {'meta', 'x', 'label'} and torch.equal(batch['x'][4], torch.full((4,), 4.0))
        batch = torch.stack([data[i]['img'] for i in range(6)])
        labels = torch.tensor([data[i]['label'] for i in range(6)])
        assert set(metric(model(batch), labels)) == {'acc@1'}

        optimizer = build_optimizer(Config({'NAME': 'CompatSGD', 'LEARNING_RATE': 1}), model.parameters())
        assert isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]['lr'] == 1.0
        scheduler = build_lr_scheduler(Config({'NAME': 'CompatWarmup', 'WARMUP_STEPS': 4}), optimizer)
        assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR) and optimizer.param_groups[0]['lr'] == 0.0
        torch_one = build_lr_scheduler(Config({'NAME': 'StepLR', 'STEP_SIZE': 2}), optimizer)
        assert isinstance(torch_one, torch.optim.lr_scheduler.StepLR)
        with pytest.raises(ConfigError, match='WARMUP_STEPS: must be at least 1, got 0'):
            build_lr_scheduler(Config({'NAME': 'CompatWarmup', 'WARMUP_STEPS': 0}), optimizer)
        with pytest.raises(RegistryError) as e:  # built the torch way: one line naming the signature
            LR_SCHEDULERS.build(Config({'X': {'NAME': 'CompatWarmup'}}).X, optimizer=optimizer)
        assert str(e.value) == (
            'X: LR_SCHEDULERS.CompatWarmup cannot be built as (cfg, logger=..., optimizer=...):'
            " got an unexpected keyword argument 'optimizer'; its signature is (cfg, logger=None)"
        )
    finally:  # leave the process-wide registries as they were
        for registry, name in [
            (MODELS, 'CompatTinyMLP'),
            (METRICS, 'CompatTopAccuracy'),
            (LR_SCHEDULERS, 'CompatWarmup'),
            (OPTIMIZERS, 'CompatSGD'),
            (DATASETS, 'CompatPairs'),
        ]:
            registry._entries.pop(name, None)


# -- we, barrier and gather_data under torchrun ------------------------------------------------------------
DIST_SCRIPT = """
import os, sys, json
import torch
import torch.distributed as dist
from scepter_like.utils.distribute import barrier, gather_data, we

assert not we.is_distributed and we.rank == int(os.environ['RANK']) and we.world_size == 2
dist.init_process_group('gloo')
rank = dist.get_rank()
assert we.is_distributed and we.rank == rank and we.world_size == 2 and we.backend == 'gloo'
assert we.device_id == 'cpu' and we.local_rank == rank
tensor = gather_data(torch.full((rank + 1, 2), float(rank)))
nested = gather_data({'b': [rank, rank], 'a': torch.tensor([rank * 10])})
objects = gather_data(f'r{rank}')
barrier()
out = {'tensor': None if tensor is None else tensor.tolist(),
       'nested': {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in nested.items()},
       'keys': list(nested),
       'objects': objects}
with open(os.path.join(sys.argv[1], f'rank{rank}.json'), 'w') as f:
    json.dump(out, f)
dist.destroy_process_group()
"""


def test_we_reads_the_live_process_group_and_gather_data_collects_on_rank0(tmp_path):
    script = write(tmp_path / 'dist_we.py', DIST_SCRIPT)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}', script]
    res = subprocess.run(
        cmd + [str(tmp_path)], cwd=tmp_path, env=tool_env(), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rank0 = json.loads((tmp_path / 'rank0.json').read_text())
    rank1 = json.loads((tmp_path / 'rank1.json').read_text())
    assert rank0['tensor'] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]  # lengths 1 and 2, in rank order
    assert rank0['nested'] == {'a': [0, 10], 'b': [0, 0, 1, 1]} and rank0['keys'] == ['a', 'b']
    assert rank0['objects'] == ['r0', 'r1']
    assert rank1 == {'tensor': None, 'nested': {'a': None, 'b': None}, 'keys': ['a', 'b'], 'objects': None}


# -- scepter's solver protocol: counters --------------------------------------------------------------------
def test_counter_views_have_scepters_offsets_and_progress_keeps_this_projects(tmp_path):
    """The table in docs/porting_from_scepter.md ("Counters"), stage by stage."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    npz = write_blobs(tmp_path / 'blobs.npz', n=64)
    data = {'NAME': 'NpzDataset', 'PATH': npz, 'KEY_MAP': {'x': 'img', 'y': 'label'}, 'BATCH_SIZE': 32}
    cfg = blob_solver_cfg(npz, tmp_path / 'w', TRAIN_DATA=data, EVAL_DATA=dict(data, BATCH_SIZE=64))
    solver = build_solver(cfg)
    seen, fired = [], {'steps': [], 'epochs': []}

    def record(stage):
        def fn(s):
            p = s.progress
            seen.append((s.mode, stage, s.epoch, s.iter, s.total_iter, p.epoch, p.iters[s.mode], p.total_iter))
            if s.mode == 'train' and stage == 'after_iter' and (s.total_iter + 1) % 2 == 0:
                fired['steps'].append(s.total_iter + 1)  # a ported hook's "(total_iter + 1) % INTERVAL"
            if s.mode == 'train' and stage == 'after_epoch' and s.epoch % 1 == 0:
                fired['epochs'].append(s.epoch)

        return fn

    for mode in ('train', 'eval'):
        for stage in ('before_epoch', 'before_iter', 'after_iter', 'after_all_iter', 'after_epoch'):
            solver.register_stage_callback(stage, record(stage), mode=mode)
    assert (solver.epoch, solver.iter, solver.total_iter) == (0, 0, 0)
    solver.solve()
    # (mode, stage, scepter's epoch / iter / total_iter, progress.epoch / iters[mode] / total_iter)
    assert seen == [
        ('train', 'before_epoch', 0, 0, 0, 0, 0, 0),
        ('train', 'before_iter', 1, 0, 0, 0, 0, 0),
        ('train', 'after_iter', 1, 0, 0, 0, 1, 1),
        ('train', 'before_iter', 1, 1, 1, 0, 1, 1),
        ('train', 'after_iter', 1, 1, 1, 0, 2, 2),
        ('train', 'after_all_iter', 1, 2, 2, 0, 2, 2),
        ('train', 'after_epoch', 1, 2, 2, 0, 2, 2),
        ('eval', 'before_epoch', 1, 0, 2, 0, 0, 2),
        ('eval', 'before_iter', 1, 0, 2, 0, 0, 2),
        ('eval', 'after_iter', 1, 0, 2, 0, 1, 2),
        ('eval', 'after_all_iter', 1, 1, 2, 0, 1, 2),
        ('eval', 'after_epoch', 1, 1, 2, 0, 1, 2),
        ('train', 'before_epoch', 1, 0, 2, 1, 0, 2),
        ('train', 'before_iter', 2, 0, 2, 1, 0, 2),
        ('train', 'after_iter', 2, 0, 2, 1, 1, 3),
        ('train', 'before_iter', 2, 1, 3, 1, 1, 3),
        ('train', 'after_iter', 2, 1, 3, 1, 2, 4),
        ('train', 'after_all_iter', 2, 2, 4, 1, 2, 4),
        ('train', 'after_epoch', 2, 2, 4, 1, 2, 4),
        ('eval', 'before_epoch', 2, 0, 4, 1, 0, 4),
        ('eval', 'before_iter', 2, 0, 4, 1, 0, 4),
        ('eval', 'after_iter', 2, 0, 4, 1, 1, 4),
        ('eval', 'after_all_iter', 2, 1, 4, 1, 1, 4),
        ('eval', 'after_epoch', 2, 1, 4, 1, 1, 4),
    ]
    assert fired == {'steps': [2, 4], 'epochs': [1, 2]}  # the steps and epochs scepter's checks fire on
    assert (solver.epoch, solver.total_iter, solver.progress.epoch) == (2, 4, 2)


# -- scepter-style solver, metric, scheduler and hook through tools/run_train.py -------------------------------
SCEPTER_SOLVER_FILE = """
# -*- coding: utf-8 -*-
import json
import logging
import math
import os.path as osp
from collections import OrderedDict, defaultdict

import torch
import torch.optim.lr_scheduler as lr_scheduler
from scepter_like.model.metric.base_metric import BaseMetric
from scepter_like.model.metric.registry import METRICS
from scepter_like.opt.lr_schedulers import LR_SCHEDULERS
from scepter_like.opt.lr_schedulers.base_scheduler import BaseScheduler
from scepter_like.solver.base_solver import BaseSolver
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.registry import SOLVERS
from scepter_like.utils.config import dict_to_yaml
from scepter_like.utils.data import transfer_data_to_cpu, transfer_data_to_cuda
from scepter_like.utils.distribute import gather_data, we
from scepter_like.utils.file_system import FS


@METRICS.register_class()
class TopOneAccuracy(BaseMetric):
    para_dict = [{'PREFIX': {'value': 'acc', 'description': 'the key prefix!'}}]

    def __init__(self, cfg, logger=None):
        super(TopOneAccuracy, self).__init__(cfg, logger=logger)
        self.prefix = cfg.get('PREFIX', 'acc')

    @torch.no_grad()
    def __call__(self, logits, labels):
        res = OrderedDict()
        res[f'{self.prefix}@1'] = (logits.argmax(dim=-1) == labels).float().mean()
        return res


@LR_SCHEDULERS.register_class()
class LinearWarmup(BaseScheduler):
    para_dict = {'WARMUP_STEPS': {'value': 4, 'description': 'warmup steps'}}

    def __init__(self, cfg, logger=None):
        super(LinearWarmup, self).__init__(cfg, logger=logger)
        warmup_steps = cfg.get('WARMUP_STEPS', 4)
        self.warmup_func = lambda step: min(1.0, (step + 1) / warmup_steps)

    def __call__(self, optimizer):
        return lr_scheduler.LambdaLR(optimizer, lr_lambda=[self.warmup_func])


@HOOKS.register_class()
class IntervalRecordHook(Hook):
    para_dict = [{
        'PRIORITY': {'value': 250, 'description': 'the priority for processing!'},
        'INTERVAL': {'value': 4, 'description': 'the step interval!'},
        'EPOCH_INTERVAL': {'value': 1, 'description': 'the epoch interval!'},
        'SAVE_NAME': {'value': 'record.json', 'description': 'the file under WORK_DIR!'}
    }]

    def __init__(self, cfg, logger=None):
        super(IntervalRecordHook, self).__init__(cfg, logger=logger)
        self.interval = cfg.get('INTERVAL', 4)
        self.epoch_interval = cfg.get('EPOCH_INTERVAL', 1)
        self.save_name = cfg.get('SAVE_NAME', 'record.json')
        self.record = defaultdict(list)

    def after_iter(self, solver):
        if solver.is_train_mode:
            self.record['lr'].append(solver.optimizer.param_groups[0]['lr'])
            self.record['scaler'].append(solver.scaler is None)
            self.record['params'].append(len(solver.train_parameters()))
            if (solver.total_iter + 1) % self.interval == 0:
                self.record['steps'].append(solver.total_iter + 1)
        elif solver.is_eval_mode:
            self.record['eval_iters'].append([solver.iter, solver.epoch_max_iter])

    def after_epoch(self, solver):
        if solver.is_train_mode and solver.epoch % self.epoch_interval == 0:
            self.record['epochs'].append(
                [solver.epoch, solver.iter, solver.epoch_max_iter, solver._total_iter['train']])
        if solver.is_eval_mode:
            self.record['eval'].append(dict(solver.epoch_outputs['eval']))

    def after_solve(self, solver):
        if we.rank == 0:
            with FS.put_to(osp.join(solver.work_dir, self.save_name)) as local_path:
                with open(local_path, 'w') as f:
                    json.dump(dict(self.record, template=IntervalRecordHook.get_config_template()), f)

    @staticmethod
    def get_config_template():
        return dict_to_yaml('HOOK', __class__.__name__, IntervalRecordHook.para_dict, set_name=True)


@SOLVERS.register_class()
class ScepterStyleSolver(BaseSolver):
    para_dict = {
        'DO_FINAL_EVAL': {'value': False, 'description': 'If do final evaluation or not.'}
    }
    para_dict.update(BaseSolver.para_dict)

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger=logger)
        assert not self.use_pl and self.accu_step == 1

    def construct_metrics(self):
        super().construct_metrics()
        self.metrics = []
        self._collect_keys = set()
        self.do_final_eval = self.cfg.get('DO_FINAL_EVAL', False)
        if self.do_final_eval:
            self._build_metrics(self.cfg.METRICS)
        self._collect_keys = sorted(list(self._collect_keys))

    @torch.no_grad()
    def run_eval(self):
        self.eval_mode()
        collect_data = defaultdict(list)
        self.before_all_iter(self.hooks_dict[self._mode])
        for data in self.datas[self._mode].dataloader:
            self.before_iter(self.hooks_dict[self._mode])
            data_gpu = transfer_data_to_cuda(data)
            result = self.model(**data_gpu)
            self._iter_outputs[self._mode] = self._reduce_scalar(result)
            data_gpu.update(result)
            step_data = transfer_data_to_cpu({key: data_gpu[key] for key in self._collect_keys})
            for key, value in step_data.items():
                collect_data[key].append(value.clone())
            self.after_iter(self.hooks_dict[self._mode])
        self.after_all_iter(self.hooks_dict[self._mode])
        concat = {key: torch.cat(tensors) for key, tensors in collect_data.items()}
        if we.world_size > 1:
            concat = {key: gather_data(concat[key]) for key in self._collect_keys}
        if self.do_final_eval and we.rank == 0:
            for metric in self.metrics:
                self._epoch_outputs[self._mode].update(metric['fn'](*[concat[key] for key in metric['keys']]))

    def load_checkpoint(self, checkpoint: dict):
        self._epoch = checkpoint['epoch']
        for mode_name, total_iter in checkpoint['total_iters'].items():
            self._total_iter[mode_name] = total_iter
        self.model.load_state_dict(checkpoint['state_dict'])
        self.optimizer.load_state_dict(checkpoint['checkpoint'])
        if self.lr_scheduler is not None:
            self.lr_scheduler.load_state_dict(checkpoint['lr_scheduler'])
        self._epoch += 1  # Move to next epoch
        with FS.put_to(osp.join(self.work_dir, 'loaded.json')) as local_path:
            with open(local_path, 'w') as f:
                json.dump(sorted(checkpoint), f)

    def save_checkpoint(self) -> dict:
        checkpoint = {
            'epoch': self._epoch,
            'total_iters': self._total_iter,
            'state_dict': self.model.state_dict(),
            'checkpoint': self.optimizer.state_dict(),
        }
        if self.lr_scheduler is not None:
            checkpoint['lr_scheduler'] = self.lr_scheduler.state_dict()
        return checkpoint
"""


def scepter_style_config(tmp_path, work_dir, max_epochs, **solver_keys):
    from helpers import write_blobs

    npz = write_blobs(tmp_path / 'blobs.npz')  # 96 samples: 6 batches of 16
    data = {'NAME': 'NpzDataset', 'PATH': npz, 'KEY_MAP': {'x': 'img', 'y': 'label'}, 'BATCH_SIZE': 16}
    solver = {
        'NAME': 'ScepterStyleSolver',
        'WORK_DIR': str(work_dir),
        'MAX_EPOCHS': max_epochs,
        'DO_FINAL_EVAL': True,
        'MODEL': {'NAME': 'Classifier', 'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 8, 'HIDDEN_DIMS': [16], 'OUT_DIM': 3}},
        'OPTIMIZER': {'NAME': 'SGD', 'LEARNING_RATE': 0.2, 'WEIGHT_DECAY': '5e-4'},  # YAML 1.2 reads a float
        'LR_SCHEDULER': {'NAME': 'LinearWarmup', 'WARMUP_STEPS': 4},
        'TRAIN_DATA': data,
        'EVAL_DATA': dict(data, SHUFFLE=False),
        'METRICS': [{'NAME': 'TopOneAccuracy', 'KEYS': ['logits', 'label']}],
        'TRAIN_HOOKS': [
            {'NAME': 'BackwardHook'},
            {'NAME': 'IntervalRecordHook', 'INTERVAL': 4},
            {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'SAVE_BEST': False},
        ],
        'EVAL_HOOKS': [{'NAME': 'IntervalRecordHook', 'SAVE_NAME': 'eval_record.json'}],
        **solver_keys,
    }
    path = tmp_path / f'scepter_style_{max_epochs}.yaml'
    text = yaml.safe_dump({'ENV': {'SEED': 0, 'NUM_THREADS': 1, 'USE_PL': False}, 'SOLVER': solver})
    path.write_text(text.replace("'5e-4'", '5e-4'))
    return str(path)


def test_scepter_style_solver_metric_scheduler_and_hook_train_and_resume_through_run_train(tmp_path):
    code = write(tmp_path / 'scepter_style.py', SCEPTER_SOLVER_FILE)
    first = run_cli('run_train.py', '--cfg', scepter_style_config(tmp_path, tmp_path / 'a', 1), '--import', code)
    assert first.returncode == 0, first.stderr[-3000:]
    record = json.loads((tmp_path / 'a' / 'record.json').read_text())
    assert record['steps'] == [4]  # (total_iter + 1) % 4 fires at the 4th step, as in scepter
    assert record['epochs'] == [[1, 6, 6, 6]]  # after_epoch: epoch 1 (scepter's), 6 of 6 iterations, 6 steps
    eval_record = json.loads((tmp_path / 'a' / 'eval_record.json').read_text())
    assert eval_record['eval_iters'] == [[i, 6] for i in range(6)]  # counted by the stage calls, scepter's way
    lrs = record['lr']
    assert lrs[:4] == sorted(lrs[:4]) and lrs[0] < lrs[3] == lrs[5] == pytest.approx(0.2)  # warmed up per step
    assert all(record['scaler']) and set(record['params']) == {4}
    acc = eval_record['eval'][0]['acc@1']
    assert 0 < acc <= 1 and yaml.safe_load(record['template'])['INTERVAL'] == 4
    ckpt = torch.load(tmp_path / 'a' / 'checkpoints' / 'checkpoint-epoch-1.pth', weights_only=True)
    assert sorted(ckpt) == ['checkpoint', 'epoch', 'lr_scheduler', 'state_dict', 'total_iters']  # the solver's dict
    assert ckpt['epoch'] == 1 and ckpt['total_iters'] == {'train': 6, 'eval': 6, 'test': 6}
    evals = [json.loads(line) for line in (tmp_path / 'a' / 'metrics.jsonl').read_text().splitlines()]
    assert [r['values'] for r in evals if r['kind'] == 'eval'] == [{'acc@1': acc}]

    resume = f'SOLVER.RESUME_FROM={tmp_path / "a" / "checkpoints" / "checkpoint-epoch-1.pth"}'
    cfg = scepter_style_config(tmp_path, tmp_path / 'b', 2)
    second = run_cli('run_train.py', '--cfg', cfg, '--import', code, resume)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((tmp_path / 'b' / 'loaded.json').read_text()) == sorted(ckpt)  # its load_checkpoint(dict)
    record = json.loads((tmp_path / 'b' / 'record.json').read_text())
    assert record['steps'] == [8, 12] and record['epochs'] == [[2, 6, 6, 12]]  # epoch 2 only, steps 7..12
    assert record['lr'] == [pytest.approx(0.2)] * 6  # the scheduler's state came back
    assert torch.load(tmp_path / 'b' / 'checkpoints' / 'checkpoint-epoch-2.pth', weights_only=True)['epoch'] == 2
    # its weights sit under 'state_dict', scepter's key: evaluating the file reads them there
    epoch_2 = tmp_path / 'b' / 'checkpoints' / 'checkpoint-epoch-2.pth'
    evaluated = run_cli('run_eval.py', '--cfg', cfg, '--import', code, '--checkpoint', str(epoch_2))
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert f'loaded model weights from {epoch_2}' in evaluated.stdout


# -- scepter's components in this project's TrainValSolver ---------------------------------------------------
def test_train_val_solver_runs_a_scepter_metric_beside_its_own_and_saves_the_eval_data(tmp_path):
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.model.metric import METRICS, BaseMetric

    @METRICS.register_class('CompatPassAccuracy')
    class PassAccuracy(BaseMetric):
        para_dict = [{'PREFIX': {'value': 'acc', 'description': 'the key prefix!'}}]

        def __call__(self, logits, labels):
            assert logits.shape == (96, 3)  # the whole pass at once
            return {f'{self.cfg.PREFIX}@1': (logits.argmax(-1) == labels).float().mean()}

    npz = write_blobs(tmp_path / 'blobs.npz')
    model = {
        'NAME': 'Classifier',
        'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 8, 'HIDDEN_DIMS': [16], 'OUT_DIM': 16},
        'HEAD': {'NAME': 'ClassifierHead', 'DIM': 16, 'NUM_CLASSES': 3, 'DROPOUT_RATE': 0.0},
        'ACT_NAME': 'softmax',
        'FREEZE_BN': False,
        'METRIC': {'NAME': 'AccuracyMetric', 'TOPK': 1},
    }
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_BEST_BY': '+acc@1'}]
    metrics = [{'NAME': 'CompatPassAccuracy', 'KEYS': ['logits', 'label']}, {'NAME': 'AccuracyMetric', 'TOPK': 1}]
    cfg = blob_solver_cfg(
        npz, tmp_path / 'w', hooks, MODEL=model, METRICS=metrics, DO_FINAL_EVAL=True, SAVE_EVAL_DATA=True
    )
    try:
        solver = build_solver(cfg)
        assert solver.metric_names('eval') is None  # a scepter metric's names are known once it ran
        train_keys = []
        solver.register_callback_on_iter_end(lambda s: train_keys.append(sorted(s.iter_outputs)))
        solver.solve()
    finally:
        METRICS._entries.pop('CompatPassAccuracy', None)
    outputs = solver.epoch_outputs['eval']
    assert set(outputs) == {'acc@1', 'accuracy'} and outputs['acc@1'] == pytest.approx(outputs['accuracy'])
    assert isinstance(outputs['acc@1'], float) and solver.metric_names('eval') == ['acc@1', 'accuracy']
    assert train_keys[0] == ['accuracy', 'loss']  # the model's METRIC joins the step's outputs
    assert os.path.isfile(tmp_path / 'w' / 'checkpoints' / 'checkpoint-best.pth')  # SAVE_BEST_BY a scepter metric
    saved = torch.load(tmp_path / 'w' / 'eval_00002.pth', weights_only=True)
    assert saved['logits'].shape == (96, 3) and saved['label'].shape == (96,)
    assert torch.allclose(saved['logits'].sum(-1), torch.ones(96))  # ACT_NAME: softmax


def test_scepter_hook_list_stage_calls_count_and_reduce_scalar_hands_over_the_loss(tmp_path):
    from helpers import blob_solver_cfg, build_solver, write_blobs

    solver = build_solver(blob_solver_cfg(write_blobs(tmp_path / 'blobs.npz'), tmp_path / 'w'))
    solver.train_mode()
    hooks = solver.hooks_dict['train']
    loss = torch.tensor(2.0, requires_grad=True) * 1.5
    solver.before_iter(hooks)
    assert solver.is_train_mode and (solver.iter, solver.total_iter, solver.epoch) == (0, 0, 1)
    out = solver._reduce_scalar({'loss': loss, 'logits': torch.ones(2, 3), 'n': 3})
    assert solver.loss is loss and not out['loss'].requires_grad and list(out) == ['logits', 'loss', 'n']
    solver._iter_outputs[solver.mode] = out
    assert sorted(solver.iter_outputs) == ['logits', 'loss', 'n'] and solver.iter_outputs['n'].dim() == 0
    solver.after_iter(hooks)  # BackwardHook steps; the counts advance after the hooks, scepter's way
    assert solver.loss is None and (solver.iter, solver.total_iter, solver.progress.optimizer_steps) == (1, 1, 1)
    assert solver.collect_log_vars() == {'pg0_lr': 0.1}  # scepter's keys, in train mode
    solver.eval_mode()
    assert solver.is_eval_mode and not solver.model.training and solver._epoch_outputs['eval'] == {}
    assert dict(solver._total_iter) == {'train': 1, 'eval': 1, 'test': 1} and solver._epoch_max_iter['eval'] == 6
    state, metadata = solver.save_safetensors()
    assert set(state) == set(solver.unwrapped_model.state_dict()) and metadata['step'] == '1'
    assert solver.probe_data == {} and solver.use_fsdp is False
    solver._total_iter['eval'] += 1  # scepter counts per mode; here every mode shows the train count
    assert dict(solver._total_iter) == {'train': 1, 'eval': 1, 'test': 1} and solver.progress.total_iter == 1
    solver.train_mode()
    solver.before_iter(hooks)
    assert solver.step.index == 1  # a hook-list step knows its index (a loss aggregator's weights follow it)


def test_a_scepter_metric_value_that_is_not_one_number_and_a_missing_eval_metric_are_errors():
    from types import SimpleNamespace

    from scepter_like.metric.whole_pass import WholePassMetric
    from scepter_like.solver.hooks.hook import eval_metric

    def per_class(pred, label):
        return {'accuracy': torch.tensor([0.5, 0.7])}

    metric = WholePassMetric(per_class, ['pred', 'label'])
    metric.update({'pred': torch.zeros(2), 'label': torch.zeros(2)})
    with pytest.raises(DataError, match=r"per_class returned a tensor of shape \[2\] as 'accuracy'; a metric"):
        metric.compute()
    solver = SimpleNamespace(epoch_outputs={})
    assert eval_metric(solver, 'f1', 'EVAL_HOOKS[0].MONITOR') is None  # before any evaluation
    solver.epoch_outputs['eval'] = {'accuracy': 0.9}
    assert eval_metric(solver, 'accuracy', 'X') == 0.9
    with pytest.raises(ConfigError, match=r"EVAL_HOOKS\[0\]\.MONITOR: no eval metric is called 'f1'; .*\['accuracy'\]"):
        eval_metric(solver, 'f1', 'EVAL_HOOKS[0].MONITOR')


# -- IMPORTS of scepter's own files -------------------------------------------------------------------------
RELATIVE_IMPORT_HOOK = """
from ...utils.config import dict_to_yaml
from .hook import Hook
from .registry import HOOKS


@HOOKS.register_class()
class CompatRelativeHook(Hook):
    para_dict = [{'PRIORITY': {'value': 100, 'description': 'p'}}]

    @staticmethod
    def get_config_template():
        return dict_to_yaml('HOOK', __class__.__name__, CompatRelativeHook.para_dict, set_name=True)
"""


def test_a_file_with_relative_imports_loads_inside_the_package_where_they_resolve(tmp_path):
    from scepter_like.solver.hooks.registry import HOOKS
    from scepter_like.utils.imports import import_user_modules

    path = write(tmp_path / 'lr.py', RELATIVE_IMPORT_HOOK)
    try:
        (module,) = import_user_modules([path])
        assert module.__name__ == 'scepter_like.solver.hooks._scepter_user_lr'
        assert yaml.safe_load(HOOKS.get('CompatRelativeHook').get_config_template())['PRIORITY'] == 100
        import scepter_like.solver.hooks.lr as builtin_lr

        assert builtin_lr.LrHook is HOOKS.get('LrHook')  # the package's own lr module untouched
    finally:
        HOOKS._entries.pop('CompatRelativeHook', None)
        sys.modules.pop('scepter_like.solver.hooks._scepter_user_lr', None)
    nowhere = write(tmp_path / 'odd.py', 'from .no_such_module import thing\n')
    with pytest.raises(ConfigError) as e:
        import_user_modules([nowhere])
    assert str(e.value) == (
        f'IMPORTS: {nowhere} uses relative imports (from .no_such_module import ...) that no scepter_like package'
        ' has; write them as absolute imports (from scepter_like.... import ...)'
    )


def test_env_use_pl_is_scepters_switch():
    from scepter_like.solver.environment import resolve_env

    assert resolve_env(Config({'ENV': {'USE_PL': False}, 'SOLVER': {}}).SOLVER).USE_PL is False
    env = resolve_env(Config({'ENV': {'USE_PL': True}, 'SOLVER': {}}).SOLVER)
    assert env.USE_PL is True and env.PL.STRATEGY == 'auto'  # ENV.PL's defaults (tests/test_lightning.py runs it)
    with pytest.raises(ConfigError, match=r'^ENV.PL.STRATGY: unknown key for ENV.PL; did you mean STRATEGY\?'):
        resolve_env(Config({'ENV': {'PL': {'STRATGY': 'ddp'}}, 'SOLVER': {}}).SOLVER)


def test_scepters_train_precision_key_points_at_what_sets_the_precision_here():
    """scepter's BaseSolver declares TRAIN_PRECISION (default 32): the unknown key says what does its work here."""
    from scepter_like.config_check import checked_config

    cfg = Config({'SOLVER': {'NAME': 'TrainValSolver', 'MODEL': {'NAME': 'MLP'}, 'TRAIN_PRECISION': 16}})
    with pytest.raises(ConfigError) as e:
        checked_config(cfg)
    assert str(e.value).startswith(
        "SOLVER.TRAIN_PRECISION: unknown key for SOLVERS.TrainValSolver; TRAIN_PRECISION is scepter's BaseSolver key"
        ' (its Lightning precision); here a train hook {NAME: BackwardHook, USE_AMP: true, AMP_DTYPE: bf16 | fp16}'
        " sets mixed precision and SOLVER.DTYPE the parameters' (float32 | float64)"
    )


def _hook_list_loop_solver(name):
    """A solver class with scepter's own ``run_train`` loop (stage methods called with the hook list), registered
    as ``name``; its ``run_step_train`` sends this process SIGTERM on the step ``signal_at`` names (0: none)."""
    import signal

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.train_val_solver import TrainValSolver

    @SOLVERS.register_class(name)
    class HookListLoopSolver(TrainValSolver):
        signal_at = 0

        def run_train(self):
            assert self.progress.total_iter <= 12, 'MAX_EPOCHS are over and the run goes on'  # not a hang
            self.train_mode()
            self.before_all_iter(self.hooks_dict[self._mode])
            for batch_idx, batch_data in enumerate(self.datas[self._mode].dataloader):
                self.before_iter(self.hooks_dict[self._mode])
                results = self.run_step_train(batch_data, batch_idx, step=self.total_iter, rank=0)
                self._iter_outputs[self._mode] = self._reduce_scalar(results)
                self.after_iter(self.hooks_dict[self._mode])
            self.after_all_iter(self.hooks_dict[self._mode])

        def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
            if step + 1 == self.signal_at:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler only records it: the loop acts at a boundary
            return self.model(**batch_data)

    return HookListLoopSolver


def test_a_scepter_run_train_loop_is_one_epoch_and_stops_on_a_signal_after_its_step(tmp_path):
    """scepter's solve() counts an epoch per run_train; so here, where no native epoch end marks it."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.errors import Preempted
    from scepter_like.solver import SOLVERS

    npz = write_blobs(tmp_path / 'blobs.npz')  # 96 samples, 6 batches of 16
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'SAVE_BEST': False}]
    try:
        cls = _hook_list_loop_solver('CompatHookListLoopSolver')
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'a', hooks, NAME='CompatHookListLoopSolver'))
        solver.solve()  # before the fix: epoch 0 forever
        progress = solver.progress
        assert (progress.total_iter, progress.optimizer_steps, progress.epochs_completed()) == (12, 12, 2)
        evals = [json.loads(line) for line in (tmp_path / 'a' / 'metrics.jsonl').read_text().splitlines()]
        assert [r['epoch'] for r in evals if r['kind'] == 'eval'] == [1, 2]
        saved = sorted(os.listdir(tmp_path / 'a' / 'checkpoints'))
        assert [n for n in saved if n.endswith('.pth')] == ['checkpoint-epoch-1.pth', 'checkpoint-epoch-2.pth']
        solver.close()

        cls.signal_at = 3  # SIGTERM during the third step: the run stops after it, mid-epoch
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'b', hooks, NAME='CompatHookListLoopSolver'))
        with pytest.raises(Preempted) as stop:
            solver.solve()
        assert solver.progress.total_iter == 3 and stop.value.step == 3
        state = torch.load(tmp_path / 'b' / 'checkpoints' / 'preempted-step-3.pth', weights_only=True)
        assert (state['solver']['total_iter'], state['solver']['epoch'], state['solver']['iter']) == (3, 0, 3)
        solver.close()

        cls.signal_at = 0  # MAX_STEPS ends the loop at its step, as it ends the native one (it ran the epoch out)
        cfg = blob_solver_cfg(npz, tmp_path / 'c', hooks, NAME='CompatHookListLoopSolver', MAX_STEPS=8)
        solver = build_solver(cfg)
        solver.solve()
        assert (solver.progress.total_iter, solver.progress.optimizer_steps) == (8, 8)
        solver.close()
    finally:
        SOLVERS._entries.pop('CompatHookListLoopSolver', None)


class DiffusionShapedSolver(BaseSolver):
    """diffusion_solver.py's solve() and run_train, after the rename: a loop over MAX_STEPS calling the stage
    methods with hook lists (``after_own_step``: what a test adds at the end of a step)."""

    def solve(self):
        self.before_solve()
        self.run_train()
        self.after_solve()

    def run_train(self):
        self.train_mode()
        self.before_all_iter(self.hooks_dict[self._mode])
        data_iter = itertools.cycle(self.datas[self._mode].dataloader)
        for step in range(self.max_steps):
            batch_data = next(data_iter)
            self.before_iter(self.hooks_dict[self._mode])
            results = self.run_step_train(batch_data, step, step=self.total_iter, rank=0)
            self._iter_outputs[self._mode] = self._reduce_scalar(results)
            self.after_iter(self.hooks_dict[self._mode])
            self.after_own_step(step)
        self.after_all_iter(self.hooks_dict[self._mode])

    def after_own_step(self, step):
        pass


def test_a_step_based_solve_of_scepters_diffusion_solver_ends_by_itself_at_max_steps(tmp_path):
    """scepter's DiffusionSolver overrides solve() and loops ``for step in range(self.max_steps)`` in run_train,
    evaluating after the last step: the loop ends by itself, then after_all_iter and after_solve run; a
    request_stop ends it at the next step it begins, and solve() goes on."""

    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.hooks import HOOKS, Hook

    stages = []

    @HOOKS.register_class('CompatStageRecord')
    class StageRecord(Hook):
        stop_at = 0

        def after_iter(self, solver):
            stages.append(('after_iter', solver.mode))
            if solver.mode == 'train' and solver.total_iter + 1 == self.stop_at:
                solver.request_stop('enough')

        def after_all_iter(self, solver):
            stages.append(('after_all_iter', solver.mode))

        def after_solve(self, solver):
            stages.append(('after_solve', solver.mode))

    @SOLVERS.register_class('CompatStepSolver')
    class StepSolver(DiffusionShapedSolver):
        def after_own_step(self, step):
            if step == self.max_steps - 1:
                stages.append(('final run_eval', self.mode))

    npz = write_blobs(tmp_path / 'b.npz')  # 6 batches an epoch: 8 steps run into a second pass
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CompatStageRecord'}]
    try:
        for stop_at, steps in ((0, 8), (3, 3)):
            StageRecord.stop_at, stages[:] = stop_at, []
            cfg = blob_solver_cfg(npz, tmp_path / f'w{stop_at}', hooks, NAME='CompatStepSolver', MAX_STEPS=8)
            solver = build_solver(cfg)
            solver.solve()  # was: StopOwnTrainLoop out of solve()
            assert solver.progress.total_iter == solver.progress.optimizer_steps == steps
            ends = [s for s in stages if s[0] != 'after_iter']
            final = [('final run_eval', 'train')] if stop_at == 0 else []
            assert ends == [*final, ('after_all_iter', 'train'), ('after_solve', 'train')]
            solver.close()

        @SOLVERS.register_class('CompatStepSolverTwice')
        class StepSolverTwice(StepSolver):  # its run_train runs its parent's loop, then more steps of its own
            def run_train(self):
                super().run_train()
                StepSolver.run_train(self)

        StageRecord.stop_at, stages[:] = 3, []
        cfg = blob_solver_cfg(npz, tmp_path / 'twice', hooks, NAME='CompatStepSolverTwice', MAX_STEPS=8)
        solver = build_solver(cfg)
        solver.solve()  # the stop ends both loops: after_all_iter once (each run_train had caught it)
        assert [s for s in stages if s[0] != 'after_iter'] == [('after_all_iter', 'train'), ('after_solve', 'train')]
        solver.close()
    finally:
        SOLVERS._entries.pop('CompatStepSolver', None)
        SOLVERS._entries.pop('CompatStepSolverTwice', None)
        HOOKS._entries.pop('CompatStageRecord', None)


def test_scepters_solve_eval_verbatim_reads_mode_set_and_eval_interval(tmp_path):
    """scepter's BaseSolver.solve_eval, copied into a subclass, reads ``_mode_set`` and ``eval_interval``; the
    BaseSolver attributes no scepter solver or hook reads say so."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.train_val_solver import TrainValSolver

    @SOLVERS.register_class('CompatSolveEvalSolver')
    class MySolver(TrainValSolver):
        def solve_eval(self):  # scepter's, verbatim
            current_mode = 'eval'
            if current_mode in self._mode_set and self.epoch % self.eval_interval == 0:
                self.logger.info(f'Begin to solve {current_mode} at Epoch [{self.epoch}/{self.max_epochs}]...')
                self.before_epoch(self.hooks_dict[current_mode])
                self.run_eval()
                self.after_epoch(self.hooks_dict[current_mode])

    npz = write_blobs(tmp_path / 'b.npz')
    try:
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', NAME='CompatSolveEvalSolver', EVAL_INTERVAL=2))
        assert solver._mode_set == {'train', 'eval'} and solver.eval_interval == 2
        solver.solve()  # was: AttributeError: '_mode_set'
        evals = [json.loads(line) for line in (tmp_path / 'w' / 'metrics.jsonl').read_text().splitlines()]
        assert [r['epoch'] for r in evals if r['kind'] == 'eval'] == [2]
        solver.eval_interval = 1  # scepter's subclasses assign it
        assert solver.progress.eval_interval == 1
        with pytest.raises(AttributeError, match=r"^MySolver._prefix: scepter's BaseSolver attribute is not provided"):
            getattr(solver, '_prefix')  # noqa: B009
    finally:
        SOLVERS._entries.pop('CompatSolveEvalSolver', None)


def test_a_run_eval_of_its_own_makes_its_metric_names_known_after_a_pass(tmp_path):
    """scepter's solvers fill _epoch_outputs in their own run_eval: SAVE_BEST_BY names what it reports."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.base_solver import BaseSolver

    @SOLVERS.register_class('CompatOwnEvalSolver')
    class OwnEvalSolver(BaseSolver):
        @torch.no_grad()
        def run_eval(self):
            self.eval_mode()
            hits = total = 0
            for batch in self.datas[self._mode].dataloader:
                logits = self.model(img=batch['img'])['logits']
                hits, total = hits + (logits.argmax(1) == batch['label']).sum().item(), total + len(batch['label'])
            self._epoch_outputs[self._mode].update({'acc': hits / total})

    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'SAVE_BEST_BY': '+acc'}]
    cfg = blob_solver_cfg(write_blobs(tmp_path / 'b.npz'), tmp_path / 'w', hooks, NAME='CompatOwnEvalSolver')
    del cfg['SOLVER']['METRICS']
    try:
        solver = build_solver(cfg)
        assert solver.metric_names('eval') is None and solver.metric_names('test') == []
        solver.solve()  # was: "SAVE_BEST_BY: no eval metric is called 'acc'; the metrics give []"
    finally:
        SOLVERS._entries.pop('CompatOwnEvalSolver', None)
    best = torch.load(tmp_path / 'w' / 'checkpoints' / 'checkpoint-best.pth', weights_only=True)
    assert 0 < best['solver']['epoch_outputs']['eval']['acc'] <= 1


def test_what_run_step_train_and_run_step_eval_return_is_what_the_loop_uses(tmp_path):
    """scepter's loop trains on run_step_train's returned loss and a scepter TrainValSolver's metrics see what the
    model gives: overrides written scepter's way (with or without super()) change the run as they do there."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.train_val_solver import TrainValSolver

    class ScaledLoss(TrainValSolver):  # the returned loss, changed after super(), is what trains
        def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
            results = super().run_step_train(batch_data, batch_idx, step, rank)
            results['loss'] = results['loss'] * 10.0
            return results

    class OwnForward(TrainValSolver):  # scepter's way: the model called here, no super()
        def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
            return self.model(**batch_data)

        def run_step_eval(self, batch_data, batch_idx=0, step=None, rank=None):
            results = self.model(**batch_data)
            results['extra'] = torch.zeros(())
            return results

    npz = write_blobs(tmp_path / 'b.npz')

    def run(name, lr=0.1, **keys):
        cfg = blob_solver_cfg(npz, tmp_path / f'{name}-{lr}', MAX_EPOCHS=1, NAME=name, **keys)
        cfg['SOLVER']['OPTIMIZER']['LEARNING_RATE'] = lr
        solver = build_solver(cfg)
        solver.solve()
        return solver, torch.cat([p.detach().flatten() for p in solver.unwrapped_model.parameters()])

    try:
        for cls in (ScaledLoss, OwnForward):
            SOLVERS.register_class(f'Compat{cls.__name__}')(cls)
        plain, w_plain = run('TrainValSolver')
        scaled, w_scaled = run('CompatScaledLoss')
        _, w_tenfold = run('TrainValSolver', lr=1.0)  # plain SGD: loss x 10 is lr x 10
        own, w_own = run('CompatOwnForward')
    finally:
        for cls in (ScaledLoss, OwnForward):
            SOLVERS._entries.pop(f'Compat{cls.__name__}', None)
    assert torch.allclose(w_scaled, w_tenfold, atol=1e-6) and not torch.allclose(w_scaled, w_plain)
    assert own.progress.optimizer_steps == 6 and torch.equal(w_own, w_plain)  # it trained, the same way
    assert own.epoch_outputs['eval']['accuracy'] == plain.epoch_outputs['eval']['accuracy'] > 0


def test_scepters_own_run_train_loop_keeps_accumulate_step(tmp_path):
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS

    npz = write_blobs(tmp_path / 'b.npz')
    hooks = [{'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2, 'GRADIENT_CLIP': 0.05}]
    weights = {}
    try:
        _hook_list_loop_solver('CompatAccumulatingLoop')
        for name in ('TrainValSolver', 'CompatAccumulatingLoop'):
            solver = build_solver(blob_solver_cfg(npz, tmp_path / name, hooks, MAX_EPOCHS=2, NAME=name))
            solver.solve()
            assert (solver.progress.total_iter, solver.progress.optimizer_steps) == (12, 6), name
            weights[name] = torch.cat([p.detach().flatten() for p in solver.unwrapped_model.parameters()])
    finally:
        SOLVERS._entries.pop('CompatAccumulatingLoop', None)
    assert torch.equal(weights['TrainValSolver'], weights['CompatAccumulatingLoop'])


def test_a_backward_hook_of_scepters_steps_the_native_loop_on_the_returned_loss(tmp_path):
    """scepter's BackwardHook (a class of that name that is not this project's) backpropagates solver.loss."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver.hooks import HOOKS, Hook
    from scepter_like.solver.hooks.backward import BackwardHook as OwnBackwardHook

    class BackwardHook(Hook):  # scepter's after_iter, as its hooks/backward.py does it (no accumulation, no AMP)
        def after_iter(self, solver):
            if solver.optimizer is not None and solver.is_train_mode and solver.loss is not None:
                solver.loss.backward()
                solver.optimizer.step()
                solver.optimizer.zero_grad()
                solver.loss = None

    HOOKS.register_class('BackwardHook')(BackwardHook)
    try:
        cfg = blob_solver_cfg(write_blobs(tmp_path / 'b.npz'), tmp_path / 'w', [{'NAME': 'BackwardHook'}], MAX_EPOCHS=1)
        solver = build_solver(cfg)
        before = [p.detach().clone() for p in solver.unwrapped_model.parameters()]
        solver.solve()
    finally:
        HOOKS.register_class('BackwardHook')(OwnBackwardHook)
    assert not solver.updater.active and solver.progress.optimizer_steps == 6
    assert all(not torch.equal(a, b) for a, b in zip(before, solver.unwrapped_model.parameters()))


def test_a_scepter_run_eval_without_its_construct_metrics_is_told_where_its_state_comes_from(tmp_path):
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.train_val_solver import TrainValSolver

    @SOLVERS.register_class('CompatRunEvalOnly')
    class RunEvalOnly(TrainValSolver):
        def run_eval(self):  # the first lines of scepter's TrainValSolver.run_eval
            self.before_all_iter(self.hooks_dict[self._mode])
            if self.do_final_eval or self.save_eval_data:
                pass

    try:
        npz = write_blobs(tmp_path / 'blobs.npz')
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', NAME='CompatRunEvalOnly', MAX_EPOCHS=1))
        with pytest.raises(AttributeError, match=r"RunEvalOnly\.do_final_eval is set by scepter's TrainValSolver\."):
            solver.solve()
        solver.close()
        assert not hasattr(solver, 'no_such_name')
    finally:
        SOLVERS._entries.pop('CompatRunEvalOnly', None)


def test_a_dotted_extra_key_reads_into_the_batch_meta_as_scepter_does(tmp_path):
    """scepter's EXTRA_KEYS: [meta.img_path] reads batch['meta']['img_path'] (its _get_value); it was 'lacking'.
    A LogHook in EVAL_HOOKS (scepter's example lists one) skips such keys: a list of paths is no scalar to average
    (it raised AttributeError: 'list' object has no attribute 'dim')."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.data.registry import DATASETS

    @DATASETS.register_class('CompatMetaBlobs')
    class MetaBlobs(torch.utils.data.Dataset):
        para_dict = {'N': {'value': 32, 'description': 'samples'}}

        def __init__(self, cfg, logger=None):
            generator = torch.Generator().manual_seed(0)
            self.x, self.y = torch.randn(cfg.N, 8, generator=generator), torch.arange(cfg.N) % 3

        def __len__(self):
            return len(self.y)

        def __getitem__(self, index):
            return {'img': self.x[index], 'label': self.y[index], 'meta': {'sample_id': index, 'path': f'{index}.png'}}

    data = {'NAME': 'CompatMetaBlobs', 'BATCH_SIZE': 8}
    cfg = blob_solver_cfg(write_blobs(tmp_path / 'blobs.npz'), tmp_path / 'w', MAX_EPOCHS=1, SAVE_EVAL_DATA=True)
    cfg['SOLVER'].update(TRAIN_DATA=data, EVAL_DATA=dict(data), EXTRA_KEYS=['meta.sample_id', 'meta.path'])
    cfg['SOLVER']['EVAL_HOOKS'] = [{'NAME': 'LogHook', 'LOG_INTERVAL': 2}]
    try:
        solver = build_solver(cfg)
        solver.solve()
    finally:
        DATASETS._entries.pop('CompatMetaBlobs', None)
    saved = torch.load(tmp_path / 'w' / 'eval_00001.pth', weights_only=True)
    assert torch.equal(torch.as_tensor(saved['meta.sample_id']), torch.arange(32))
    assert saved['meta.path'] == [f'{i}.png' for i in range(32)]


def test_reduce_on_plateau_watches_a_scepter_metric_whose_names_come_with_its_first_pass(tmp_path):
    """Its names are None until a pass ran: the MODE check once failed on them (TypeError)."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.model.metric import METRICS, BaseMetric

    @METRICS.register_class('CompatPlateauAccuracy')
    class PlateauAccuracy(BaseMetric):
        def __call__(self, logits, labels):
            return {'acc@1': (logits.argmax(-1) == labels).float().mean()}

    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'LrHook', 'WARMUP_EPOCHS': 0, 'PLATEAU_METRIC': 'acc@1'}]
    metrics = [{'NAME': 'CompatPlateauAccuracy', 'KEYS': ['logits', 'label']}]
    cfg = blob_solver_cfg(write_blobs(tmp_path / 'blobs.npz'), tmp_path / 'w', hooks, METRICS=metrics, MAX_EPOCHS=2)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'ReduceLROnPlateau', 'MODE': 'max', 'PATIENCE': 0}
    try:
        solver = build_solver(cfg)
        solver.solve()
    finally:
        METRICS._entries.pop('CompatPlateauAccuracy', None)
    assert solver.lr_scheduler.best == pytest.approx(solver.epoch_outputs['eval']['acc@1'])


def test_scepters_registry_and_math_plot_import_paths(tmp_path):
    """Every scepter registry.py imports ``utils.registry.Registry``; scepter's ValLossHook plots with
    ``utils.math_plot.plot_multi_curves``."""
    import numpy as np
    from PIL import Image

    from scepter_like.registry import Registry
    from scepter_like.utils import registry
    from scepter_like.utils.math_plot import plot_multi_curves

    assert registry.Registry is Registry
    augmenters = registry.Registry('AUGMENTERS')
    assert augmenters.name == 'AUGMENTERS'
    steps = np.array([10, 20, 30])
    y = [{'data': np.array([1.0, 0.5, 0.25]), 'label': 'a'}, {'data': np.array([2.0, 1.0, 0.5]), 'label': 'b'}]
    assert plot_multi_curves(x=steps, y=y, x_label='steps', title="a's validation loss", save_path=tmp_path / 'p.png')
    assert Image.open(tmp_path / 'p.png').size[0] > 100


def test_a_scepter_train_config_that_turns_shuffle_off_is_named(caplog):
    """scepter shuffles a MODE: train dataset whatever SHUFFLE says (its template writes SHUFFLE: False); here
    SHUFFLE decides, and a config writing both says so in one line."""
    import logging

    from scepter_like.data.dataset import DATASETS, BaseDataset
    from scepter_like.data.loader import build_data
    from scepter_like.utils.distributed import DistInfo

    @DATASETS.register_class('CompatOrdered')
    class Ordered(BaseDataset):
        def __len__(self):
            return 8

        def _get(self, index):
            return {'meta': {}, 'index': torch.tensor(index)}

    def first_batch(**keys):
        cfg = Config({'D': {'NAME': 'CompatOrdered', 'MODE': 'train', 'BATCH_SIZE': 8, **keys}}).D
        return next(build_data(cfg, 'train', DistInfo(), 0, logging.getLogger('compat')).iterate())['index'].tolist()

    try:
        with caplog.at_level(logging.WARNING):
            assert first_batch(SHUFFLE=False) == list(range(8))
            assert first_batch() != list(range(8))  # SHUFFLE left out: shuffled, as scepter does
        assert [r.getMessage() for r in caplog.records] == [
            'D.SHUFFLE: false keeps the train data in order here; scepter shuffles every MODE: train dataset'
            ' whatever SHUFFLE says: leave SHUFFLE out (or true) to shuffle as scepter does'
        ]
    finally:
        DATASETS._entries.pop('CompatOrdered', None)


def test_a_solver_init_assigns_max_steps_num_folds_and_use_fsdp_as_scepters_diffusion_solver_does(tmp_path):
    """scepter's LatentDiffusionSolver assigns ``self.max_steps = cfg.MAX_STEPS`` (then ``max_epochs = -1``) and
    ``self.use_fsdp`` after ``super().__init__()``; the value plans the run."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS
    from scepter_like.solver.base_solver import BaseSolver

    @SOLVERS.register_class('CompatStepsAfterInit')
    class AfterInit(BaseSolver):
        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger=logger)
            self.max_steps = 5
            if self.max_steps > 0:
                self.max_epochs = -1
            self.num_folds = 1
            self._num_folds = 1
            self.use_fsdp = False

    npz = write_blobs(tmp_path / 'b.npz')  # 6 batches an epoch; MAX_EPOCHS 2 would run 12 steps
    try:
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'run', NAME='CompatStepsAfterInit'))
        assert (solver.max_steps, solver.progress.max_steps, solver.progress.max_epochs) == (5, 5, 1)
        solver.solve()
        assert solver.progress.total_iter == 5
        solver.close()
        assert solver.use_fsdp is False
    finally:
        SOLVERS._entries.pop('CompatStepsAfterInit', None)


def test_an_own_train_loop_with_hook_lists_runs_the_stage_callbacks_so_checkpoint_hook_saves_steps(tmp_path):
    """A DiffusionSolver-style ``run_train`` calls ``self.after_iter(self.hooks_dict[self._mode])``: the stage's
    callbacks run after those hooks as in the native loop, so CheckpointHook's STEP_INTERVAL saves (it saves
    through a callback) and a ``register_callback_on_iter_end`` callback is called once per step."""

    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.solver import SOLVERS

    SOLVERS.register_class('CompatOwnLoopCallbacks')(type('OwnLoop', (DiffusionShapedSolver,), {}))

    npz = write_blobs(tmp_path / 'b.npz')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 2}]
    try:
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', hooks, NAME='CompatOwnLoopCallbacks', MAX_STEPS=6))
        seen = []
        solver.register_callback_on_iter_end(lambda s: seen.append(s.progress.total_iter))
        solver.solve()
        solver.close()
        assert seen == [1, 2, 3, 4, 5, 6]
        saved = sorted(n for n in os.listdir(tmp_path / 'w' / 'checkpoints') if n.endswith('.pth'))
        assert saved == ['checkpoint-step-2.pth', 'checkpoint-step-4.pth', 'checkpoint-step-6.pth']
    finally:
        SOLVERS._entries.pop('CompatOwnLoopCallbacks', None)


@pytest.mark.parametrize('optimizer', ['SGD', 'LBFGS'])
def test_an_init_opti_written_as_scepters_diffusion_solver_writes_it_is_clipped_and_stepped_as_configured(
    optimizer, tmp_path
):
    """scepter's LatentDiffusionSolver builds its optimizer, scheduler and scaler itself in ``init_opti``
    (``OPTIMIZERS.build(cfg, logger=..., parameters=...)``, ``self.scaler = None``): the update clips what that
    optimizer trains (BackwardHook GRADIENT_CLIP) and steps L-BFGS with its closure."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS
    from scepter_like.solver import SOLVERS
    from scepter_like.solver.train_val_solver import TrainValSolver

    @SOLVERS.register_class('CompatOwnInitOpti')
    class OwnInitOpti(TrainValSolver):
        def init_opti(self):
            params = self.model.parameters()
            self.optimizer = OPTIMIZERS.build(self.cfg.OPTIMIZER, logger=self.logger, parameters=params)
            if self.cfg.have('LR_SCHEDULER') and self.optimizer is not None:
                self.lr_scheduler = LR_SCHEDULERS.build(
                    self.cfg.LR_SCHEDULER, logger=self.logger, optimizer=self.optimizer
                )
            self.scaler = None

    npz = write_blobs(tmp_path / 'b.npz')  # 6 steps an epoch
    clip = 1e-6 if optimizer == 'SGD' else 0  # (L-BFGS stops at once on gradients that small)
    hooks = [{'NAME': 'BackwardHook', 'GRADIENT_CLIP': clip}, {'NAME': 'LogHook', 'LOG_INTERVAL': 6}]
    cfg = blob_solver_cfg(npz, tmp_path / 'run', hooks=hooks, NAME='CompatOwnInitOpti', MAX_EPOCHS=1)
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': optimizer, 'LEARNING_RATE': 0.1}
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'StepLR', 'STEP_SIZE': 1}
    try:
        solver = build_solver(cfg)
        assert isinstance(solver.optimizer, getattr(torch.optim, optimizer)) and solver.scaler is None
        before = [p.detach().clone() for p in solver.model.parameters()]
        solver.solve()
        solver.close()
    finally:
        SOLVERS._entries.pop('CompatOwnInitOpti', None)
    assert solver.optimizer_steps == 6
    moved = torch.cat([(p.detach() - q).flatten() for p, q in zip(solver.model.parameters(), before)]).norm()
    if optimizer == 'SGD':
        assert 0 < moved <= 6 * 0.1 * clip * 1.0001  # every step clipped
    else:  # stepped with its closure (a step without one is an error), L-BFGS fits the blobs in 6 steps
        assert moved > 0 and solver.hooks_dict['train'][1].last_logged['loss'] < 0.5


def test_a_scepter_style_checkpoint_resumes_the_warmed_up_schedule_at_the_rate_of_the_run_that_went_on(tmp_path):
    """Such a checkpoint (the solver's own save_checkpoint) holds the optimizer and scheduler, not LrHook's state,
    and the optimizer's rates are the warmed-up ones: the resumed LrHook schedules from the scheduler's own rates,
    so epoch 2 runs at the rate it had in a run that went on (it ran at the warmup's start rate times the schedule:
    100 times lower)."""
    code = write(tmp_path / 'scepter_style.py', SCEPTER_SOLVER_FILE)
    lr_hooks = (
        'SOLVER.TRAIN_HOOKS=[{NAME: BackwardHook}, {NAME: LogHook, LOG_INTERVAL: 6}, {NAME: LrHook},'
        ' {NAME: CheckpointHook, INTERVAL: 1, SAVE_BEST: false}]'
    )
    schedule = ['SOLVER.LR_SCHEDULER={NAME: CosineAnnealingLR, T_MAX: 3}', 'SOLVER.OPTIMIZER.LEARNING_RATE=0.01']

    def train(work, epochs, *words):
        cfg = scepter_style_config(tmp_path, tmp_path / work, epochs)
        res = run_cli('run_train.py', '--cfg', cfg, '--import', code, lr_hooks, *schedule, *words)
        assert res.returncode == 0, res.stderr[-3000:]
        lines = (tmp_path / work / 'metrics.jsonl').read_text().splitlines()
        return [r['values']['lr'] for r in map(json.loads, lines) if r['kind'] == 'train']

    went_on = train('a', 3)
    assert went_on[0] == pytest.approx(1e-4) and went_on[1] == pytest.approx(0.01 * (1 + math.cos(math.pi / 3)) / 2)
    train('b', 1)
    resume = f'SOLVER.RESUME_FROM={tmp_path / "b" / "checkpoints" / "checkpoint-epoch-1.pth"}'
    assert train('c', 3, resume) == pytest.approx(went_on[1:])


# scepter's modules/opt/lr_schedulers/warmup.py (Copyright (c) Alibaba, Inc. and its affiliates; Apache-2.0): its
# AnnealingLR and StepAnnealingLR as scepter wrote them, after the import rename.  AnnealingLR never calls
# _LRScheduler.__init__, so it has no _last_lr.
SCEPTER_ANNEALING_FILE = """
import math

from scepter_like.opt.lr_schedulers import LR_SCHEDULERS
from scepter_like.opt.lr_schedulers.base_scheduler import BaseScheduler
from scepter_like.utils.config import dict_to_yaml
from torch.optim.lr_scheduler import _LRScheduler


class AnnealingLR(_LRScheduler):
    def __init__(self,
                 optimizer,
                 warmup_steps,
                 total_steps,
                 decay_mode='cosine',
                 min_lr=0.0,
                 last_step=-1):
        assert decay_mode in ['linear', 'cosine', 'none']
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if 'initial_lr' not in group:
                group.setdefault('initial_lr', group['lr'])
        self.base_lrs = [
            group['initial_lr'] for group in optimizer.param_groups
        ]
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay_mode = decay_mode
        self.min_lr = min_lr
        self.current_step = last_step + 1
        self.step(self.current_step)

    def get_lr(self):
        if self.warmup_steps > 0 and self.current_step <= self.warmup_steps:
            return [
                base_lr * self.current_step / self.warmup_steps
                for base_lr in self.base_lrs
            ]
        else:
            ratio = (self.current_step - self.warmup_steps) / (
                self.total_steps - self.warmup_steps)
            ratio = min(1.0, max(0.0, ratio))
            if self.decay_mode == 'linear':
                return [base_lr * (1 - ratio) for base_lr in self.base_lrs]
            elif self.decay_mode == 'cosine':
                return [
                    base_lr * (math.cos(math.pi * ratio) + 1.0) / 2.0
                    for base_lr in self.base_lrs
                ]
            else:
                return self.base_lrs

    def step(self, current_step=None):
        if current_step is None:
            current_step = self.current_step + 1
        self.current_step = current_step
        new_lrs = self.get_lr()
        new_lrs = [max(self.min_lr, new_lr) for new_lr in new_lrs]
        for new_lr, group in zip(new_lrs, self.optimizer.param_groups):
            group['lr'] = new_lr

    def state_dict(self):
        return {
            'base_lrs': self.base_lrs,
            'warmup_steps': self.warmup_steps,
            'total_steps': self.total_steps,
            'decay_mode': self.decay_mode,
            'current_step': self.current_step
        }

    def load_state_dict(self, state_dict):
        self.base_lrs = state_dict['base_lrs']
        self.warmup_steps = state_dict['warmup_steps']
        self.total_steps = state_dict['total_steps']
        self.decay_mode = state_dict['decay_mode']
        self.current_step = state_dict['current_step']


@LR_SCHEDULERS.register_class()
class StepAnnealingLR(BaseScheduler):
    para_dict = {
        'WARMUP_STEPS': {
            'value': 0,
            'description': 'Setting warmup steps.'
        },
        'TOTAL_STEPS': {
            'value': 10000000,
            'description': 'The total training steps.'
        },
        'DECAY_MODE': {
            'value': 'cosine',
            'description': 'The lr decay mode, default is cosine.'
        },
        'MIN_LR': {
            'value': 0.0,
            'description': 'The minimum learning rate, default is 0.0.'
        },
        'LAST_STEP': {
            'value': -1,
            'description':
            'The the last step before last runing, default is -1.'
        }
    }

    def __init__(self, cfg, logger=None):
        super(StepAnnealingLR, self).__init__(cfg, logger=logger)
        self.warmup_steps = cfg.WARMUP_STEPS
        self.total_steps = cfg.TOTAL_STEPS
        self.decay_mode = cfg.get('DECAY_MODE', 'cosine')
        self.min_lr = cfg.get('MIN_LR', 0.0)
        self.last_step = cfg.get('LAST_STEP', -1)

    def __call__(self, optimizer):
        return AnnealingLR(optimizer,
                           warmup_steps=self.warmup_steps,
                           total_steps=self.total_steps,
                           decay_mode=self.decay_mode,
                           min_lr=self.min_lr,
                           last_step=self.last_step)

    @staticmethod
    def get_config_template():
        return dict_to_yaml('LR_SCHEDULERS',
                            __class__.__name__,
                            StepAnnealingLR.para_dict,
                            set_name=True)
"""


def test_scepters_step_annealing_lr_runs_at_its_per_step_rates(tmp_path):
    """scepter's AnnealingLR keeps no ``_last_lr``: LrHook takes its rates from the optimizer it sets, and the run
    trains at scepter's rates, stepped once per optimizer step (its warmup from 0 over 4 steps, then linear decay
    to step 12)."""
    from helpers import blob_solver_cfg, write_blobs

    code = write(tmp_path / 'warmup.py', SCEPTER_ANNEALING_FILE)
    cfg = blob_solver_cfg(
        write_blobs(tmp_path / 'blobs.npz'),
        tmp_path / 'w',
        hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'LogHook', 'LOG_INTERVAL': 1}],
        LR_SCHEDULER={'NAME': 'StepAnnealingLR', 'WARMUP_STEPS': 4, 'TOTAL_STEPS': 12, 'DECAY_MODE': 'linear'},
    )
    (tmp_path / 'c.yaml').write_text(yaml.safe_dump(cfg))
    res = run_cli('run_train.py', '--cfg', tmp_path / 'c.yaml', '--import', code)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = map(json.loads, (tmp_path / 'w' / 'metrics.jsonl').read_text().splitlines())
    lrs = [r['values']['lr'] for r in lines if r['kind'] == 'train']
    scepters = [0.1 * (c / 4 if c <= 4 else 1 - (c - 4) / 8) for c in range(12)]  # step k trains at step k - 1's
    assert lrs == pytest.approx(scepters)


def test_a_model_declaring_pretrained_model_loads_it_itself_and_the_solver_not_again(tmp_path, caplog):
    """scepter's LatentDiffusion and embedders declare PRETRAINED_MODEL (with IGNORE_KEYS) and load it in
    ``__init__``; the solver loads only BaseModel's key.  Its second, strict load undid IGNORE_KEYS."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.model import MODELS, BaseModel

    @MODELS.register_class('CompatFinetuneNet')
    class FinetuneNet(BaseModel):
        para_dict = {
            'PRETRAINED_MODEL': {'value': None, 'description': 'scepter checkpoint to start from'},
            'IGNORE_KEYS': {'value': [], 'description': 'keys not loaded'},
        }

        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger=logger)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
            self.ignore_keys = cfg.get('IGNORE_KEYS', [])
            if cfg.get('PRETRAINED_MODEL'):
                state = torch.load(cfg.PRETRAINED_MODEL, map_location='cpu')['state_dict']
                kept = {k: v for k, v in state.items() if not any(k.startswith(i) for i in self.ignore_keys)}
                self.load_state_dict(kept, strict=False)

        def forward(self, img, label=None):
            logits = self.net(img)
            return {'loss': torch.nn.functional.cross_entropy(logits, label)} if self.training else {'logits': logits}

    sevens = {k: torch.full_like(v, 7.0) for k, v in FinetuneNet(Config({})).state_dict().items()}
    torch.save({'state_dict': sevens}, tmp_path / 'pre.pth')
    model = {'NAME': 'CompatFinetuneNet', 'PRETRAINED_MODEL': str(tmp_path / 'pre.pth'), 'IGNORE_KEYS': ['net.2']}
    try:
        with caplog.at_level(logging.INFO):
            solver = build_solver(blob_solver_cfg(write_blobs(tmp_path / 'blobs.npz'), tmp_path / 'w', MODEL=model))
    finally:
        MODELS._entries.pop('CompatFinetuneNet', None)
    state = solver.unwrapped_model.state_dict()
    assert all(bool((v == 7).all()) == k.startswith('net.0.') for k, v in state.items())  # net.2: fresh
    assert (
        'SOLVER.MODEL.PRETRAINED_MODEL: FinetuneNet declares PRETRAINED_MODEL itself and loads it'
        " (scepter's way): the solver does not load it again"
    ) in caplog.messages


def test_a_bool_freeze_of_a_whole_model_is_scepters_and_freezes_all_of_it(tmp_path):
    """scepter's embedders declare a bool FREEZE (true: the model freezes itself); given to the top-level model it
    freezes every parameter (it was ``TypeError: 'bool' object is not iterable``), and a training run of a wholly
    frozen model is one error line."""
    from helpers import blob_solver_cfg, build_solver, write_blobs

    from scepter_like.model import MODELS, BaseModel
    from scepter_like.model.registry import BACKBONES

    @BACKBONES.register_class('CompatFrozenEnc')
    class FrozenEnc(BaseModel):
        para_dict = {'FREEZE': {'value': True, 'description': 'freeze the encoder'}}

        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger=logger)
            self.lin = torch.nn.Linear(8, 16)
            if cfg.get('FREEZE', True):
                for p in self.parameters():
                    p.requires_grad = False

        def forward(self, x):
            return self.lin(x)

    @MODELS.register_class('CompatEncCls')
    class EncCls(BaseModel):
        para_dict = {'ENCODER': {}, 'FREEZE': {'value': False, 'description': 'freeze all'}}

        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger=logger)
            self.enc = MODELS.build(cfg.ENCODER, logger=logger)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, img, label=None):
            logits = self.head(self.enc(img))
            return {'loss': torch.nn.functional.cross_entropy(logits, label)} if self.training else {'logits': logits}

    npz = write_blobs(tmp_path / 'blobs.npz')

    def trainable(freeze, enc_freeze, **keys):
        model = {'NAME': 'CompatEncCls', 'FREEZE': freeze, 'ENCODER': {'NAME': 'CompatFrozenEnc', 'FREEZE': enc_freeze}}
        solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', MODEL=model, **keys))
        return sorted(n for n, p in solver.unwrapped_model.named_parameters() if p.requires_grad)

    try:
        assert trainable(False, True) == ['head.bias', 'head.weight']
        assert trainable(False, False) == ['enc.lin.bias', 'enc.lin.weight', 'head.bias', 'head.weight']
        assert trainable(True, False, TRAIN_DATA=None, OPTIMIZER=None, TRAIN_HOOKS=[]) == []  # evaluation
        with pytest.raises(ConfigError, match=r'^SOLVER.OPTIMIZER: every parameter of the model is frozen'):
            trainable(True, False)
    finally:
        MODELS._entries.pop('CompatEncCls', None)
        BACKBONES._entries.pop('CompatFrozenEnc', None)
