"""Generic in-memory datasets.

``ArrayDataset`` keeps every field as one tensor and serves a whole batch with one
indexing operation per field (``__getitems__``), so the DataLoader adds next to nothing
to the step time of a hand-written loop that slices tensors itself.
"""

import os

import numpy as np
import torch

from scepter_like.data.collate import BatchDict
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError, DataError, suggest


class ArrayDataset(torch.utils.data.Dataset):
    """A dict of equally long tensors; item ``i`` is ``{key: tensor[i]}``.

    Floating arrays are held in the model's dtype (``floating_as_default``: torch's default
    dtype is SOLVER.DTYPE while the solver builds its data): numpy's float64 arrays become
    float32 for a float32 model once, here.
    """

    FIRST_ROW_LINE = None  # a text table's file line of row 0 (CsvDataset: 2), for messages naming a row

    def __init__(self, arrays, source='a dataset', names=None, where=None):
        """``names``: {batch key: the source's name of its array} where they differ (NpzDataset's KEY_MAP);
        ``where``: the config path of the dataset, for an error about the arrays as a whole."""
        if not arrays:
            raise DataError(f'{source}: a dataset needs at least one array')
        self.arrays = {
            k: floating_as_default(torch.as_tensor(numeric(v, f'{source}: array {k!r}'))) for k, v in arrays.items()
        }
        for key, array in self.arrays.items():
            reject_nonfinite(array, f'{source}: array {key!r}', self.FIRST_ROW_LINE)
        lengths = {k: len(v) for k, v in self.arrays.items()}
        if len(set(lengths.values())) != 1:
            names = names or {}
            said = ', '.join(
                f'{names.get(k, k)!r}' + (f' (batch key {k!r})' if names.get(k, k) != k else '') + f': {n}'
                for k, n in lengths.items()
            )
            raise DataError(
                f'{where + ": " if where else ""}the arrays of {source} differ in length ({said}); every array holds'
                ' one entry per sample'
            )
        self._len = next(iter(lengths.values()))

    def __len__(self):
        return self._len

    def __getitem__(self, index):
        return {k: v[index] for k, v in self.arrays.items()}

    def __getitems__(self, indices):
        return BatchDict(self.take(torch.as_tensor(indices, dtype=torch.long)))

    def set_dtypes(self, dtypes, where):
        """Hold each key of ``dtypes`` (``{key: torch dtype name}``: the DTYPES at ``where``) in its dtype."""
        for key, name in dtypes.items():
            if key not in self.arrays:
                raise DataError(f'{where}: no batch key {key!r}; the keys are {sorted(self.arrays)}')
            dtype = getattr(torch, str(name), None)
            if not isinstance(dtype, torch.dtype):
                raise ConfigError(f'{where}.{key}: {name!r} is not a torch dtype; write e.g. float32, float64, int64')
            self.arrays[key] = self.arrays[key].to(dtype)

    def take(self, idx):
        """The batch of the samples at ``idx`` (a LongTensor) as a dict: one ``index_select`` per field."""
        return {k: v.index_select(0, idx) for k, v in self.arrays.items()}


def numeric(value, where):
    """``value`` as a numpy array of numbers (torch takes no other); text or objects are a DataError saying how
    to give class names as numbers."""
    array = np.asarray(value)
    if array.dtype.kind in 'biufc':
        return array
    raise DataError(
        f'{where} holds {array.dtype} values, not numbers; text class labels: save their indices'
        ' (names, label = np.unique(texts, return_inverse=True)), or read a CSV file with CsvDataset (LABEL_COLUMN,'
        ' CLASSES); other text (ids, names): save the arrays without it, as every array becomes a batch key'
    )


def reject_nonfinite(array, where, first_row_line=None):
    """A DataError when floating ``array`` (a tensor or numpy array) holds NaN or inf: a model fed one computes a
    NaN loss, and the run would stop steps later far from the cause (the row is named here, and its line when the
    rows come from a text file whose row 0 is line ``first_row_line``)."""
    tensor = torch.as_tensor(array)
    if not tensor.is_floating_point() or tensor.dim() == 0 or bool(torch.isfinite(tensor).all()):
        return
    bad_rows = (~torch.isfinite(tensor)).reshape(len(tensor), -1).any(1).nonzero()[:, 0].tolist()
    line = '' if first_row_line is None else f', line {bad_rows[0] + first_row_line} of the file'
    raise DataError(
        f'{where}: NaN or inf in {len(bad_rows)} row(s), the first at row {bad_rows[0]} (0-based{line});'
        ' drop or fill those rows'
    )


