"""Classifier: a backbone from MODELS and a loss from LOSSES.

Train mode returns ``{'loss': ...}``; eval and test mode return the logits and labels
that AccuracyMetric reads (its KEYS).
"""

from scepter_like.model.base import BaseModel
from scepter_like.model.registry import LOSSES, MODELS


@MODELS.register_class()
class Classifier(BaseModel):
    para_dict = {
        'BACKBONE': {'value': {'NAME': 'MLP'}, 'description': 'a MODELS config producing class logits'},
        'LOSS': {'value': {'NAME': 'CrossEntropyLoss'}, 'description': 'a LOSSES config'},
        'INPUT_KEY': {'value': 'img', 'description': 'batch key of the input'},
        'LABEL_KEY': {'value': 'label', 'description': 'batch key of the class labels'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.backbone = MODELS.build(cfg.BACKBONE, logger=logger)
        self.loss = LOSSES.build(cfg.LOSS, logger=logger)
        self.input_key = cfg.INPUT_KEY
        self.label_key = cfg.LABEL_KEY

    def forward(self, **batch):
        children = self._modules  # one dict lookup each, not a walk through nn.Module.__getattr__
        logits = children['backbone'](batch[self.input_key])
        label = batch.get(self.label_key)
        if self.training:
            return {'loss': children['loss'](logits, label)}
        out = {'logits': logits}
        if label is not None:
            out['label'] = label
        return out
