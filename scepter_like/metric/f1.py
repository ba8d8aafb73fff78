"""Macro-averaged precision, recall and F1: each class counts the same, whatever its size.

On imbalanced data accuracy hides a class the model never predicts; these do not.  The
averages follow scikit-learn's ``average='macro'`` (with ``zero_division=0``): over the
classes that occur among the labels or the predictions of the pass, a class never
predicted has precision 0.  Macro recall is the balanced accuracy.
"""

import torch

from scepter_like.metric.accuracy import check_class_labels, check_label_range, label_range_sums
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS
from scepter_like.utils.distributed import all_reduce_max

NAMES = ('precision', 'recall', 'f1')


@METRICS.register_class()
class F1Metric(Metric):
    """Reports ``precision``, ``recall`` and ``f1``, macro averages over the classes (fractions in [0, 1])."""

    para_dict = {'KEYS': {'value': ['logits', 'label'], 'description': 'the logits key, then the label key'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self._count_classes(0)  # the logits' class count is known from the first update

    def _count_classes(self, classes):
        """Per class: hits, predictions, labels; then the label count and the labels outside the classes."""
        self.classes = classes
        self.state_names = tuple(f'{kind}_{c}' for kind in ('hit', 'pred', 'true') for c in range(classes)) + (
            'count',
            'below_0',
            'above_classes',
        )

    def update(self, data):
        logits, label = self.inputs(data)
        classes = check_class_labels(logits, label, 'F1Metric')
        if classes != self.classes:
            self._count_classes(classes)
        label = label.reshape(-1)
        pred = logits.reshape(-1, classes).argmax(dim=-1)
        inside = (label >= 0) & (label < classes)
        known = label[inside]
        hits = torch.bincount(known[pred[inside] == known], minlength=classes)
        sums = [hits, torch.bincount(pred, minlength=classes), torch.bincount(known, minlength=classes)]
        count = torch.tensor([label.numel()], device=logits.device)
        self.accumulate(torch.cat([*sums, count, torch.stack(label_range_sums(label, classes))]))

    def compute(self, device=None):
        # a rank whose shard held no batch has not seen the class count: the ranks agree on it first
        seen = torch.tensor([self.classes], dtype=torch.float64, device=device)
        classes = int(all_reduce_max(seen).item())
        if classes != self.classes:
            self._count_classes(classes)
        return super().compute(device)

    def output_names(self):
        return list(NAMES)

    def finish(self, sums):
        check_label_range('F1Metric', sums, self.classes)
        precision, recall, f1, present = 0.0, 0.0, 0.0, 0
        for c in range(self.classes):
            hit, pred, true = sums[f'hit_{c}'], sums[f'pred_{c}'], sums[f'true_{c}']
            if not pred and not true:  # the class is not in this pass
                continue
            present += 1
            p, r = (hit / pred if pred else 0.0), (hit / true if true else 0.0)
            precision, recall, f1 = precision + p, recall + r, f1 + (2 * p * r / (p + r) if p + r else 0.0)
        n = max(present, 1)
        return dict(zip(NAMES, (precision / n, recall / n, f1 / n)))
