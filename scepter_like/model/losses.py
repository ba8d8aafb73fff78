"""Losses, built from LOSSES configs.

Each is a plain module around one ``torch.nn.functional`` call: no unused ``weight``
buffer to look up through ``nn.Module.__getattr__`` on every step.
"""

import torch
from torch import nn
from torch.nn import functional as F

from scepter_like.model.registry import LOSSES


@LOSSES.register_class()
class CrossEntropyLoss(nn.Module):
    para_dict = {'LABEL_SMOOTHING': {'value': 0.0, 'description': 'label smoothing in [0, 1)'}}

    def __init__(self, cfg, logger=None):
        super().__init__()
        self.label_smoothing = cfg.LABEL_SMOOTHING

    def extra_repr(self):
        return f'label_smoothing={self.label_smoothing}'

    def forward(self, logits, target):
        if target.dtype != torch.long and not target.is_floating_point():  # class indices of any integer width
            target = target.long()
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)


LOSSES.register_class('CrossEntropy')(CrossEntropyLoss)  # scepter's name for it, as its YAMLs write it


@LOSSES.register_class()
class MSELoss(nn.Module):
    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__()

    def forward(self, prediction, target):
        return F.mse_loss(prediction, target)
