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


@pytest.mark.parametrize(
    'key, value, said, fractions',
    [
        (
            'VAL_FRACTION',
            0.001,
            '0.001 of the 1437 non-test samples leaves 2 on one side of the split',
            '0.007 to 0.993',
        ),
        ('TEST_FRACTION', 0.999, '0.999 of the 1797 samples leaves 1 on one side of the split', '0.0056 to 0.9944'),
    ],
)
def test_a_fraction_that_leaves_a_class_out_names_the_key_and_the_fractions_that_work(key, value, said, fractions):
    """scikit-learn's ValueError ('test_size = 2 should be greater or equal to the number of classes = 10') ended
    the run with a traceback."""
    from scepter_like.config import Config
    from scepter_like.data.registry import DATASETS
    from scepter_like.errors import ConfigError

    cfg = Config({'SOLVER': {'EVAL_DATA': {'NAME': 'DigitsDataset', 'SPLIT': 'val', key: value}}}).SOLVER.EVAL_DATA
    with pytest.raises(ConfigError) as error:
        DATASETS.build(cfg)
    assert str(error.value).startswith(f'SOLVER.EVAL_DATA.{key}: {said}, fewer than the 10 classes'), str(error.value)
    assert str(error.value).endswith(f'use a fraction from {fractions}'), str(error.value)
