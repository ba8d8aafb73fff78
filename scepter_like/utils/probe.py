"""``scepter.modules.utils.probe`` maps here: ``ProbeData``, the value a probe hands to scepter's ProbeDataHook.

scepter's hook calls ``value.to_log(prefix)`` on each probe: a number, text, or a list / dict
of them comes back as it is (it goes into ``meta.json``); an array (a tensor becomes one) is
written next to ``prefix`` and its file name comes back, as an image with ``is_image=True``.
scepter's videos, HTML pages and value distributions (``is_video``, ``build_html``,
``view_distribute``) are not provided: such a probe is an error naming it.
"""

import copy
import io
import logging
import os
from numbers import Number

import numpy as np
import torch

from scepter_like.errors import DataError
from scepter_like.utils.checkpoint import atomic_write


def is_plain(data):
    """A number, text, or a list / dict of them: what goes into meta.json as it is (scepter's check_legal_type)."""
    if isinstance(data, (str, Number)):
        return True
    if isinstance(data, dict):
        return all(is_plain(v) for v in data.values())
    if isinstance(data, list):
        return all(is_plain(v) for v in data)
    return False


class ProbeData:
    """One probe: an array (a tensor is copied to the CPU) or plain data, with how scepter writes it."""

    def __init__(
        self,
        data,
        is_image=False,
        is_video=False,
        fps=8,
        build_html=False,
        build_label=None,
        view_distribute=False,
        is_presave=False,
    ):
        if is_video or build_html or view_distribute:
            raise DataError(
                'ProbeData: is_video, build_html and view_distribute are not provided here'
                ' (docs/porting_from_scepter.md); register the frames or values as arrays'
            )
        if isinstance(data, torch.Tensor):
            data = data.detach().cpu().numpy()
        elif isinstance(data, (np.generic,)):
            data = data.item()
        if not isinstance(data, np.ndarray) and not is_plain(data):
            raise DataError(
                f'ProbeData: {type(data).__name__} is not an array, number or text, nor a list / dict'
                ' of numbers and text'
            )
        self.data = data if isinstance(data, np.ndarray) else copy.deepcopy(data)
        self.is_image = is_image
        self.is_presave = is_presave

    def to_log(self, prefix=None, image_postfix='jpg', video_postfix='mp4', rank=0):
        """Plain data as it is; an array written under ``prefix``: its file (a batch of images: their files)."""
        if not isinstance(self.data, np.ndarray):
            return self.data
        shape = '_'.join(str(n) for n in self.data.shape)
        if not self.is_image:
            path = f'{prefix}_{rank}_{shape}.npy'
            atomic_write(path, lambda f: np.save(f, self.data))
            return path
        if self.data.ndim == 4:  # a batch: one folder, a file per image (scepter's names)
            files = [os.path.join(prefix, f'probe_{rank}_{i}_[{shape}].{image_postfix}') for i in range(len(self.data))]
            for image, path in zip(self.data, files):
                _write_image(image, path, image_postfix)
            return {'ori_file': [files]}
        path = f'{prefix}_probe_{rank}_[{shape}].{image_postfix}'
        _write_image(self.data, path, image_postfix)
        return path


def _write_image(array, path, postfix):
    from PIL import Image

    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format='PNG' if postfix.lower() == 'png' else 'JPEG')
    atomic_write(path, lambda f: f.write(buf.getvalue()))


_CHANNELS = (1, 3, 4)
_LAYOUTS = {  # ProbeImage's batch -> the shapes it takes
    None: 'an image must be HxW, HxWxC, CxHxW or a batch of them',
    False: 'an image (batch=False) must be HxW, HxWxC or CxHxW',
    True: 'a batch (batch=True) must be NxHxW, NxHxWxC or NxCxHxW',
}


class ProbeImage:
    """Marks a tensor / array as an image (or a batch of images) for ProbeDataHook.

    Layouts: HxW, HxWxC, CxHxW (C in 1, 3, 4) and NxCxHxW / NxHxWxC batches.  uint8 is
    written as is; other dtypes are mapped from VALUE_RANGE (default 0..1) to 0..255 and clipped.
    ``batch`` says what the first axis is: True, a batch (a 3-D NxHxW is N grey images); False,
    one image; None (the default), the shape decides: 4-D is a batch.  A 3-D shape whose first
    axis is 3 or 4 and whose last is no channel count reads both ways (RGB / RGBA CxHxW, or a
    ``[:4]`` slice of grey images): it is one image, with a warning that ``batch`` settles it.
    """

    def __init__(self, data, value_range=(0.0, 1.0), batch=None):
        self.data = data
        self.value_range = value_range
        self.batch = batch

    def to_uint8_images(self, name):
        """(list of HxW / HxWxC uint8 arrays, whether the data was a batch)."""
        arr = self.data.detach().cpu().numpy() if isinstance(self.data, torch.Tensor) else np.asarray(self.data)
        batched = arr.ndim == 4 if self.batch is None else bool(self.batch)
        if arr.ndim not in ((3, 4) if batched else (2, 3)):
            raise DataError(f'probe {name!r}: {_LAYOUTS[self.batch]}, got {arr.shape}')
        if self.batch is None and arr.ndim == 3 and arr.shape[0] in (3, 4) and arr.shape[-1] not in _CHANNELS:
            logging.getLogger(__name__).warning(
                f'probe {name!r}: shape {tuple(arr.shape)} is read as one {arr.shape[0]}-channel CxHxW image; if its'
                f' first axis is a batch of {arr.shape[0]} grey images, give ProbeImage(x, batch=True) (or x[:, None]);'
                ' batch=False keeps one image without this warning'
            )
        return [_to_uint8(_hwc(a, name), self.value_range) for a in (arr if batched else [arr])], batched


def _hwc(arr, name):
    if arr.ndim == 2:
        return arr
    if arr.shape[-1] in _CHANNELS:
        hwc = arr
    elif arr.shape[0] in _CHANNELS:
        hwc = arr.transpose(1, 2, 0)
    else:
        raise DataError(f'probe {name!r}: no channel axis of size 1, 3 or 4 in image shape {arr.shape}')
    return hwc[..., 0] if hwc.shape[-1] == 1 else hwc


def _to_uint8(arr, value_range):
    if arr.dtype == np.uint8:
        return arr
    lo, hi = value_range
    scaled = (arr.astype(np.float64) - lo) / (hi - lo) * 255.0
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def as_probe_data(value):
    """A registered probe value as scepter's hook takes it: a ProbeData (a ProbeImage becomes an image one)."""
    if isinstance(value, ProbeData):
        return value
    if isinstance(value, ProbeImage):
        images, batched = value.to_uint8_images('probe')
        if batched:  # NxHxWxC, a channel axis kept for grey images too (scepter's batch layout)
            return ProbeData(np.stack([i if i.ndim == 3 else i[..., None] for i in images]), is_image=True)
        return ProbeData(images[0], is_image=True)
    return ProbeData(value)
