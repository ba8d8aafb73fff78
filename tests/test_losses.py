"""The regression and binary losses: torch's functions, the target aligned to the prediction, configured by name."""

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from scepter_like import build_solver
from scepter_like.errors import ConfigError, DataError
from scepter_like.model.registry import LOSSES

PRED = torch.randn(16, 1, generator=torch.Generator().manual_seed(0))
TARGET = torch.randn(16, generator=torch.Generator().manual_seed(1))  # [N] against [N, 1]: aligned, not broadcast
BINARY = (TARGET > 0).long()


@pytest.mark.parametrize(
    'cfg, expected',
    [
        ({'NAME': 'MSELoss'}, F.mse_loss(PRED[:, 0], TARGET)),
        ({'NAME': 'L1Loss'}, F.l1_loss(PRED[:, 0], TARGET)),
        ({'NAME': 'HuberLoss', 'DELTA': 0.3}, F.huber_loss(PRED[:, 0], TARGET, delta=0.3)),
    ],
)
def test_regression_losses_are_torchs_on_the_aligned_target(cfg, expected):
    assert LOSSES.build(cfg)(PRED, TARGET) == pytest.approx(expected.item(), rel=1e-6)


def test_bce_with_logits_takes_integer_labels_and_weighs_the_positives():
    loss = LOSSES.build({'NAME': 'BCEWithLogitsLoss', 'POS_WEIGHT': 3})
    expected = F.binary_cross_entropy_with_logits(PRED[:, 0], BINARY.float(), pos_weight=torch.tensor(3.0))
    assert loss(PRED, BINARY) == pytest.approx(expected.item(), rel=1e-6)
    with pytest.raises(DataError, match=r'^BCEWithLogitsLoss: the prediction is \[16, 1\] and the target \[8\]'):
        loss(PRED, BINARY[:8])
    with pytest.raises(ConfigError, match='POS_WEIGHT'):
        LOSSES.build({'NAME': 'BCEWithLogitsLoss', 'POS_WEIGHT': 'high'})


def test_a_one_output_binary_classifier_trains_with_bce(tmp_path):
    """One logit for two classes, as a sigmoid head is written: the loss falls on a separable problem."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 2)).astype('float32')
    np.savez(tmp_path / 'b.npz', x=x, label=(x[:, 0] + x[:, 1] > 0).astype('int64'))
    data = {'NAME': 'NpzDataset', 'PATH': str(tmp_path / 'b.npz'), 'BATCH_SIZE': 32}
    model = {'NAME': 'Classifier', 'INPUT_KEY': 'x', 'LOSS': {'NAME': 'BCEWithLogitsLoss'}}
    model['BACKBONE'] = {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [8], 'OUT_DIM': 1}
    solver = {'NAME': 'TrainValSolver', 'WORK_DIR': str(tmp_path / 'w'), 'MAX_EPOCHS': 30, 'MODEL': model}
    solver.update(OPTIMIZER={'NAME': 'Adam', 'LEARNING_RATE': 0.05}, TRAIN_DATA=data)
    with build_solver({'ENV': {'SEED': 0}, 'SOLVER': solver}) as session:
        session.fit()
        logits = session.predict({'x': x})['logits'][:, 0]
    assert ((logits > 0) == (x[:, 0] + x[:, 1] > 0)).mean() > 0.95


@pytest.mark.parametrize(
    'cfg, pattern',
    [
        ({'NAME': 'CrossEntropyLoss', 'LABEL_SMOOTHING': 1.5}, r'^LABEL_SMOOTHING: must be below 1\.0, got 1\.5$'),
        ({'NAME': 'CrossEntropyLoss', 'LABEL_SMOOTHING': -0.1}, r'^LABEL_SMOOTHING: must be at least 0\.0, got -0\.1$'),
        ({'NAME': 'HuberLoss', 'DELTA': 0}, r'^DELTA: must be above 0, got 0\.0$'),
        ({'NAME': 'BCEWithLogitsLoss', 'POS_WEIGHT': [1, -2]}, r'^POS_WEIGHT: must be at least 0, got -2$'),
    ],
)
def test_a_loss_key_out_of_its_range_is_a_config_error_not_torchs_traceback(cfg, pattern):
    """torch raised RuntimeError at the first step (label_smoothing, delta) or trained on a negative pos_weight."""
    with pytest.raises(ConfigError, match=pattern):
        LOSSES.build(cfg)
