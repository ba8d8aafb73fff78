"""ImageClassifyPublicDataset: scepter's CIFAR-10 / CIFAR-100 dataset, read from the python-pickle files on disk.

Nothing is downloaded.  DATA_ROOT is the folder holding ``cifar-10-batches-py`` (or
``cifar-100-python``) as the archives from https://www.cs.toronto.edu/~kriz/cifar.html
unpack (torchvision's ``root``), or that folder itself.  The files are unpickled with
numpy's array classes as the only classes allowed, so a file cannot run code.

Items are scepter's: ``{'meta': {}, 'label': int64, 'img': PIL image}``; the PIL image is
made in ``__getitem__``, i.e. in the loader's workers.
"""

import codecs
import os
import pickle

import numpy as np

from scepter_like.data.dataset.base_dataset import BaseDataset
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError, DataError

CIFAR_URL = 'https://www.cs.toronto.edu/~kriz/cifar.html'
CIFAR = {
    'cifar10': {
        'title': 'CIFAR-10',
        'folder': 'cifar-10-batches-py',
        'archive': 'cifar-10-python.tar.gz',
        'train': [f'data_batch_{i}' for i in range(1, 6)],
        'test': ['test_batch'],
        'labels': 'labels',
    },
    'cifar100': {
        'title': 'CIFAR-100',
        'folder': 'cifar-100-python',
        'archive': 'cifar-100-python.tar.gz',
        'train': ['train'],
        'test': ['test'],
        'labels': 'fine_labels',
    },
}
IMAGE_SHAPE = (3, 32, 32)  # each row of a file's 'data': the red, green and blue planes of a 32x32 image


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays, lists, dicts, strings and numbers, and nothing else."""

    def find_class(self, module, name):
        if (module, name) == ('_codecs', 'encode'):  # how Python 3 writes bytes at pickle protocol 2
            return codecs.encode
        if module in ('numpy.core.multiarray', 'numpy._core.multiarray') and name in ('_reconstruct', 'scalar'):
            return getattr(_multiarray(), name)
        if module == 'numpy' and name in ('ndarray', 'dtype'):
            return getattr(np, name)
        raise pickle.UnpicklingError(f'{module}.{name} is not allowed in a CIFAR file')


def _multiarray():
    try:
        from numpy._core import multiarray  # numpy >= 2
    except ImportError:
        from numpy.core import multiarray
    return multiarray


def read_cifar_file(path, label_key):
    """(images uint8 [N, 32, 32, 3], labels int64 [N]) of one CIFAR python file; DataError if it is not one."""
    try:
        with open(path, 'rb') as f:
            entry = _ArrayUnpickler(f, encoding='latin1').load()
        data, labels = np.asarray(entry['data']), np.asarray(entry[label_key], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as e:
        raise DataError(
            f'{path} is not a CIFAR python file ({type(e).__name__}: {e}); unpack the archive again'
        ) from None
    size = int(np.prod(IMAGE_SHAPE))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != size or len(labels) != len(data):
        raise DataError(
            f'{path}: expected uint8 data [N, {size}] and N labels, got {data.dtype} {list(data.shape)} and'
            f' {len(labels)} labels; unpack the archive again'
        )
    return data.reshape(-1, *IMAGE_SHAPE).transpose(0, 2, 3, 1), labels


def cifar_folder(root, spec, where):
    """The folder holding ``spec``'s files: ``root/<folder>`` or ``root``; else one line saying where they go."""
    for folder in (os.path.join(root, spec['folder']), root):
        if all(os.path.isfile(os.path.join(folder, name)) for name in spec['train'] + spec['test']):
            return folder
    target = os.path.join(os.path.abspath(root), spec['folder'])
    files = ', '.join(spec['train'][:1] + (['...', spec['train'][-1]] if len(spec['train']) > 1 else []) + spec['test'])
    raise DataError(
        f'{where}: no {spec["title"]} data in {os.path.abspath(root)}; put the python version there: unpack'
        f' {spec["archive"]} from {CIFAR_URL} into {os.path.abspath(root)}, which gives {target}/ ({files});'
        ' nothing is downloaded'
    )


@DATASETS.register_class()
class ImageClassifyPublicDataset(BaseDataset):
    """CIFAR-10 or CIFAR-100 (DATASET) from DATA_ROOT: the training files for MODE train, else the test file."""

    para_dict = {
        'DATASET': {
            'value': 'cifar10',
            'description': 'the public dataset: cifar10 | cifar100',
            'choices': list(CIFAR),
        },
        'DATA_ROOT': {
            'value': '',
            'description': 'folder of cifar-10-batches-py / cifar-100-python (the unpacked archive); never downloaded',
        },
    }
    para_dict.update(BaseDataset.para_dict)

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        if not cfg.DATA_ROOT:
            raise ConfigError(
                f'{cfg.path_of("DATA_ROOT")}: give the folder that holds {CIFAR[cfg.DATASET]["folder"]}'
                f' (the unpacked {CIFAR[cfg.DATASET]["archive"]} from {CIFAR_URL})'
            )
        spec = CIFAR[cfg.DATASET]
        folder = cifar_folder(cfg.DATA_ROOT, spec, cfg.path_of('DATA_ROOT'))
        names = spec['train'] if self.mode == 'train' else spec['test']
        parts = [read_cifar_file(os.path.join(folder, name), spec['labels']) for name in names]
        self.images = np.ascontiguousarray(np.concatenate([images for images, _ in parts]))
        self.labels = np.concatenate([labels for _, labels in parts])

    def __len__(self):
        return len(self.labels)

    def _get(self, index):
        from PIL import Image

        return {'meta': {}, 'label': self.labels[index], 'img': Image.fromarray(self.images[index])}
