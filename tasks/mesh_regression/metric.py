"""Per-point RMSE in physical units, from reduced sums (exact under any world size)."""

import torch

from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.base import Metric
from scepter_like.metric.registry import METRICS


@METRICS.register_class()
class MeshRMSEMetric(Metric):
    """Reports ``rmse`` = sqrt(sum over points of |pred - target|^2 / points): the RMS length of the error vector.

    With CHANNELS (one name per target channel) also ``rmse_<name>``, each channel's RMSE in
    its own units: the combined figure is dominated by the channel of the largest units (K
    beside Pa), so it cannot tell a model that got one variable wrong.  The sums (squared
    error, per channel too, and the point count) are all-reduced once per evaluation, so the
    values are the same whatever the number of ranks or the batch sizes.
    """

    para_dict = {
        'KEYS': {'value': ['pred', 'target'], 'description': 'the prediction key, then the target key'},
        'CHANNELS': {
            'value': [],
            'description': "the target channels' names, in order: also report rmse_<name> per channel; []: none",
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.channels = [str(name) for name in cfg.CHANNELS]
        if len(set(self.channels)) != len(self.channels) or not all(self.channels):
            raise ConfigError(f'{cfg.path_of("CHANNELS")}: give each channel a name, once; got {self.channels}')
        self.state_names = ('sq_err', 'points', *(f'sq_err_{name}' for name in self.channels))
        self.lower_is_better = tuple(self.output_names())

    def update(self, data):
        pred, target = self.inputs(data)
        if pred.shape != target.shape:  # [V, 2] against [V, 1] would broadcast to a meaningless error
            raise DataError(
                f'MeshRMSEMetric: the prediction is {list(pred.shape)} and the target {list(target.shape)}; the data'
                " needs targets of the channels the model predicts (the training data's)"
            )
        if self.channels and pred.shape[-1] != len(self.channels):
            raise ConfigError(
                f'{self.cfg.path_of("CHANNELS")}: names {len(self.channels)} channels {self.channels}; the target has'
                f' {pred.shape[-1]}'
            )
        sq = (pred.detach().to(torch.float64) - target.detach().to(torch.float64)).pow(2).reshape(len(pred), -1)
        per_channel = sq.sum(0) if self.channels else sq.new_zeros(0)
        points = torch.tensor([float(len(sq))], dtype=torch.float64, device=sq.device)
        self.accumulate(torch.cat([sq.sum().view(1), points, per_channel]))

    def output_names(self):
        return ['rmse', *(f'rmse_{name}' for name in self.channels)]

    def finish(self, sums):
        points = max(sums.pop('points'), 1.0)  # what is left: the squared-error sums, in output_names order
        return {name: (sq / points) ** 0.5 for name, sq in zip(self.output_names(), sums.values())}
