"""DigitsDataset: scikit-learn's bundled digits, split stratified with a fixed seed.

``test`` is TEST_FRACTION of the data; ``val`` is VAL_FRACTION of the rest, carved out so
that model selection (evaluation, the best checkpoint) never looks at the test split;
``train`` is what remains and ``trainval`` is train and val together.

Items are ``{'img': float32 [8, 8] in [0, 1], 'label': int64}``.  The data ships inside
scikit-learn, so nothing is downloaded.
"""

import math

import numpy as np

from scepter_like.data.datasets import ArrayDataset
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError

SPLITS = ('train', 'val', 'trainval', 'test')


def split_indices(labels, test_fraction=0.2, seed=0, val_fraction=0.1, keys=('TEST_FRACTION', 'VAL_FRACTION')):
    """``{split: row indices}`` for every split of SPLITS: test first, then val carved from the rest.  ``keys``: where
    the config gives the two fractions, for the error when one leaves a split without a sample of every class."""
    from sklearn.model_selection import train_test_split

    check_stratified(len(labels), len(np.unique(labels)), test_fraction, keys[0], 'samples')
    idx_trainval, idx_test = train_test_split(
        np.arange(len(labels)), test_size=test_fraction, stratify=labels, random_state=seed
    )
    check_stratified(len(idx_trainval), len(np.unique(labels)), val_fraction, keys[1], 'non-test samples')
    idx_train, idx_val = train_test_split(
        idx_trainval, test_size=val_fraction, stratify=labels[idx_trainval], random_state=seed
    )
    return {'train': idx_train, 'val': idx_val, 'trainval': idx_trainval, 'test': idx_test}


def check_stratified(n, classes, fraction, key, what):
    """A ConfigError unless ``fraction`` of ``n`` samples and the rest (as scikit-learn rounds them) both hold at least
    ``classes`` samples, one of each class: scikit-learn's own error names neither the key nor a value that works."""
    part, rest = math.ceil(fraction * n), math.floor((1 - fraction) * n)
    if min(part, rest) >= classes:
        return
    low, high = math.ceil(classes / n * 1e4) / 1e4, math.floor((n - classes) / n * 1e4) / 1e4
    raise ConfigError(
        f'{key}: {fraction} of the {n} {what} leaves {min(part, rest)} on one side of the split, fewer than the'
        f' {classes} classes (a stratified split puts every class on both sides); use a fraction from {low} to {high}'
    )


def digits_split(split, test_fraction=0.2, seed=0, val_fraction=0.1, keys=('TEST_FRACTION', 'VAL_FRACTION')):
    """(images, labels) of ``split`` (one of SPLITS): stratified splits, the same for a seed."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)
    labels = data.target.astype(np.int64)
    idx = split_indices(labels, test_fraction, seed, val_fraction, keys)[split]
    return images[idx], labels[idx]


@DATASETS.register_class()
class DigitsDataset(ArrayDataset):
    para_dict = {
        'SPLIT': {'value': 'train', 'description': 'train | val | trainval | test', 'choices': list(SPLITS)},
        'TEST_FRACTION': {'value': 0.2, 'description': 'share of the data in the test split', 'above': 0, 'below': 1},
        'VAL_FRACTION': {'value': 0.1, 'description': 'share of the non-test data in val', 'above': 0, 'below': 1},
        'SPLIT_SEED': {'value': 0, 'description': 'seed of the stratified split'},
    }

    def __init__(self, cfg, logger=None):
        keys = (cfg.path_of('TEST_FRACTION'), cfg.path_of('VAL_FRACTION'))
        images, labels = digits_split(cfg.SPLIT, cfg.TEST_FRACTION, cfg.SPLIT_SEED, cfg.VAL_FRACTION, keys)
        super().__init__({'img': images, 'label': labels})
