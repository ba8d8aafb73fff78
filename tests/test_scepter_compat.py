"""Code written for scepter runs after the rename ``scepter.modules.`` -> ``scepter_like.``.

No scepter code ships here: the hooks, metric, scheduler and dataset below are small
ones written in scepter's style (list ``para_dict``, its imports after the rename).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from conftest import DIGITS_CFG, run_tool, tool_env

from scepter_like.config import Config
from scepter_like.errors import ConfigError, DataError, RegistryError
from scepter_like.registry import Registry

# A hook file exactly as a scepter user writes one, after the import rename.
SCEPTER_HOOK_FILE = """
# -*- coding: utf-8 -*-
import json
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
        == "OPT.WEIGHT_DECAY: expected a number (like 0.0), got '1e-3' (YAML 1.1 reads 1e-3 as a string); write 1.0e-3"
    )
    with pytest.raises(ConfigError, match=r'write 2\.0e\+5$'):
        things.build({'NAME': 'Opt', 'STEPS': '2e5'})
    assert things.build(yaml.safe_load('{NAME: Opt, WEIGHT_DECAY: 1.0e-3}')).cfg.WEIGHT_DECAY == 1e-3


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
    res = run_tool('run_train.py', '--cfg', cfg, '--import', hook_file, 'SOLVER.LR_SCHEDULER=', cwd=tmp_path)
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


def test_declared_range_and_yaml11_number_end_run_train_with_one_error_line(tmp_path):
    hook_file = write(tmp_path / 'record_hook.py', SCEPTER_HOOK_FILE)
    cfg = digits_with_hook(tmp_path)
    for override, message in [
        ('SOLVER.TRAIN_HOOKS.2.INTERVAL=0', 'error: SOLVER.TRAIN_HOOKS[2].INTERVAL: must be at least 1, got 0'),
        ('SOLVER.OPTIMIZER.WEIGHT_DECAY=5e-4', 'write 5.0e-4'),
    ]:
        res = run_tool('run_train.py', '--cfg', cfg, '--import', hook_file, override, cwd=tmp_path)
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

    assert BACKBONES is MODELS and NECKS is MODELS and HEADS is MODELS and LOSSES.name == 'LOSSES'
    assert METRICS is METRICS2 is METRICS3 and DATASETS is DATASETS2 and BaseDataset is BaseDataset2
    assert issubclass(BaseModel, torch.nn.Module) and BaseMetric and BaseScheduler
    assert 'CosineAnnealingLR' in LR_SCHEDULERS and 'SGD' in OPTIMIZERS


def test_scepter_shaped_components_build():
    """A backbone, a callable metric, a build-then-call scheduler and optimizer, a dataset, scepter's way."""
    from scepter_like.data.dataset import DATASETS, BaseDataset
    from scepter_like.model.base_model import BaseModel
    from scepter_like.model.metric import METRICS, BaseMetric
    from scepter_like.model.registry import BACKBONES, MODELS
    from scepter_like.opt.lr_schedulers import LR_SCHEDULERS, BaseScheduler, build_lr_scheduler
    from scepter_like.opt.optimizers import OPTIMIZERS, BaseOptimize, build_optimizer

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
        with pytest.raises(ConfigError, match='TRANSFORMS: scepter transform pipelines are not supported'):
            DATASETS.build({'NAME': 'CompatPairs', 'TRANSFORMS': [{'NAME': 'ImageToTensor'}]})
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
    import socket

    script = write(tmp_path / 'dist_we.py', DIST_SCRIPT)
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={port}', script]
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
