"""Losses, built from LOSSES configs.

Each is a plain module around one ``torch.nn.functional`` call: no unused ``weight``
buffer to look up through ``nn.Module.__getattr__`` on every step (nor in the state dict).
"""

import torch
from torch import nn
from torch.nn import functional as F

from scepter_like.errors import ConfigError, DataError
from scepter_like.model.registry import LOSSES

# how to give class labels that are floats (here and in AccuracyMetric)
INTEGER_LABELS = "class indices are integers (save them as int64, or set the dataset's DTYPES: {label: int64})"


@LOSSES.register_class()
class CrossEntropyLoss(nn.Module):
    """Cross entropy of class logits; WEIGHT weighs each class (rare classes count more), as torch's ``weight``."""

    para_dict = {
        'LABEL_SMOOTHING': {'value': 0.0, 'description': 'label smoothing in [0, 1)', 'min': 0.0, 'below': 1.0},
        'WEIGHT': {
            'value': None,
            'type': (list, type(None)),
            'description': 'a weight per class, in class-index order, one per logit (null: all 1)',
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__()
        self.label_smoothing = cfg.LABEL_SMOOTHING
        self.weight_key = cfg.path_of('WEIGHT')
        self.weight = None if cfg.WEIGHT is None else list(cfg.WEIGHT)
        if self.weight is not None and not all(isinstance(w, (int, float)) and w >= 0 for w in self.weight):
            raise ConfigError(f'{self.weight_key}: {self.weight} must be numbers >= 0, one per class')
        self._weight = None  # WEIGHT as a tensor where the logits are, made at the first forward (checked there)

    def extra_repr(self):
        return f'label_smoothing={self.label_smoothing}, weight={self.weight}'

    def class_weight(self, logits):
        """WEIGHT as a tensor of the logits' device and dtype, once it is known to give one weight per logit."""
        if self.weight is None:
            return None
        if self._weight is None or (self._weight.device, self._weight.dtype) != (logits.device, logits.dtype):
            classes = logits.shape[1] if logits.dim() > 1 else logits.shape[0]
            if len(self.weight) != classes:
                raise ConfigError(
                    f'{self.weight_key}: {len(self.weight)} class weights for logits of {classes} classes; give one'
                    ' weight per class, in class-index order'
                )
            self._weight = torch.tensor(self.weight, dtype=logits.dtype, device=logits.device)
        return self._weight

    def forward(self, logits, target):
        if target.dtype != torch.long:
            if not target.is_floating_point():  # class indices of any integer width
                target = target.long()
            elif target.shape != logits.shape:  # probabilities have the logits' shape; anything else is a mistake
                raise DataError(
                    f'CrossEntropyLoss: the labels are {target.dtype} {list(target.shape)} for logits'
                    f" {list(logits.shape)}; {INTEGER_LABELS}, class probabilities have the logits' shape"
                )
        if target.dim() == logits.dim() and target.shape[-1] == 1 and target.dtype == torch.long:
            target = target.squeeze(-1)  # a column of class indices [N, 1]
        return F.cross_entropy(logits, target, weight=self.class_weight(logits), label_smoothing=self.label_smoothing)


LOSSES.register_class('CrossEntropy')(CrossEntropyLoss)  # scepter's name for it, as its YAMLs write it


class PairLoss(nn.Module):
    """A mean over a prediction and a target of as many values (aligned by ``same_shape``): ``self.loss(p, t)``."""

    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__()

    def forward(self, prediction, target):
        return self.loss(prediction, same_shape(prediction, target, type(self).__name__))


@LOSSES.register_class()
class MSELoss(PairLoss):
    para_dict = {}
    loss = staticmethod(F.mse_loss)


@LOSSES.register_class()
class L1Loss(PairLoss):
    """Mean absolute error: less pulled by outliers than MSELoss."""

    para_dict = {}
    loss = staticmethod(F.l1_loss)


@LOSSES.register_class()
class HuberLoss(PairLoss):
    """Squared below DELTA, absolute above it (torch's ``huber_loss``): MSE near the target, robust far from it."""

    para_dict = {'DELTA': {'value': 1.0, 'description': 'where the loss turns from squared to absolute', 'above': 0}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.delta = cfg.DELTA

    def loss(self, prediction, target):
        return F.huber_loss(prediction, target, delta=self.delta)


@LOSSES.register_class()
class BCEWithLogitsLoss(PairLoss):
    """Binary cross entropy of logits against 0 / 1 targets of the same shape: a binary classifier of one output,
    or several independent labels per sample (multi-label); POS_WEIGHT weighs the positives (one value, or one per
    output), as torch's ``pos_weight``."""

    para_dict = {
        'POS_WEIGHT': {
            'value': None,
            'type': (int, float, list, type(None)),
            'description': 'weight of the positive targets: one number, or one per output (null: 1)',
            'min': 0,
        }
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.pos_weight = cfg.POS_WEIGHT
        self._pos_weight = None  # POS_WEIGHT as a tensor where the logits are, made at the first forward

    def loss(self, logits, target):
        weight = self._pos_weight
        if self.pos_weight is not None and (weight is None or weight.device != logits.device):
            weight = self._pos_weight = torch.as_tensor(self.pos_weight, dtype=logits.dtype, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype), pos_weight=weight)


def same_shape(prediction, target, who):
    """``target`` in ``prediction``'s shape when it holds as many values ([N] against [N, 1]: torch would
    broadcast the pair to [N, N] and average the wrong differences, with a warning at most); else a DataError."""
    if target.shape == prediction.shape:
        return target
    if target.numel() == prediction.numel():
        return target.reshape(prediction.shape)
    raise DataError(
        f'{who}: the prediction is {list(prediction.shape)} and the target {list(target.shape)}: they hold'
        ' different numbers of values; make the model give one value per target value (its OUT_DIM)'
    )
