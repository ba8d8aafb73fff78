"""ProbeDataHook: dump what a step hands to ``solver.register_probe({...})`` to files.

A step (model code, a solver subclass, a callback) calls
``solver.register_probe({'input': ProbeImage(x[0]), 'logits': logits, 'note': 'text'})``;
on the steps this hook dumps — every PROB_INTERVAL-th train step, and the first batch of
every eval / test pass when the hook is listed in EVAL_HOOKS / TEST_HOOKS — it writes, on
rank 0 only, into ``WORK_DIR/{mode}_probe/{SAVE_NAME_PREFIX}-{step}/`` (step: train steps
done):

- ``ProbeImage(data)`` -> ``{name}.png`` (a batch -> ``{name}_{i}.png``);
- other tensors / numpy arrays -> ``{name}.npy``;
- numbers, 0-dim tensors, text, lists and dicts -> ``{name}.json``;
- ``meta.json``: the index (mode, step, epoch (1-based), and per name its kind, files, shape, dtype),
  written last, so a folder with ``meta.json`` is complete.

What other steps register is dropped at their end (the model's too).  Outside a step it keeps
what it is given: an eval / test pass's probes (its first batch's, and those a ``run_eval`` of
scepter's registers after its loop) are written together at the pass's ``after_all_iter``.
"""

import io
import json
import os
import re

import numpy as np
import torch

from scepter_like.errors import DataError
from scepter_like.solver.hooks.hook import PRIORITY_PROBE, Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.checkpoint import atomic_write, atomic_write_text
from scepter_like.utils.probe import ProbeData, ProbeImage  # ProbeImage: where users import it from


def _safe_name(name):
    return re.sub(r'[^A-Za-z0-9._-]', '_', str(name))


@HOOKS.register_class()
class ProbeDataHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_PROBE, 'description': 'after BackwardHook and the log'},
        'PROB_INTERVAL': {'value': 1000, 'description': 'dump the probes of every this many train steps'},
        'SAVE_NAME_PREFIX': {'value': 'probe', 'description': 'folder name prefix: {prefix}-{step}'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.interval = cfg.PROB_INTERVAL
        self.prefix = cfg.SAVE_NAME_PREFIX

    def before_iter(self, solver: SolverSurface):
        if not solver.is_main or self.interval <= 0:
            return
        progress = solver.progress
        due = (
            (progress.total_iter + 1) % self.interval == 0
            if solver.mode == 'train'
            else progress.iters[solver.mode] == 0
        )
        if due:
            solver.request_probes()

    def before_all_iter(self, solver: SolverSurface):
        if solver.mode != 'train':
            solver.pop_probes()  # a pass starts from nothing

    def after_iter(self, solver: SolverSurface):
        if solver.mode == 'train' and solver.step.probe_wanted:
            self._dump_popped(solver)

    def after_all_iter(self, solver: SolverSurface):
        if solver.mode != 'train':  # the pass's first batch, and what was registered after its loop
            self._dump_popped(solver)

    def _dump_popped(self, solver: SolverSurface):
        probes = solver.pop_probes()
        if probes and solver.is_main:
            step, epoch = solver.progress.total_iter, solver.progress.epoch + 1  # 1-based, as metrics.jsonl's
            folder = os.path.join(solver.work_dir, f'{solver.mode}_probe', f'{self.prefix}-{step}')
            self.dump(probes, folder, {'mode': solver.mode, 'step': step, 'epoch': epoch})

    @staticmethod
    def dump(probes, folder, meta):
        """Write ``probes`` into ``folder`` and index them in ``meta.json``."""
        entries = {}
        for name, value in probes.items():
            base = _safe_name(name)
            if isinstance(value, ProbeData):  # scepter's probe object (a model of scepter's registers it)
                value = ProbeImage(value.data) if value.is_image else value.data
            if isinstance(value, ProbeImage):
                entries[name] = _write_images(*value.to_uint8_images(name), folder, base)
            elif isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0:
                arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
                atomic_write(os.path.join(folder, base + '.npy'), lambda f, a=arr: np.save(f, a))
                entries[name] = {'kind': 'array', 'files': [base + '.npy'], 'shape': list(arr.shape)}
                entries[name]['dtype'] = str(arr.dtype)
            else:
                plain = value.item() if isinstance(value, (torch.Tensor, np.ndarray, np.generic)) else value
                try:
                    text = json.dumps(plain, indent=1)
                except TypeError:
                    raise DataError(
                        f'probe {name!r}: {type(value).__name__} is not an image, array, number or text;'
                        ' wrap images in ProbeImage, pass tensors, or convert it to JSON-able values'
                    ) from None
                atomic_write_text(os.path.join(folder, base + '.json'), text)
                entries[name] = {'kind': 'json', 'files': [base + '.json']}
        atomic_write_text(os.path.join(folder, 'meta.json'), json.dumps({**meta, 'entries': entries}, indent=1))


def _write_images(images, batched, folder, base):
    from PIL import Image

    names = [f'{base}_{i}.png' for i in range(len(images))] if batched else [f'{base}.png']
    for img, fname in zip(images, names):
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(img)).save(buf, format='PNG')
        atomic_write(os.path.join(folder, fname), lambda f, b=buf: f.write(b.getvalue()))
    return {'kind': 'image', 'files': names, 'shape': list(images[0].shape), 'dtype': 'uint8'}
