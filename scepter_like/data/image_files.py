"""Image files as classification data: a folder per class (ImageFolderDataset) or a list file (ImageListDataset).

Items are ``{'img': PIL image (RGB), 'label': int, 'meta': {'img_path': path}}``.  The
file is decoded in ``__getitem__``, i.e. in the loader's workers; one that cannot be
decoded (missing, not an image, truncated) is one error naming the file and the item.
"""

import os

import torch

from scepter_like.data.registry import DATASETS
from scepter_like.errors import DataError
from scepter_like.transform.io import read_image

IMAGE_EXTENSIONS = ('.bmp', '.gif', '.jpeg', '.jpg', '.pgm', '.png', '.ppm', '.tif', '.tiff', '.webp')


class ImageFileDataset(torch.utils.data.Dataset):
    """``samples``: a list of (image path, class index), decoded on access."""

    def __init__(self, samples, where):
        if not samples:
            raise DataError(f'{where}: no images found; see the description of the dataset for the layout')
        self.samples = samples
        self.where = where  # names the data config in errors

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        try:
            img = read_image(path)
        except DataError as e:
            raise DataError(f'{self.where}: item {index}: {e}') from e
        return {'img': img, 'label': label, 'meta': {'img_path': path}}


def _is_image(name):
    """An image file by its extension; hidden names (macOS's ``._x.png``, editors' ``.x.png``) are no data."""
    return not _hidden(name) and name.lower().endswith(IMAGE_EXTENSIONS)


def _hidden(name):
    """Names starting with '.' (``.ipynb_checkpoints``, ``.DS_Store``, ``._x.png``) are skipped, as torchvision's
    ImageFolder and most tools skip them."""
    return name.startswith('.')


@DATASETS.register_class()
class ImageFolderDataset(ImageFileDataset):
    """DATA_ROOT/<class>/**/<image>: the classes are the sub-folders in sorted order, or CLASSES (label = position);
    names starting with '.' are skipped."""

    para_dict = {
        'DATA_ROOT': {
            'value': None,
            'type': str,
            'required': True,
            'description': f'folder with one sub-folder of images per class ({", ".join(IMAGE_EXTENSIONS)})',
        },
        'CLASSES': {
            'value': [],
            'description': 'folder names in class-index order ([]: the sub-folders, sorted); a split may lack one',
        },
    }

    def __init__(self, cfg, logger=None):
        self.classes, samples = list_image_folder(cfg.DATA_ROOT, cfg.path_of('DATA_ROOT'), list(cfg.CLASSES))
        super().__init__(samples, cfg.path)


def _walk(folder):
    """The image files under ``folder``, hidden files and folders skipped, through symlinked sub-folders too (as
    torchvision's ImageFolder), each real folder once (a link back up would loop)."""
    seen = set()
    for path, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(path)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [name for name in dirs if not _hidden(name)]
        yield from (os.path.join(path, name) for name in names if _is_image(name))


def list_image_folder(root, where, classes=()):
    """(class names, [(path, class index), ...]) of ``root/<class>/**/<image>``: the classes given (each folder must
    be one of them), else the sub-folders in sorted order."""
    if not os.path.isdir(root):
        raise DataError(f'{where}: no folder {root}; give the folder that holds one sub-folder of images per class')
    folders = sorted(e.name for e in os.scandir(root) if e.is_dir() and not _hidden(e.name))
    if not folders:
        raise DataError(f'{where}: {root} has no sub-folders; put the images of each class in a folder of its own')
    unknown = [name for name in folders if classes and name not in classes]
    if unknown:
        raise DataError(f'{where}: {root} has class folder(s) {unknown} that CLASSES {list(classes)} lacks; add them')
    samples = []
    for name in folders:
        folder = os.path.join(root, name)
        files = sorted(_walk(folder))
        if not files:
            raise DataError(
                f'{where}: class folder {folder} holds no image files; fill it (or remove it, and give'
                ' every split the same CLASSES)'
            )
        samples += [(f, (classes or folders).index(name)) for f in files]
    return list(classes or folders), samples


@DATASETS.register_class()
class ImageListDataset(ImageFileDataset):
    """LIST_FILE lines ``path label`` (label: a class index; blank lines and ``#`` comments skipped); every file
    must exist when the dataset is built."""

    para_dict = {
        'LIST_FILE': {
            'value': None,
            'type': str,
            'required': True,
            'description': 'text file of "path label" lines, e.g. "cat/001.jpg 3"',
        },
        'DATA_ROOT': {'value': '', 'description': "folder relative paths start from ('': the list file's folder)"},
    }

    def __init__(self, cfg, logger=None):
        path, where = cfg.LIST_FILE, cfg.path_of('LIST_FILE')
        if not os.path.isfile(path):
            raise DataError(f'{where}: file not found: {path}')
        root = cfg.DATA_ROOT or os.path.dirname(os.path.abspath(path))
        samples = []
        with open(path, encoding='utf-8') as f:
            for number, line in enumerate(f, 1):
                text = line.strip()
                if text and not text.startswith('#'):
                    samples.append(_list_entry(text, root, f'{where}: line {number} of {path}'))
        super().__init__(samples, cfg.path)


def _list_entry(text, root, where):
    """(path under ``root``, class index) of one ``path label`` line naming an existing file; a DataError naming the
    line otherwise."""
    parts = text.rsplit(None, 1)
    if len(parts) < 2:
        raise DataError(f'{where} ({text!r}) has no label; write "path label" on each line, the label a class index')
    name, label = parts
    if not label.isdigit():
        raise DataError(f'{where} ({text!r}): the label {label!r} is not a class index (a whole number >= 0)')
    path = os.path.join(root, name)
    if not os.path.isfile(path):  # found now, not when a worker reads it epochs later
        raise DataError(f'{where} ({text!r}): no file {path}; correct the path (relative to {root})')
    return path, int(label)
