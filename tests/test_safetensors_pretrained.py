"""SafetensorsHook export (round trip, metadata, tied weights) and MODEL.PRETRAINED_MODEL
(.safetensors and .pth, strict, with a readable report when the weights do not fit)."""

import logging
import os

import pytest
import torch
import yaml
from helpers import blob_solver_cfg, build_solver, write_blobs
from safetensors.torch import load_file

from scepter_like.errors import CheckpointError, ConfigError
from scepter_like.model.description import save_described_weights
from scepter_like.utils.checkpoint import read_safetensors_metadata, save_safetensors


def blob_cfg(tmp_path, hooks=None, **keys):
    tmp_path.mkdir(exist_ok=True)
    npz = write_blobs(tmp_path / 'blobs.npz')
    return blob_solver_cfg(npz, tmp_path / 'run', hooks=hooks, **keys)


def test_safetensors_hook_writes_every_interval_and_at_the_end(tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'SafetensorsHook', 'INTERVAL': 4, 'SAVE_NAME_PREFIX': 'w'}]
    solver = build_solver(blob_cfg(tmp_path, hooks))  # 2 epochs of 6 steps
    solver.solve()
    folder = tmp_path / 'run' / 'safetensors'
    assert sorted(os.listdir(folder)) == [
        'w-final.safetensors',
        'w-step-12.safetensors',
        'w-step-4.safetensors',
        'w-step-8.safetensors',
    ]
    final = load_file(folder / 'w-final.safetensors')
    own = solver.unwrapped_model.state_dict()
    assert final.keys() == own.keys()
    assert all(torch.equal(final[k], own[k]) for k in own)
    assert not torch.equal(load_file(folder / 'w-step-4.safetensors')['backbone.0.weight'], own['backbone.0.weight'])
    meta = read_safetensors_metadata(folder / 'w-final.safetensors')
    assert meta['step'] == '12' and meta['epoch'] == '2' and meta['format'] == 'pt'
    assert yaml.safe_load(meta['config'])['SOLVER']['TRAIN_HOOKS'][1]['INTERVAL'] == 4
    assert read_safetensors_metadata(folder / 'w-step-8.safetensors')['step'] == '8'


def test_a_save_due_inside_an_accumulation_group_waits_for_its_optimizer_step(tmp_path):
    hooks = [{'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2}, {'NAME': 'SafetensorsHook', 'INTERVAL': 3}]
    build_solver(blob_cfg(tmp_path, hooks, MAX_EPOCHS=1)).solve()  # 6 steps: groups (1,2) (3,4) (5,6)
    names = sorted(os.listdir(tmp_path / 'run' / 'safetensors'))
    assert names == ['weights-final.safetensors', 'weights-step-4.safetensors', 'weights-step-6.safetensors']


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 4)
        self.head = torch.nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight
        self.view = torch.nn.Parameter(torch.arange(12.0).reshape(3, 4).t(), requires_grad=False)  # not contiguous


def test_save_safetensors_handles_shared_and_strided_tensors(tmp_path):
    model = Tied()
    path = tmp_path / 'tied.safetensors'
    save_safetensors(model.state_dict(), path, metadata={'step': 3})
    back = load_file(path)
    assert back.keys() == model.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())
    assert read_safetensors_metadata(path) == {'step': '3'}
    fresh = Tied()
    fresh.load_state_dict(back)
    assert fresh.head.weight is fresh.embed.weight and torch.equal(fresh.embed.weight, model.embed.weight)
    assert not [n for n in os.listdir(tmp_path) if n.startswith('.tmp.')]


@pytest.mark.parametrize('fmt', ['safetensors', 'described_safetensors', 'pth', 'scepter_ddp'])
def test_pretrained_model_loads_safetensors_and_pth(tmp_path, fmt):
    source = build_solver(blob_cfg(tmp_path / 'a'))
    weights = source.unwrapped_model.state_dict()
    path = tmp_path / f'weights.{fmt}'
    if fmt == 'safetensors':
        save_safetensors(weights, path)
    elif fmt == 'described_safetensors':  # as SafetensorsHook, export and EMAHook write them: a model description
        path = tmp_path / 'weights.safetensors'
        save_described_weights(path, weights, source.unwrapped_model)
    elif fmt == 'pth':  # a full training checkpoint: its 'model' entry is used
        source.save_checkpoint(str(path))
    else:  # scepter's checkpoint dict from a DDP-wrapped model: 'state_dict', keys under 'module.'
        torch.save({'epoch': 1, 'state_dict': {f'module.{k}': v for k, v in weights.items()}}, path)
    cfg = blob_cfg(tmp_path / 'b')
    cfg['ENV']['SEED'] = 1  # a different init, so equality below proves the load
    cfg['SOLVER']['MODEL']['PRETRAINED_MODEL'] = str(path)
    solver = build_solver(cfg)
    own = solver.unwrapped_model.state_dict()
    assert all(torch.equal(own[k], weights[k]) for k in weights)


