"""DigitsImagesDataset: scikit-learn's digits as 32x32 PNG files, one folder per class, made on first use.

The first run writes DATA_ROOT/{train,val,test}/<digit>/<row>.png: the 8x8 images of
DigitsDataset's splits (its default fractions and seed, so the two tasks are comparable)
scaled to 32x32 grey PNGs.  The files go to a temporary folder beside DATA_ROOT, are
flushed to the disk, and the folder is renamed to DATA_ROOT once complete: a crash never leaves a
half-made cache (only a ``.tmp.digits_images.*`` folder, which is safe to delete), and
processes that render at once (the ranks of one run) keep whichever finished first.
Nothing is downloaded: the digits ship inside scikit-learn.
"""

import os
import shutil
import tempfile

import numpy as np

from scepter_like.data.image_files import ImageFileDataset, list_image_folder
from scepter_like.data.registry import DATASETS
from scepter_like.utils.checkpoint import fsync_file
from tasks.cate_recognition.digits import split_indices

IMAGE_SIZE = 32
SPLITS = ('train', 'val', 'test')
DEFAULT_ROOT = './cache/digits_images'


def render_digits(folder):
    """Write every split's images into ``folder`` (which exists and is empty)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    data = load_digits()
    pixels = np.round(data.images / 16.0 * 255).astype(np.uint8)
    indices = split_indices(data.target)
    for split in SPLITS:
        for row in indices[split]:
            path = os.path.join(folder, split, str(data.target[row]), f'{row:04d}.png')
            os.makedirs(os.path.dirname(path), exist_ok=True)
            image = Image.fromarray(pixels[row], mode='L').resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BILINEAR)
            image.save(path)


def ensure_digits_images(root):
    """``root``, rendered there first if it does not exist yet (atomically: see the module's docstring)."""
    if os.path.isdir(root):
        return root
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix='.tmp.digits_images.', dir=parent)
    try:
        render_digits(tmp)
        os.sync()  # every file on the disk before the rename makes the folder visible (one call, not one per file)
        try:
            os.rename(tmp, root)
        except OSError:
            if not os.path.isdir(root):  # not another process's complete copy: a real failure
                raise
        fsync_file(parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename; else a copy another process beat
    return root


@DATASETS.register_class()
class DigitsImagesDataset(ImageFileDataset):
    """The PNG digits of SPLIT under DATA_ROOT (rendered there on first use); items as ImageFolderDataset's."""

    para_dict = {
        'DATA_ROOT': {'value': DEFAULT_ROOT, 'description': 'cache folder of the PNGs (made on first use)'},
        'SPLIT': {'value': 'train', 'description': 'train | val | test', 'choices': list(SPLITS)},
    }

    def __init__(self, cfg, logger=None):
        root = ensure_digits_images(cfg.DATA_ROOT)
        self.classes, samples = list_image_folder(os.path.join(root, cfg.SPLIT), cfg.path_of('DATA_ROOT'))
        super().__init__(samples, cfg.path)
