"""ProbeDataHook: register_probe from a step writes PNG / .npy / JSON files and a meta.json index."""

import json

import numpy as np
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs
from PIL import Image

from scepter_like.solver import SOLVERS
from scepter_like.solver.hooks.probe import ProbeImage
from scepter_like.solver.train_val_solver import TrainValSolver

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
    assert meta['mode'] == 'train' and meta['step'] == 3
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
    assert eval_meta['entries']['logits']['shape'] == [16, 3]
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
