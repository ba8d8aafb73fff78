"""Batch collation that lets datasets hand over ready-made batches."""

from collections.abc import Mapping

import torch
from torch.utils.data import default_collate

from scepter_like.errors import DataError
from scepter_like.transform.backends import describe_value, is_pil_image


class BatchDict(dict):
    """A dict that already is a batch: collate passes it through unchanged."""


class DictCollate:
    """The loaders' collate: a ``BatchDict`` passes through; dict items go through torch's ``default_collate``,
    their floating values cast to ``dtype`` (numpy's float64 items for a float32 model).

    ``source`` names the dataset in the error (``DATASETS.X (module.Class) at SOLVER.TRAIN_DATA``),
    since the model call ``model(**batch)`` needs named fields.  One isinstance per batch.
    """

    def __init__(self, source, dtype=None):
        self.source = source
        self.dtype = dtype  # floating tensors of a batch come out in it (the model's: SOLVER.DTYPE)

    def __call__(self, samples):
        if isinstance(samples, BatchDict):
            return samples
        if samples and not isinstance(samples[0], Mapping):
            raise not_a_dict(self.source, samples[0])
        try:
            batch = default_collate(samples)
        except TypeError:
            raise self._unbatchable(samples) from None
        except RuntimeError as e:  # torch.stack of items of different shapes
            raise self._uneven(samples) or e from None
        if self.dtype is not None:
            for key, value in batch.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != self.dtype:
                    batch[key] = value.to(self.dtype)
        return batch

    def _unbatchable(self, samples):
        """The error naming the first key whose values torch cannot batch (a PIL image, say); else a general one."""
        for key, value in samples[0].items():
            try:
                default_collate([sample[key] for sample in samples])
            except TypeError:
                hint = ' (an image: end TRANSFORMS with ImageToTensor)' if is_pil_image(value) else ''
                return DataError(
                    f'{self.source}: sample key {key!r} holds {describe_value(value)}{hint}, which torch cannot batch;'
                    ' turn it into a tensor, array or number (TRANSFORMS ImageToTensor / ToTensor), or drop it (Select)'
                )
        return DataError(f'{self.source}: torch cannot batch these samples; give tensors, arrays and numbers')

    def _uneven(self, samples):
        """The error naming the first key whose items differ in shape (images of other sizes), or None."""
        for key, value in samples[0].items():
            shapes = [tuple(getattr(sample[key], 'shape', ())) for sample in samples]
            if hasattr(value, 'shape') and len(set(shapes)) > 1:
                other = next(i for i, shape in enumerate(shapes) if shape != shapes[0])
                meta = samples[other].get('meta')
                where = f' ({meta["img_path"]})' if isinstance(meta, Mapping) and 'img_path' in meta else ''
                return DataError(
                    f'{self.source}: the items of a batch differ in the shape of {key!r}: {list(shapes[0])} and'
                    f' {list(shapes[other])}{where}; give them one size (TRANSFORMS Resize / CenterCrop for images)'
                )
        return None


def not_a_dict(source, item):
    """The error for a dataset whose items are not dicts of named fields."""
    return DataError(
        f'{source} returns {type(item).__name__} items; its __getitem__ must return a dict of'
        " named fields (the model is called as model(**batch)), e.g. {'img': x, 'label': y}"
    )
