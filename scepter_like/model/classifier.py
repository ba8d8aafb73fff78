"""Classifier: BACKBONE (then NECK and HEAD when given, scepter's parts) and a loss from LOSSES.

Train mode returns ``{'loss': ...}``; eval and test mode return the logits and labels
that AccuracyMetric reads (its KEYS).  scepter's keys work too: ``ACT_NAME`` (applied to the
eval / test logits), ``FREEZE_BN`` and ``METRIC`` (a metric whose values join every step's
outputs, so the log shows them).
"""

import torch
from torch import nn

from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.registry import METRICS
from scepter_like.model.base import BaseModel
from scepter_like.model.losses import HuberLoss, L1Loss, MSELoss
from scepter_like.model.registry import LOSSES, MODELS

_ACTIVATIONS = {'': None, 'softmax': lambda x: torch.softmax(x, dim=1), 'sigmoid': torch.sigmoid}
_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm, nn.LayerNorm)


@MODELS.register_class()
class Classifier(BaseModel):
    para_dict = {
        'BACKBONE': {'value': {'NAME': 'MLP'}, 'description': 'a MODELS config producing class logits (or features)'},
        'NECK': {'value': None, 'description': 'a MODELS config applied to the backbone output (none: identity)'},
        'HEAD': {'value': None, 'description': 'a MODELS config giving the logits (none: the backbone gives them)'},
        'LOSS': {'value': {'NAME': 'CrossEntropyLoss'}, 'description': 'a LOSSES config'},
        'ACT_NAME': {
            'value': '',
            'description': "activation of the eval / test logits ('': none)",
            'choices': list(_ACTIVATIONS),
        },
        'FREEZE_BN': {'value': False, 'description': 'BatchNorm and LayerNorm layers stay in eval mode in training'},
        'METRIC': {'value': None, 'description': "a METRICS config whose values join every step's outputs"},
        'INPUT_KEY': {'value': 'img', 'description': 'batch key of the input'},
        'LABEL_KEY': {'value': 'label', 'description': 'batch key of the class labels'},
    }
    ARCH_KEYS = ('BACKBONE', 'NECK', 'HEAD')  # each compared by its own ARCH_KEYS

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.backbone = MODELS.build(cfg.BACKBONE, logger=logger)
        parts = [(name, cfg[key]) for name, key in (('neck', 'NECK'), ('head', 'HEAD')) if cfg[key] is not None]
        for name, part_cfg in parts:
            self.add_module(name, MODELS.build(part_cfg, logger=logger))
        self._parts = tuple(self._modules[name] for name, _ in parts)  # run after the backbone, in order
        self.loss = LOSSES.build(cfg.LOSS, logger=logger)
        self.act_fn = _ACTIVATIONS[cfg.ACT_NAME]
        self.freeze_bn = cfg.FREEZE_BN
        self.metric = METRICS.build(cfg.METRIC, logger=logger) if cfg.METRIC is not None else None
        self.input_key = cfg.INPUT_KEY
        self.label_key = cfg.LABEL_KEY

    def train(self, mode=True):
        super().train(mode)
        if self.freeze_bn:
            for module in self.modules():
                if isinstance(module, _NORMS):
                    module.train(False)
        return self

    def metrics_hint(self):
        """Accuracy on class labels; a regression (the Classifier with MSELoss, L1Loss or HuberLoss) compares its
        logits and labels."""
        if isinstance(self.loss, (MSELoss, L1Loss, HuberLoss)):
            return '[{NAME: MSEMetric, KEYS: [logits, label]}]'
        return '[{NAME: AccuracyMetric}]'

    def forward(self, **batch):
        children = self._modules  # one dict lookup each, not a walk through nn.Module.__getattr__
        try:
            inputs = batch[self.input_key]
        except KeyError:
            raise DataError(
                f'the model needs input {self.input_key!r}, which the inputs lack; they have {sorted(batch)}'
                f' (or set {self.cfg.path_of("INPUT_KEY")} to the key of the input)'
            ) from None
        label = batch.get(self.label_key)
        if label is None and self.training:  # before the backbone, which a label column read as a feature misfits
            raise DataError(missing_labels(self.label_key, self.cfg.path_of('LABEL_KEY'), batch))
        logits = children['backbone'](inputs)
        for part in self._parts:
            logits = part(logits)
        if self.training:
            out = {'loss': children['loss'](logits, label)}
        else:
            if self.act_fn is not None:
                logits = self.act_fn(logits)
            out = {'logits': logits}
            if label is not None:
                out['label'] = label
        if self.metric is not None and label is not None:
            out.update({k: torch.as_tensor(v) for k, v in self.metric(logits.detach(), label).items()})
        return out

    def check_classes(self, classes, data_where):
        """A ConfigError when the data's ``classes`` (names in label order) are not as many as the logits.

        More logits than classes train without a word (the extra ones are never a label) and the checkpoint then
        records names for only some of its outputs; fewer leave a named class out.  Only the part that gives the
        logits is asked, where it declares its output size (SIZE_KEYS: ClassifierHead's NUM_CLASSES, MLP's
        OUT_DIM); one logit for two classes (a sigmoid head) is left alone.
        """
        last = self._parts[-1] if self._parts else self.backbone
        key = getattr(last, 'SIZE_KEYS', {}).get('output')
        cfg = getattr(last, 'cfg', None)
        if key is None or cfg is None or key not in cfg:
            return
        logits, count = cfg[key], len(classes)
        if logits == count or (logits, count) == (1, 2):
            return
        fix = f'set {cfg.path_of(key)}: {count}'
        if logits > count:
            fix += f', or name all {logits} classes in {data_where}.CLASSES (in label order)'
        raise ConfigError(
            f'{cfg.path_of(key)}: the model gives {logits} class logits and {data_where} has {count} classes'
            f' {list(classes)}; {fix}'
        )


def missing_labels(key, where, batch):
    """Why a train batch without the labels ``key`` cannot train, and the dataset keys that give them (the loss
    would fail on None deep inside)."""
    return (
        f'the train batches have no {key!r}, the class labels the model learns from (they have {sorted(batch)}):'
        f' a CsvDataset reads them from its LABEL_COLUMN (set it; without it the label column is read as a'
        f' feature), an NpzDataset from its array {key!r} (or KEY_MAP: {{y: {key}}}), an image dataset from its'
        f' folders or list file (a TRANSFORMS Select must keep {key!r}); or set {where} to their key'
    )
