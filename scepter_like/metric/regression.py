"""Mean squared error over every element."""

import torch

from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS
from scepter_like.model.losses import same_shape


@METRICS.register_class()
class MSEMetric(Metric):
    """Reports ``mse``: the mean of squared differences over all elements of all samples."""

    para_dict = {'KEYS': {'value': ['pred', 'target'], 'description': 'the prediction key, then the target key'}}
    state_names = ('sq_err', 'count')
    lower_is_better = ('mse',)

    def update(self, data):
        pred, target = self.inputs(data)
        diff = pred.detach().to(torch.float64) - same_shape(pred, target, 'MSEMetric').detach().to(torch.float64)
        self.accumulate(
            torch.stack([diff.pow(2).sum(), torch.tensor(float(diff.numel()), dtype=torch.float64, device=diff.device)])
        )

    def output_names(self):
        return ['mse']

    def finish(self, sums):
        return {'mse': sums['sq_err'] / max(sums['count'], 1.0)}
