"""Top-k classification accuracy."""

import torch

from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS
from scepter_like.model.losses import INTEGER_LABELS
from scepter_like.model.size_mismatch import LABELS_FROM_1, NEGATIVE_LABELS


@METRICS.register_class()
class AccuracyMetric(Metric):
    """Reports ``accuracy`` for top-1 and ``accuracy_top{k}`` for k > 1 (fractions in [0, 1])."""

    para_dict = {
        'KEYS': {'value': ['logits', 'label'], 'description': 'the logits key, then the label key'},
        'TOPK': {'value': [1], 'description': 'which top-k accuracies to report'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.topk = sorted(set(cfg.TOPK))
        self.classes = None  # the logits' class count, known from the first update
        # labels below 0 and at or above the class count are summed with the hits (see update)
        self.state_names = tuple(f'correct@{k}' for k in self.topk) + ('count', 'below_0', 'above_classes')

    def update(self, data):
        logits, label = self.inputs(data)
        classes = self.classes = check_class_labels(logits, label)
        if self.topk[-1] > classes:  # every label is among all classes: a top-k of 1.0 says nothing
            raise ConfigError(
                f'{self.cfg.path_of("TOPK")}: top-{self.topk[-1]} accuracy of {classes} classes is 1 by'
                f' definition; give TOPK values up to {classes}'
            )
        label = label.reshape(-1, 1)
        hit = logits.reshape(-1, classes).topk(self.topk[-1], dim=-1).indices.eq(label)  # topk is sorted
        correct = [hit[:, :k].any(dim=1).sum() for k in self.topk]
        count = torch.tensor(label.numel(), device=logits.device)
        # The range of the labels is counted on the device with the hits, and checked in finish, which reads the
        # sums once per pass (after compute's all-reduce; per step when a model calls the metric): testing it here
        # would wait for the device on every train step (Classifier's METRIC).
        self.accumulate(torch.stack(correct + [count] + label_range_sums(label, classes)))

    def output_names(self):
        return ['accuracy' if k == 1 else f'accuracy_top{k}' for k in self.topk]

    def finish(self, sums):
        check_label_range('AccuracyMetric', sums, self.classes)
        count = max(sums['count'], 1.0)
        return {name: sums[f'correct@{k}'] / count for name, k in zip(self.output_names(), self.topk)}


def label_range_sums(label, classes):
    """``[labels below 0, labels at or above classes]``, counted on the device (no wait for it)."""
    return [(label < 0).sum(), (label >= classes).sum()]


def check_label_range(owner, sums, classes):
    """A DataError when the reduced sums (``count``, ``below_0``, ``above_classes``) hold labels outside the
    classes: read once per pass, after the all-reduce."""
    below, above = int(sums['below_0']), int(sums['above_classes'])
    if below or above:
        fix = NEGATIVE_LABELS if below else f'give the model an output per class (its OUT_DIM), or: {LABELS_FROM_1}'
        raise DataError(
            f'{owner}: of {int(sums["count"])} labels, {below} are below 0 and {above} at or above'
            f' {classes}, for logits of {classes} classes; {fix}'
        )


def check_class_labels(logits, label, owner='AccuracyMetric'):
    """The class count of ``logits`` ([..., C], C >= 2) when ``label`` holds one integer class index per row;
    else a DataError naming the shapes and the fix.  Shapes and dtypes only: no wait for the device."""
    classes = logits.shape[-1] if logits.dim() >= 2 else 0
    if classes < 2:
        fix = 'it needs a score per class (2 or more): a model of one output is a regression (MSEMetric) or a'
        raise DataError(f'{_shapes(logits, label, owner)}; {fix} one-logit binary classifier (give it OUT_DIM 2)')
    if label.shape == logits.shape:
        raise DataError(
            f'{_shapes(logits, label, owner)}, one-hot or class probabilities; it takes class indices [N]: save'
            ' labels.argmax(1) instead (probabilities need a metric of your own that takes them)'
        )
    if label.numel() * classes != logits.numel():
        raise DataError(f'{_shapes(logits, label, owner)}; it takes one class index per row of logits')
    if label.is_floating_point():
        raise DataError(f'{_shapes(logits, label, owner)}; {INTEGER_LABELS}')
    return classes


def _shapes(logits, label, owner):
    """The start of an error line (made only for one: the checks run every step)."""
    dtype = str(label.dtype).removeprefix('torch.')
    return f'{owner}: the logits are {list(logits.shape)} and the labels {dtype} {list(label.shape)}'
