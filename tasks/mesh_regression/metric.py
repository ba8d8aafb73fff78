"""Per-point RMSE in physical units, from reduced sums (exact under any world size)."""

import torch

from scepter_like.errors import DataError
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS


@METRICS.register_class()
class MeshRMSEMetric(Metric):
    """Reports ``rmse`` = sqrt(sum over points of |pred - target|^2 / points): the RMS length of the error vector.

    The sums (squared error, point count) are all-reduced once per evaluation, so the
    value is the same whatever the number of ranks or the batch sizes.
    """

    para_dict = {'KEYS': {'value': ['pred', 'target'], 'description': 'the prediction key, then the target key'}}
    state_names = ('sq_err', 'points')
    lower_is_better = ('rmse',)

    def update(self, data):
        pred, target = self.inputs(data)
        if pred.shape != target.shape:  # [V, 2] against [V, 1] would broadcast to a meaningless error
            raise DataError(
                f'MeshRMSEMetric: the prediction is {list(pred.shape)} and the target {list(target.shape)}; the data'
                " needs targets of the channels the model predicts (the training data's)"
            )
        diff = pred.detach().to(torch.float64) - target.detach().to(torch.float64)
        points = torch.tensor(float(len(diff)), dtype=torch.float64, device=diff.device)
        self.accumulate(torch.stack([diff.pow(2).sum(), points]))

    def output_names(self):
        return ['rmse']

    def finish(self, sums):
        return {'rmse': (sums['sq_err'] / max(sums['points'], 1.0)) ** 0.5}
