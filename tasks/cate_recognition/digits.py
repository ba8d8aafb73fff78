"""DigitsDataset: scikit-learn's bundled digits, split 80/20 stratified with a fixed seed.

Items are ``{'img': float32 [8, 8] in [0, 1], 'label': int64}``.  The data ships inside
scikit-learn, so nothing is downloaded.
"""

import numpy as np

from scepter_like.data.datasets import ArrayDataset
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError


def digits_split(split, test_fraction=0.2, seed=0):
    """(images, labels) of ``split`` ('train' | 'test'): a stratified split, the same for a seed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)
    labels = data.target.astype(np.int64)
    idx_train, idx_test = train_test_split(
        np.arange(len(labels)), test_size=test_fraction, stratify=labels, random_state=seed
    )
    idx = idx_train if split == 'train' else idx_test
    return images[idx], labels[idx]


@DATASETS.register_class()
class DigitsDataset(ArrayDataset):
    para_dict = {
        'SPLIT': {'value': 'train', 'description': 'train | test'},
        'TEST_FRACTION': {'value': 0.2, 'description': 'share of the data in the test split'},
        'SPLIT_SEED': {'value': 0, 'description': 'seed of the stratified split'},
    }

    def __init__(self, cfg, logger=None):
        if cfg.SPLIT not in ('train', 'test'):
            raise ConfigError(f"{cfg.path_of('SPLIT')}: {cfg.SPLIT!r} is not 'train' or 'test'")
        images, labels = digits_split(cfg.SPLIT, cfg.TEST_FRACTION, cfg.SPLIT_SEED)
        super().__init__({'img': images, 'label': labels})
