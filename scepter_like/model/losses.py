"""Losses, built from LOSSES configs."""

from torch import nn

from scepter_like.model.registry import LOSSES


@LOSSES.register_class()
class CrossEntropyLoss(nn.CrossEntropyLoss):
    para_dict = {'LABEL_SMOOTHING': {'value': 0.0, 'description': 'label smoothing in [0, 1)'}}

    def __init__(self, cfg, logger=None):
        super().__init__(label_smoothing=cfg.LABEL_SMOOTHING)


@LOSSES.register_class()
class MSELoss(nn.MSELoss):
    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__()
