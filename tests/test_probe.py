"""ProbeDataHook: register_probe from a step writes PNG / .npy / JSON files and a meta.json index."""

import json
import os
import re

import numpy as np
import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs
from PIL import Image

from scepter_like.errors import DataError
from scepter_like.model.base_model import BaseModel
from scepter_like.model.registry import MODELS
from scepter_like.solver import SOLVERS
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.probe import ProbeImage
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.train_val_solver import TrainValSolver
from scepter_like.utils.probe import ProbeData

GREY = torch.arange(12, dtype=torch.uint8).reshape(3, 4) * 20


@SOLVERS.register_class()
class ProbingSolver(TrainValSolver):
    para_dict = {}

    def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
        results = super().run_step_train(batch_data, batch_idx, step, rank)
        self.register_probe(
            {
                'rgb': ProbeImage(torch.linspace(0, 1, 3 * 2 * 5).reshape(3, 2, 5)),  # CxHxW float
                'grey': ProbeImage(GREY),  # HxW uint8
                'batch': ProbeImage(np.zeros((2, 4, 4, 1), np.float32)),  # NxHxWxC
                'input': batch_data['img'],
                'loss': results['loss'].detach(),
                'note': f'batch {batch_idx}',
            }
        )
        return results

    def run_step_eval(self, batch_data, batch_idx=0, step=None, rank=None):
        results = super().run_step_eval(batch_data, batch_idx, step, rank)
        self.register_probe({'logits': results['logits']})
        return results


def test_probe_files(tmp_path):
    npz = write_blobs(tmp_path / 'd.npz', n=96)  # 6 train steps
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'ProbeDataHook', 'PROB_INTERVAL': 3, 'SAVE_NAME_PREFIX': 'p'}]
    cfg = blob_solver_cfg(
        npz, tmp_path / 'w', hooks=hooks, NAME='ProbingSolver', MAX_EPOCHS=1, EVAL_HOOKS=[{'NAME': 'ProbeDataHook'}]
    )
    solver = build_solver(cfg)
    solver.solve()
    work = tmp_path / 'w'
    assert sorted(p.name for p in (work / 'train_probe').iterdir()) == ['p-3', 'p-6']
    folder = work / 'train_probe' / 'p-3'
    meta = json.loads((folder / 'meta.json').read_text())
    assert meta['mode'] == 'train' and meta['step'] == 3 and meta['epoch'] == 1  # 1-based, as metrics.jsonl
    assert meta['entries']['rgb'] == {'kind': 'image', 'files': ['rgb.png'], 'shape': [2, 5, 3], 'dtype': 'uint8'}
    assert meta['entries']['batch']['files'] == ['batch_0.png', 'batch_1.png']
    rgb = np.asarray(Image.open(folder / 'rgb.png'))
    expected = np.rint(torch.linspace(0, 1, 30).reshape(3, 2, 5).permute(1, 2, 0).numpy() * 255).astype(np.uint8)
    np.testing.assert_array_equal(rgb, expected)
    np.testing.assert_array_equal(np.asarray(Image.open(folder / 'grey.png')), GREY.numpy())
    assert np.load(folder / 'input.npy').shape == (16, 8)
    assert meta['entries']['input'] == {'kind': 'array', 'files': ['input.npy'], 'shape': [16, 8], 'dtype': 'float32'}
    assert isinstance(json.loads((folder / 'loss.json').read_text()), float)
    assert json.loads((folder / 'note.json').read_text()) == 'batch 2'
    # eval: the first batch's probes, at the train step count
    eval_meta = json.loads((work / 'eval_probe' / 'probe-6' / 'meta.json').read_text())
    assert eval_meta['entries']['logits']['shape'] == [16, 3] and eval_meta['epoch'] == 1
    assert solver._probes == {} and not solver.step.probe_wanted


def test_register_probe_keeps_nothing_without_the_hook(tmp_path):
    npz = write_blobs(tmp_path / 'd.npz', n=32)
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', NAME='ProbingSolver', MAX_EPOCHS=1))
    solver.solve()
    assert solver._probes == {}
    assert not (tmp_path / 'w' / 'train_probe').exists()


@SOLVERS.register_class()
class PassProbingSolver(ProbingSolver):
    """scepter's LatentDiffusionSolver.run_eval: the loop, register_probe of the whole pass, after_all_iter."""

    para_dict = {}

    @torch.no_grad()
    def run_eval(self):
        self.before_all_iter(self.hooks_dict[self._mode])
        preds = []
        for batch_idx, batch in enumerate(self.datas[self._mode].dataloader):
            self.before_iter(self.hooks_dict[self._mode])
            preds.append(self.run_step_eval(batch, batch_idx)['logits'].argmax(-1))
            self.after_iter(self.hooks_dict[self._mode])
        self.register_probe({'pass_pred': torch.cat(preds)})
        self.after_all_iter(self.hooks_dict[self._mode])


