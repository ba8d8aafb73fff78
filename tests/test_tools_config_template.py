"""tools/config_template.py: every template loads as YAML and builds its component."""

import re

import pytest
import torch
import yaml
from conftest import run_cli

from scepter_like.cli import run
from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.tools import config_template


def template_of(capsys, *argv):
    assert run(config_template.main, list(argv)) == 0
    text = capsys.readouterr().out
    return text, yaml.safe_load(text)


def test_hook_model_metric_templates_build(capsys):
    from scepter_like.metric.registry import METRICS
    from scepter_like.model.registry import MODELS
    from scepter_like.solver.hooks.registry import HOOKS

    text, data = template_of(capsys, 'LogHook')
    from scepter_like.registry import declared_params

    para, _ = declared_params(HOOKS.get('LogHook'))
    assert data == {'NAME': 'LogHook', **{k: spec['value'] for k, spec in para.items()}}  # every key, its default
    assert data['PRIORITY'] == 100 and data['LOG_INTERVAL'] == 10
    assert re.search(r'^LOG_INTERVAL: 10  # \S', text, re.M)  # the description as a comment
    assert HOOKS.build(Config(data)).priority == 100

    _, data = template_of(capsys, 'MLP')
    assert data['HIDDEN_DIMS'] == [256, 256] and data['PRETRAINED_MODEL'] == ''  # inherited keys too
    mlp = MODELS.build(Config(data))
    assert mlp(torch.zeros(2, 8, 8)).shape == (2, 10)

    _, data = template_of(capsys, 'AccuracyMetric')
    assert METRICS.build(Config(data)).output_names() == ['accuracy']


def test_a_template_builds_as_it_stands_or_marks_what_it_needs(capsys):
    """Box's 3-D LOW beside a 2-D HIGH did not build; Normalize's empty MEAN / STD were not marked required."""
    from scepter_like.data.geometry import GEOMETRIES

    _, data = template_of(capsys, 'Box')
    assert GEOMETRIES.build(Config(data)).dim == 3
    text, _ = template_of(capsys, 'Normalize')
    assert re.search(r'^MEAN: \[\]  # \(required\)', text, re.M) and re.search(
        r'^STD: \[\]  # \(required\)', text, re.M
    )
    for name in ('ToTensor', 'Select', 'Rename'):
        assert '(required)' in template_of(capsys, name)[0], name


def test_optimizer_and_scheduler_templates_build_with_required_keys_filled(capsys):
    from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS

    _, data = template_of(capsys, 'SGD')
    params = [torch.nn.Parameter(torch.zeros(3))]
    sgd = OPTIMIZERS.build(Config(data), params=params)
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]['lr'] == data['LEARNING_RATE']

    text, data = template_of(capsys, 'CosineAnnealingLR')
    # a key without a usable default shows as null, marked (required): the template
    # builds once the user fills it in, and not before
    assert re.search(r'^T_MAX: null  # \(required\)', text, re.M)
    with pytest.raises(ConfigError, match='CosineAnnealingLR'):
        LR_SCHEDULERS.build(Config(data), optimizer=sgd)
    data['T_MAX'] = 5
    assert LR_SCHEDULERS.build(Config(data), optimizer=sgd).T_max == 5


def test_data_template_shows_loader_keys_and_builds(capsys, tmp_path):
    from helpers import write_blobs

    from scepter_like.data.loader import LOADER_PARA_DICT, build_data
    from scepter_like.utils.distributed import DistInfo

    text, data = template_of(capsys, 'NpzDataset')
    assert set(LOADER_PARA_DICT) <= set(data) and re.search(r'^PATH: .*# \(required\)', text, re.M)
    data['PATH'] = write_blobs(tmp_path / 'b.npz', n=10)
    bundle = build_data(Config(data, path='EVAL_DATA'), 'eval', DistInfo(), seed=0)
    assert len(bundle.dataset) == 10 and bundle.batch_size == LOADER_PARA_DICT['BATCH_SIZE']['value']


def test_user_module_template_as_users_run_it(tmp_path):
    (tmp_path / 'my_parts.py').write_text(
        'from scepter_like.model.registry import MODELS\n'
        'from scepter_like.model.base import BaseModel\n'
        '@MODELS.register_class()\n'
        'class ShadowNet(BaseModel):\n'
        "    para_dict = {'WIDTH': {'value': 4, 'description': 'how wide'}}\n"
    )
    res = run_cli('config_template.py', '--import', 'my_parts.py', 'ShadowNet', '--registry', 'MODELS', cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith('# MODELS.ShadowNet\n') and 'WIDTH: 4  # how wide' in res.stdout
    assert yaml.safe_load(res.stdout) == {
        'NAME': 'ShadowNet',
        'PRETRAINED_MODEL': '',
        'PRETRAINED_STRICT': True,
        'FREEZE': [],
        'WIDTH': 4,
    }


def test_a_name_in_two_registries_needs_registry():
    from scepter_like.errors import RegistryError
    from scepter_like.registry import Registry

    first, second = Registry('FIRST'), Registry('SECOND')
    for registry in (first, second):
        registry.register_class('Twin')(type('Twin', (), {'para_dict': {}}))
    registries = {'FIRST': first, 'SECOND': second}
    with pytest.raises(RegistryError, match=r"'Twin' is in FIRST and SECOND; pick one with --registry"):
        config_template.template(registries, 'Twin')
    assert config_template.template(registries, 'Twin', 'SECOND') == '# SECOND.Twin\nNAME: Twin\n'
    with pytest.raises(RegistryError, match=r"'Twin' is not in registry FIRST; it is in SECOND"):
        config_template.template({'FIRST': Registry('FIRST'), 'SECOND': second}, 'Twin', 'FIRST')


def test_list_and_unknown_name_as_users_run_them():
    res = run_cli('config_template.py', '--list')
    assert res.returncode == 0, res.stderr
    assert re.search(r'^HOOKS \(\d+\): .*LogHook', res.stdout, re.M)
    assert re.search(r'^LR_SCHEDULERS \(\d+\): .*CosineAnnealingLR', res.stdout, re.M)
    res = run_cli('config_template.py', 'LogHok')
    assert res.returncode == 2 and 'Traceback' not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: 'LogHok' is not in any registry; did you mean LogHook or WandbLogHook or LrHook?; see --list"
    ]