def floating_as_default(tensor):
    """A floating ``tensor`` in torch's default dtype (SOLVER.DTYPE) where the loop would not cast its batches.

    The loop casts each batch to a SOLVER.DTYPE other than float32, so for float64 a narrower
    array stays as it is (no float64 copy of the data); a wider one is always cast (numpy's
    float64 for a float32 model), and for float32 every other floating dtype is.
    """
    default = torch.get_default_dtype()
    if not tensor.is_floating_point() or tensor.dtype == default:
        return tensor
    if default == torch.float32 or tensor.dtype.itemsize > default.itemsize:
        return tensor.to(default)
    return tensor


ZIP_MAGICS, NPY_MAGIC = (b'PK\x03\x04', b'PK\x05\x06'), b'\x93NUMPY'  # a zip (np.savez; empty), np.save's
NPZ_FILE = 'an .npz archive (np.savez)'


def binary_kind(path):
    """What numpy file ``path`` is by its first bytes, said for a message, or None: a file of the other kind than
    a dataset reads otherwise fails deep inside numpy or the csv module."""
    with open(path, 'rb') as f:
        head = f.read(len(NPY_MAGIC))
    if head.startswith(ZIP_MAGICS):
        return NPZ_FILE
    if head.startswith(NPY_MAGIC):
        return 'a single .npy array (np.save)'
    return None


def npz_array(data, name, path):
    """``data[name]`` of an open .npz; an array of Python objects (pickled, which np.load refuses) a DataError."""
    try:
        return data[name]
    except ValueError as e:
        if 'allow_pickle' not in str(e):
            raise
        raise DataError(
            f'{path}: array {name!r} holds Python objects (dtype object), which are not loaded (pickle runs code);'
            ' save arrays of numbers, e.g. np.asarray(values, dtype=np.float32)'
        ) from None


@DATASETS.register_class()
class NpzDataset(ArrayDataset):
    """Arrays of an ``.npz`` file; ``KEY_MAP`` renames file arrays to batch keys."""

    para_dict = {
        'PATH': {'value': '', 'description': 'path of the .npz file', 'required': True},
        'KEY_MAP': {'value': {}, 'description': 'file array name -> batch key (others keep their names)'},
        'DTYPES': {'value': {}, 'description': 'batch key -> torch dtype name, e.g. {img: float32}'},
    }

    def __init__(self, cfg, logger=None):
        path = cfg.PATH
        if not os.path.isfile(path):
            raise DataError(f'{cfg.path_of("PATH")}: file not found: {path}')
        kind = binary_kind(path)
        if kind != NPZ_FILE:
            table = ' (a CSV table is read by CsvDataset)' if path.lower().endswith(('.csv', '.tsv', '.txt')) else ''
            raise DataError(
                f'{cfg.path_of("PATH")}: {path} is {kind or "not an .npz archive"}{table}; NpzDataset reads named'
                ' arrays saved with np.savez(path, x=features, label=labels)'
            )
        with np.load(path, allow_pickle=False) as data:
            missing = [name for name in cfg.KEY_MAP if name not in data.files]
            if missing:
                raise DataError(
                    f'{cfg.path_of("KEY_MAP")}: {path} has no array {missing[0]!r}{suggest(missing[0], data.files)}'
                    f' (its arrays: {data.files})'
                )
            keys = [cfg.KEY_MAP.get(k, k) for k in data.files]
            taken = sorted({k for k in keys if keys.count(k) > 1})
            if taken:
                sources = [name for name in data.files if cfg.KEY_MAP.get(name, name) == taken[0]]
                raise DataError(
                    f'{cfg.path_of("KEY_MAP")}: arrays {sources} of {path} would all become batch key {taken[0]!r};'
                    ' rename the one it holds by that name too, or map another'
                )
            arrays = {key: npz_array(data, name, path) for key, name in zip(keys, data.files)}
        super().__init__(arrays, path, dict(zip(keys, data.files)), cfg.path)
        self.set_dtypes(cfg.DTYPES, cfg.path_of('DTYPES'))