def test_a_pass_probe_registered_after_a_scepter_eval_loop_is_written_with_the_first_batch(tmp_path):
    npz = write_blobs(tmp_path / 'd.npz', n=96)
    cfg = blob_solver_cfg(
        npz, tmp_path / 'w', NAME='PassProbingSolver', MAX_EPOCHS=1, EVAL_HOOKS=[{'NAME': 'ProbeDataHook'}]
    )
    solver = build_solver(cfg)
    solver.solve()
    meta = json.loads((tmp_path / 'w' / 'eval_probe' / 'probe-6' / 'meta.json').read_text())
    assert meta['entries']['pass_pred']['shape'] == [96]  # the whole pass (it was dropped)
    assert meta['entries']['logits']['shape'] == [16, 3]  # the first batch's, in the same folder
    assert solver._probes == {}


@HOOKS.register_class()
class ScepterStyleProbeHook(Hook):
    """What scepter's solver/hooks/data_probe.py does with the probes, in short: ``solver.probe_data`` every
    PROB_INTERVAL-th train step (scepter's 0-based ``total_iter``) and after an eval pass, each value's
    ``to_log(prefix)`` into ``meta.json``, then ``solver.clear_probe()``."""

    para_dict = [{'PRIORITY': {'value': 1000}, 'PROB_INTERVAL': {'value': 1000}}]

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger=logger)
        self.priority = cfg.get('PRIORITY', 1000)
        self.prob_interval = cfg.get('PROB_INTERVAL', 1000)

    def after_iter(self, solver):
        if solver.mode == 'train' and solver.total_iter % self.prob_interval == 0:
            self.write(solver, solver.total_iter)

    def after_all_iter(self, solver):
        if not solver.mode == 'train':
            self.write(solver, solver._total_iter['train'])

    def write(self, solver, step):
        folder = os.path.join(solver.work_dir, f'{solver.mode}_probe/step-{step}')
        ret = {}
        for k, v in solver.probe_data.items():
            ret_one = v.to_log(os.path.join(folder, k.replace('/', '_') + f'_step_{step}'))
            if not (isinstance(ret_one, (list, dict)) and len(ret_one) < 1):
                ret[k] = ret_one
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, 'meta.json'), 'w') as f:
            json.dump(ret, f)
        solver.clear_probe()


def test_scepters_probe_hook_gets_every_probe_of_its_steps_as_probe_data(tmp_path):
    """scepter's hook asks nothing beforehand: register_probe keeps a step's probes until its end, and
    ``probe_data`` hands them over as ProbeData (``to_log``), the eval pass's after-loop probe too."""
    npz = write_blobs(tmp_path / 'd.npz', n=96)  # 6 train steps
    hook = {'NAME': 'ScepterStyleProbeHook', 'PROB_INTERVAL': 3}
    cfg = blob_solver_cfg(
        npz, tmp_path / 'w', [{'NAME': 'BackwardHook'}, hook], NAME='PassProbingSolver', MAX_EPOCHS=1, EVAL_HOOKS=[hook]
    )
    build_solver(cfg).solve()  # was: AttributeError: 'int' object has no attribute 'to_log' (eval)
    probes = tmp_path / 'w' / 'train_probe'
    assert sorted(p.name for p in probes.iterdir()) == ['step-0', 'step-3']
    meta = json.loads((probes / 'step-3' / 'meta.json').read_text())  # was: {}
    assert sorted(meta) == ['batch', 'grey', 'input', 'loss', 'note', 'rgb'] and meta['note'] == 'batch 3'
    assert np.load(meta['input']).shape == (16, 8) and np.load(meta['loss']).shape == ()  # scepter's .npy
    grey = np.asarray(Image.open(meta['grey']), dtype=float)  # an image, scepter's jpg (lossy)
    assert meta['grey'].endswith('.jpg') and np.abs(grey - GREY.numpy()).max() < 10
    assert len(meta['batch']['ori_file'][0]) == 2
    eval_meta = json.loads((tmp_path / 'w' / 'eval_probe' / 'step-6' / 'meta.json').read_text())
    assert list(eval_meta) == ['pass_pred'] and np.load(eval_meta['pass_pred']).shape == (96,)


class Identity(BaseModel):
    def forward(self, x):
        self.register_probe({'first': x[0]})
        return x


@MODELS.register_class()
class ProbingNet(BaseModel):
    """A model written for scepter: ``self.register_probe`` in its forward (ldm.py's ``snrs_weights``), a child
    BaseModel that registers too."""

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger=logger)
        self.pre = Identity(cfg, logger=logger)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, img, label=None):
        logits = self.fc(self.pre(img))
        self.register_probe({'snrs_weights': torch.ones(3), 'rows': len(img)})
        if self.training:
            return {'loss': torch.nn.functional.cross_entropy(logits, label)}
        return {'logits': logits, 'label': label}


