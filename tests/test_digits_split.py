"""The digits task's data: scikit-learn's digits, read without importing scikit-learn; val is carved from
the training part, test stays held out, every class in its share."""

import numpy as np
import pytest

pytest.importorskip('sklearn', reason="the digits task needs the extra 'tasks' (scikit-learn)")

from tasks.cate_recognition.digits import load_digits_arrays, split_indices  # noqa: E402


def test_the_arrays_are_scikit_learns_digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    images, labels = load_digits_arrays()
    assert images.dtype == np.float32 and labels.dtype == np.int64
    np.testing.assert_array_equal(images, (data.images / 16.0).astype(np.float32))
    np.testing.assert_array_equal(labels, data.target)


def test_val_is_carved_from_train_and_shares_no_row_with_test():
    labels = load_digits_arrays()[1]
    idx = {k: set(v.tolist()) for k, v in split_indices(labels).items()}  # the shipped configs' defaults
    assert len(idx['test']) == 360 and len(idx['val']) == 144 and len(idx['train']) == 1293
    assert idx['train'] | idx['val'] == idx['trainval'] and not idx['train'] & idx['val']
    assert not idx['trainval'] & idx['test'] and len(idx['trainval'] | idx['test']) == len(labels)
    counts = np.bincount(labels)
    for split, share in (('test', 0.2), ('val', 0.8 * 0.1)):  # stratified: each class gives its share, +-1
        in_split = np.bincount(labels[sorted(idx[split])], minlength=10)
        assert np.all(np.abs(in_split - counts * share) <= 1), (split, in_split)
    again = split_indices(labels)  # the same for a seed, another for another seed
    assert all(np.array_equal(again[k], v) for k, v in split_indices(labels).items())
    assert not np.array_equal(split_indices(labels, seed=1)['test'], again['test'])