def test_pretrained_model_that_does_not_fit_gives_a_key_report(tmp_path):
    other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    state = {f'backbone.{k}': v for k, v in other.state_dict().items()}
    state['extra.bias'] = torch.zeros(3)
    del state['backbone.0.bias']
    path = tmp_path / 'other.safetensors'
    save_safetensors(state, path)
    cfg = blob_cfg(tmp_path)
    cfg['SOLVER']['MODEL']['PRETRAINED_MODEL'] = str(path)
    with pytest.raises(CheckpointError) as err:
        build_solver(cfg)
    text = str(err.value)
    assert 'missing: backbone.0.bias' in text
    assert 'unexpected: extra.bias' in text
    assert 'mis-shaped: backbone.2.weight (5, 16) vs model (3, 16)' in text


def test_pretrained_strict_off_keeps_a_new_head_of_another_class_count(tmp_path, caplog):
    """Finetuning to 3 classes from weights of 5: the mis-shaped head was an error even with strict loading off."""
    other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    path = tmp_path / 'five_classes.safetensors'
    save_safetensors({f'backbone.{k}': v for k, v in other.state_dict().items()}, path)
    fresh = build_solver(blob_cfg(tmp_path / 'fresh')).unwrapped_model.state_dict()  # the same seed, no weights
    cfg = blob_cfg(tmp_path / 'tuned')
    cfg['SOLVER']['MODEL'].update(PRETRAINED_MODEL=str(path), PRETRAINED_STRICT=False)
    with caplog.at_level(logging.WARNING):
        own = build_solver(cfg).unwrapped_model.state_dict()
    assert torch.equal(own['backbone.0.weight'], other[0].weight) and torch.equal(own['backbone.0.bias'], other[0].bias)
    assert torch.equal(own['backbone.2.weight'], fresh['backbone.2.weight'])  # the new head: its own init
    said = [r.getMessage() for r in caplog.records if 'mis-shaped' in r.getMessage()]
    assert len(said) == 1 and 'backbone.2.weight (5, 16) vs model (3, 16)' in said[0], said


def test_a_part_loads_its_own_pretrained_model_and_freezes_its_own_prefixes(tmp_path, caplog):
    """SOLVER.MODEL.BACKBONE.PRETRAINED_MODEL and FREEZE were accepted and ignored (no load, no freeze, no error for
    a missing file): the part's keys apply to the part, named by the part's config path."""
    source = build_solver(blob_cfg(tmp_path / 'a')).unwrapped_model.backbone
    path = tmp_path / 'backbone.safetensors'
    save_safetensors(source.state_dict(), path)  # the backbone's own names: 0.weight, 2.bias, ...
    cfg = blob_cfg(tmp_path / 'b')
    cfg['ENV']['SEED'] = 1  # a different init, so equality below proves the load
    cfg['SOLVER']['MODEL']['BACKBONE'].update(PRETRAINED_MODEL=str(path), FREEZE=['0'])
    with caplog.at_level(logging.INFO):
        backbone = build_solver(cfg).unwrapped_model.backbone
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in backbone.state_dict().items())
    assert [n for n, p in backbone.named_parameters() if not p.requires_grad] == ['0.weight', '0.bias']
    assert f'SOLVER.MODEL.BACKBONE.PRETRAINED_MODEL: loaded pretrained weights from {path}' in caplog.messages
    cfg['SOLVER']['MODEL']['BACKBONE'].update(PRETRAINED_MODEL=str(tmp_path / 'nope.pth'), FREEZE=[])
    with pytest.raises(CheckpointError, match=r'^SOLVER\.MODEL\.BACKBONE\.PRETRAINED_MODEL: weights file not found'):
        build_solver(cfg)
    cfg['SOLVER']['MODEL']['BACKBONE'].update(PRETRAINED_MODEL='', FREEZE=['backbone.0'])  # the top level's name
    with pytest.raises(ConfigError, match=r"^SOLVER\.MODEL\.BACKBONE\.FREEZE: 'backbone\.0' names no parameter"):
        build_solver(cfg)


def test_evaluation_weights_replace_a_parts_pretrained_model_too():
    from scepter_like.config import Config
    from scepter_like.solver.inference_solver import inference_config

    model = {
        'NAME': 'Classifier',
        'PRETRAINED_MODEL': 'a.pth',
        'BACKBONE': {'NAME': 'MLP', 'PRETRAINED_MODEL': 'b.pth'},
    }
    cfg = inference_config(Config({'SOLVER': {'NAME': 'TrainValSolver', 'MODEL': model}}))
    assert cfg.SOLVER.MODEL.PRETRAINED_MODEL == '' and cfg.SOLVER.MODEL.BACKBONE.PRETRAINED_MODEL == ''
