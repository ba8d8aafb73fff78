"""DigitsDataset: scikit-learn's bundled digits, split stratified with a fixed seed.

``test`` is TEST_FRACTION of the data; ``val`` is VAL_FRACTION of the rest, carved out so
that model selection (evaluation, the best checkpoint) never looks at the test split;
``train`` is what remains and ``trainval`` is train and val together.  Each class gives
each split its share of rows, drawn by SPLIT_SEED.

Items are ``{'img': float32 [8, 8] in [0, 1], 'label': int64}``.  The data ships inside
scikit-learn (``digits.csv.gz``), so nothing is downloaded; it is read with numpy, as
importing scikit-learn would add a second to every run's start-up.
"""

import importlib.util
import math
import os

import numpy as np

from scepter_like.data.datasets import ArrayDataset
from scepter_like.data.registry import DATASETS
from scepter_like.errors import DataError

SPLITS = ('train', 'val', 'trainval', 'test')


def load_digits_arrays():
    """(images float32 [1797, 8, 8] in [0, 1], labels int64): the CSV file scikit-learn ships, read
    without importing scikit-learn (a second of every run's start-up)."""
    spec = importlib.util.find_spec('sklearn')
    path = os.path.join(spec.submodule_search_locations[0], 'datasets', 'data', 'digits.csv.gz') if spec else ''
    if not os.path.isfile(path):
        raise DataError("the digits ship inside scikit-learn: pip install 'scepter_like[tasks]'")
    rows = np.loadtxt(path, delimiter=',')  # 64 pixel values 0..16, then the label
    return (rows[:, :-1] / 16.0).astype(np.float32).reshape(-1, 8, 8), rows[:, -1].astype(np.int64)


def stratified_split(labels, fraction, rng):
    """(rest, taken) row indices: ``ceil(fraction * n)`` rows taken, each class giving its share of them
    (the largest remainders get the rounding), each class's rows in an order drawn from ``rng``."""
    classes, counts = np.unique(labels, return_counts=True)
    n_taken = math.ceil(fraction * len(labels))
    quota = counts * n_taken / len(labels)
    shares = np.floor(quota).astype(np.int64)
    shares[np.argsort(shares - quota, kind='stable')[: n_taken - shares.sum()]] += 1
    rest, taken = [], []
    for label, share in zip(classes, shares):
        rows = rng.permutation(np.flatnonzero(labels == label))
        taken.append(rows[:share])
        rest.append(rows[share:])
    return np.sort(np.concatenate(rest)), np.sort(np.concatenate(taken))


def split_indices(labels, test_fraction=0.2, seed=0, val_fraction=0.1):
    """``{split: row indices}`` for every split of SPLITS, stratified: test first, then val carved from the rest."""
    rng = np.random.default_rng(seed)
    trainval, test = stratified_split(labels, test_fraction, rng)
    train, val = stratified_split(labels[trainval], val_fraction, rng)
    return {'train': trainval[train], 'val': trainval[val], 'trainval': trainval, 'test': test}


def digits_split(split, test_fraction=0.2, seed=0, val_fraction=0.1):
    """(images, labels) of ``split`` (one of SPLITS): stratified splits, the same for a seed."""
    images, labels = load_digits_arrays()
    idx = split_indices(labels, test_fraction, seed, val_fraction)[split]
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
        images, labels = digits_split(cfg.SPLIT, cfg.TEST_FRACTION, cfg.SPLIT_SEED, cfg.VAL_FRACTION)
        super().__init__({'img': images, 'label': labels})
