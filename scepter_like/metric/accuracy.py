"""Top-k classification accuracy."""

import torch

from scepter_like.errors import ConfigError
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS


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
        self.state_names = tuple(f'correct@{k}' for k in self.topk) + ('count',)

    def update(self, data):
        logits, label = self.inputs(data)
        if self.topk[-1] > logits.shape[-1]:  # every label is among all classes: a top-k of 1.0 says nothing
            raise ConfigError(
                f'{self.cfg.path_of("TOPK")}: top-{self.topk[-1]} accuracy of {logits.shape[-1]} classes is 1 by'
                f' definition; give TOPK values up to {logits.shape[-1]}'
            )
        hit = logits.topk(self.topk[-1], dim=-1).indices.eq(label.view(-1, 1))  # topk is sorted
        correct = [hit[:, :k].any(dim=1).sum() for k in self.topk]
        count = torch.tensor(label.numel(), device=logits.device)
        self.accumulate(torch.stack(correct + [count]))

    def output_names(self):
        return ['accuracy' if k == 1 else f'accuracy_top{k}' for k in self.topk]

    def finish(self, sums):
        count = max(sums['count'], 1.0)
        return {name: sums[f'correct@{k}'] / count for name, k in zip(self.output_names(), self.topk)}
