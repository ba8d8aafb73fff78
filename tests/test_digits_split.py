"""The digits splits: val is carved from the training part, test stays held out."""

import numpy as np
import pytest

pytest.importorskip('sklearn', reason="the digits task needs the extra 'tasks' (scikit-learn)")

from tasks.cate_recognition.digits import split_indices  # noqa: E402


def test_val_is_carved_from_train_and_shares_no_row_with_test():
    from sklearn.datasets import load_digits

    labels = load_digits().target
    idx = {k: set(v.tolist()) for k, v in split_indices(labels).items()}  # the shipped configs' defaults
    assert len(idx['test']) == 360 and len(idx['val']) == 144 and len(idx['train']) == 1293
    assert idx['train'] | idx['val'] == idx['trainval'] and not idx['train'] & idx['val']
    assert not idx['trainval'] & idx['test'] and len(idx['trainval'] | idx['test']) == len(labels)
    for split in ('val', 'test'):  # stratified: every class in each
        assert set(labels[sorted(idx[split])]) == set(range(10))
    again = split_indices(labels)  # the same for a seed
    assert all(np.array_equal(again[k], v) for k, v in split_indices(labels).items())