def test_a_models_probes_reach_both_probe_hooks_as_model_entries(tmp_path):
    npz = write_blobs(tmp_path / 'd.npz', n=96)
    cfg = blob_solver_cfg(npz, tmp_path / 'w', MAX_EPOCHS=1, MODEL={'NAME': 'ProbingNet'}, METRICS=[])
    del cfg['SOLVER']['EVAL_DATA']
    cfg['SOLVER']['TRAIN_HOOKS'] += [
        {'NAME': 'ProbeDataHook', 'PROB_INTERVAL': 3},
        {'NAME': 'ScepterStyleProbeHook', 'PROB_INTERVAL': 3, 'PRIORITY': 1001},
    ]
    solver = build_solver(cfg)
    solver.solve()  # was: AttributeError: 'ProbingNet' object has no attribute 'register_probe'
    meta = json.loads((tmp_path / 'w' / 'train_probe' / 'probe-3' / 'meta.json').read_text())
    assert sorted(meta['entries']) == ['model/pre/first', 'model/rows', 'model/snrs_weights']
    assert np.load(tmp_path / 'w' / 'train_probe' / 'probe-3' / 'model_snrs_weights.npy').tolist() == [1, 1, 1]
    scepter_meta = json.loads((tmp_path / 'w' / 'train_probe' / 'step-3' / 'meta.json').read_text())
    assert sorted(scepter_meta) == ['model/pre/first', 'model/rows', 'model/snrs_weights']
    assert scepter_meta['model/rows'] == 16
    model = solver.unwrapped_model
    assert model._probe_data == model.pre._probe_data == {}  # taken at each step's end
    model.register_probe({'x': torch.zeros(2)})
    taken = model.probe_data()
    assert isinstance(taken['x'], ProbeData) and model.collect_probe() == {}


DIGITS_SHAPE = (4, 8, 8)  # img[:4] of the digits: four grey 8x8 images, or one 8x8 RGBA image in CxHxW


def test_probe_image_batch_says_what_the_first_axis_is(caplog):
    """[4, 8, 8] read both ways: left to the shape it is one RGBA image, with a warning naming ``batch``;
    ``batch=True`` makes four grey images, ``batch=False`` one image without the warning."""
    x = torch.rand(DIGITS_SHAPE)
    with caplog.at_level('WARNING', logger='scepter_like'):
        images, batched = ProbeImage(x).to_uint8_images('input')
    assert not batched and [i.shape for i in images] == [(8, 8, 4)]
    assert "probe 'input': shape (4, 8, 8) is read as one 4-channel CxHxW image" in caplog.text
    assert 'batch=True' in caplog.text
    caplog.clear()
    images, batched = ProbeImage(x, batch=True).to_uint8_images('input')
    assert batched and [i.shape for i in images] == [(8, 8)] * 4
    assert ProbeImage(x[:, None]).to_uint8_images('input')[0][0].shape == (8, 8)  # Nx1xHxW: the same
    assert [i.shape for i in ProbeImage(x, batch=False).to_uint8_images('input')[0]] == [(8, 8, 4)]
    assert ProbeImage(torch.rand(3, 8, 8), batch=False).to_uint8_images('rgb')[0][0].shape == (8, 8, 3)
    assert caplog.text == ''
    for probe, message in [
        (ProbeImage(torch.rand(8, 8), batch=True), r'a batch \(batch=True\) must be NxHxW'),
        (ProbeImage(torch.rand(2, 3, 8, 8), batch=False), r'an image \(batch=False\) must be HxW'),
    ]:
        with pytest.raises(DataError, match=message):
            probe.to_uint8_images('x')


@pytest.mark.slow
def test_the_documented_probe_example_writes_four_digits(tmp_path, digits_args):
    """docs/training_features.md's MySolver on the shipped digits config: four 8x8 PNGs, epoch 1 in meta.json
    (metrics.jsonl counts epochs from 1); the example without ``batch=True`` wrote one 8x8 RGBA image."""
    from conftest import REPO, run_cli

    text = open(os.path.join(REPO, 'docs', 'training_features.md')).read()
    example = next(b for b in re.findall(r'```python\n(.*?)```', text, re.S) if 'register_probe(' in b)
    (tmp_path / 'probe_ext.py').write_text(example)
    hook = 'SOLVER.TRAIN_HOOKS+=[{NAME: ProbeDataHook, PROB_INTERVAL: 2}]'
    res = run_cli(
        'run_train.py',
        *digits_args,
        '--import',
        tmp_path / 'probe_ext.py',
        'SOLVER.NAME=MySolver',
        hook,
        'SOLVER.MAX_EPOCHS=1',
        'SOLVER.MAX_STEPS=2',
        'SOLVER.LR_SCHEDULER.T_MAX=1',
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    meta = json.loads((tmp_path / 'run' / 'train_probe' / 'probe-2' / 'meta.json').read_text())
    assert meta['epoch'] == 1 and meta['step'] == 2
    assert meta['entries']['input'] == {
        'kind': 'image',
        'files': [f'input_{i}.png' for i in range(4)],
        'shape': [8, 8],
        'dtype': 'uint8',
    }
    assert 'is read as one' not in res.stdout + res.stderr
