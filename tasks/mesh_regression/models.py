"""MeshGraphNet and a per-vertex MLP, in plain torch, trained on normalised values.

Both hold the training split's normalisation statistics as buffers (``normaliser.*``,
so every state dict carries them) and follow the model contract: in train mode
``model(**batch)`` returns ``{'loss'}`` (MSE of the normalised target); in eval / test
mode ``{'pred', 'target'}`` in physical units (what MeshRMSEMetric reads).

``describe()`` adds the statistics the buffers hold to BaseModel's description
(architecture, sizes), so ``from_description`` rebuilds the same model from a checkpoint
without the training config.  For ``predict`` / ``tools/run_inference.py`` a sample is one
graph, fed whole (INPUT_BATCHING 'whole'), and ``--input`` may be a sample file of the
dataset as users write them (``inputs_from_arrays``).
"""

import torch
from torch import nn
from torch.nn import functional as F

from scepter_like.errors import ConfigError, DataError
from scepter_like.model.base import BaseModel
from scepter_like.model.networks import ACTIVATIONS, check_whole_sizes
from scepter_like.model.registry import MODELS
from tasks.mesh_regression.dataset import graph_item, sample_from_arrays
from tasks.mesh_regression.stats import NormStats, load_stats

COORDINATES = 3  # the first three feature columns are the vertex coordinates


def model_stats(cfg):
    """The statistics a model config gives: inline STATS, else the STATS_FILE it names."""
    if cfg.STATS:
        return NormStats.from_dict(cfg.STATS.to_dict(), source=cfg.path_of('STATS'))
    if cfg.STATS_FILE:
        return load_stats(cfg.STATS_FILE)
    raise ConfigError(
        f'{cfg.path_of("STATS")}: the model needs normalisation statistics; train with SOLVER.NAME:'
        ' MeshRegressionSolver (computes them from TRAIN_DATA) or set STATS_FILE to a stats.json'
    )


def mlp(in_dim, hidden, out_dim, hidden_layers, act, layer_norm):
    """Linear-act blocks (``hidden_layers`` of width ``hidden``), a last Linear, LayerNorm if asked."""
    layers, dim = [], in_dim
    for _ in range(hidden_layers):
        layers += [nn.Linear(dim, hidden), act()]
        dim = hidden
    layers.append(nn.Linear(dim, out_dim))
    if layer_norm:
        layers.append(nn.LayerNorm(out_dim))
    return nn.Sequential(*layers)


class Normaliser(nn.Module):
    """Feature and target normalisation from a NormStats, kept as buffers."""

    def __init__(self, stats):
        super().__init__()
        self.feature_names = list(stats.feature_names)
        self.register_buffer('feature_mean', torch.tensor(stats.feature_mean, dtype=torch.float32))
        self.register_buffer('feature_scale', torch.tensor(stats.feature_scale, dtype=torch.float32))
        self.register_buffer('target_mean', torch.tensor(stats.target_mean, dtype=torch.float32))
        self.register_buffer('target_scale', torch.tensor(float(stats.target_scale), dtype=torch.float32))

    def stats(self):
        """The statistics these buffers hold (as loaded, e.g. from a checkpoint)."""
        return NormStats(
            feature_names=list(self.feature_names),
            feature_mean=self.feature_mean.tolist(),
            feature_scale=self.feature_scale.tolist(),
            target_mean=self.target_mean.tolist(),
            target_scale=float(self.target_scale),
        )

    def inputs(self, features):
        if features.dim() != 2 or features.shape[1] != len(self.feature_mean):
            raise DataError(
                f'the samples have features of shape {tuple(features.shape)}, but the normalisation statistics'
                f' are for {len(self.feature_mean)} per vertex ({", ".join(self.feature_names)}); use data with'
                ' the PCA modes of the training run, or retrain on this data'
            )
        return (features - self.feature_mean) / self.feature_scale

    def target(self, target):
        if target.dim() != 2 or target.shape[1] != len(self.target_mean):
            raise DataError(
                f'the targets have shape {tuple(target.shape)}, but the normalisation statistics are for'
                f" {len(self.target_mean)} channels per vertex; use data with the training run's target"
            )
        return (target - self.target_mean) / self.target_scale

    def physical(self, prediction):
        return prediction * self.target_scale + self.target_mean


class MeshModel(BaseModel):
    """What both mesh models share: statistics, the output contract, the description, graph inputs."""

    para_dict = {
        'STATS': {
            'value': {},
            'description': 'normalisation statistics (a stats.json mapping); MeshRegressionSolver fills them in',
        },
        'STATS_FILE': {'value': '', 'description': 'a stats.json to read when STATS is empty'},
    }
    ARCH_KEYS = ()  # the config keys that fix the architecture (with the statistics' widths)
    INPUT_BATCHING = 'whole'  # a sample is one graph: features [V, F] and edge_index [2, E] in one forward

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        stats = model_stats(cfg)
        self.normaliser = Normaliser(stats)
        self.in_dim, self.out_dim = stats.n_features, stats.n_target

    def outputs(self, prediction, target):
        """Train: ``{'loss'}`` on normalised values; eval / test: ``{'pred', 'target'}`` in physical units."""
        norm = self._modules['normaliser']
        if self.training:
            if target is None:
                raise DataError("training needs 'target' in the batch")
            return {'loss': F.mse_loss(prediction, norm.target(target))}
        out = {'pred': norm.physical(prediction)}
        if target is not None:
            out['target'] = target
        return out

    def describe(self):
        """BaseModel's description with the statistics the buffers hold (as loaded, e.g. from a checkpoint)."""
        desc = super().describe()
        for key in ('STATS', 'STATS_FILE'):
            desc['config'].pop(key, None)
        desc['stats'] = self.normaliser.stats().to_dict()
        return desc

    @classmethod
    def from_description(cls, desc):
        """The model ``desc`` (a ``describe()`` dict) describes, with fresh weights; load its state dict next."""
        if not isinstance(desc, dict) or not {'architecture', 'config', 'stats'} <= set(desc):
            raise DataError(f'not a mesh model description (needs architecture, config, stats): {desc!r:.200}')
        name = desc['architecture']
        model_cls = MODELS.get(name, 'architecture')
        if not (isinstance(model_cls, type) and issubclass(model_cls, cls)):
            raise DataError(f'architecture {name!r} is not a {cls.__name__}')
        return MODELS.build({'NAME': name, **desc['config'], 'STATS': desc['stats']})

    def inputs_from_arrays(self, arrays, source='the input'):
        """A sample file of the dataset (points, coefficients, stage, edges, optional target) as the batch of one graph.

        Arrays already named by batch key (``features``, ``edge_index``) pass as they are.
        """
        if 'features' in arrays:
            return arrays
        return graph_item(sample_from_arrays(arrays, source, need_target=False))


class MessagePassingBlock(nn.Module):
    """One MeshGraphNet processor step: edge update, aggregation at the receiving vertex, node update.

    ``e' = e + f_e([e, h_src, h_dst])``; ``h' = h + f_v([h, agg_{edges into v} e'])``.
    """

    def __init__(self, hidden, hidden_layers, act, mean):
        super().__init__()
        self.edge_mlp = mlp(3 * hidden, hidden, hidden, hidden_layers, act, True)
        self.node_mlp = mlp(2 * hidden, hidden, hidden, hidden_layers, act, True)
        self.mean = mean

    def forward(self, h, e, src, dst, inv_degree=None):
        e = e + self.edge_mlp(torch.cat([e, h[src], h[dst]], dim=1))
        agg = e.new_zeros((h.shape[0], e.shape[1])).index_add_(0, dst, e)
        if inv_degree is not None:
            agg = agg * inv_degree
        h = h + self.node_mlp(torch.cat([h, agg], dim=1))
        return h, e


@MODELS.register_class()
class MeshGraphNet(MeshModel):
    """Encoder, PROCESSOR_BLOCKS message-passing blocks with residuals, decoder (Pfaff et al. 2021).

    Edge inputs are the normalised coordinate difference of the two vertices and its
    length; node inputs the normalised per-vertex features.
    """

    para_dict = {
        'HIDDEN': {'value': 64, 'description': 'width of node and edge latents and of every MLP', 'min': 1},
        'PROCESSOR_BLOCKS': {'value': 4, 'description': 'message-passing blocks', 'min': 1},
        'MLP_LAYERS': {'value': 1, 'description': 'hidden layers in each MLP', 'min': 1},
        'AGGREGATION': {
            'value': 'sum',
            'description': 'sum | mean of the edges arriving at a vertex',
            'choices': ['sum', 'mean'],
        },
        'ACTIVATION': {'value': 'relu', 'description': 'relu | silu | gelu | tanh', 'choices': list(ACTIVATIONS)},
    }
    ARCH_KEYS = ('HIDDEN', 'PROCESSOR_BLOCKS', 'MLP_LAYERS', 'AGGREGATION', 'ACTIVATION')

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        act, hidden, layers = ACTIVATIONS[cfg.ACTIVATION], cfg.HIDDEN, cfg.MLP_LAYERS
        self.mean_aggregation = cfg.AGGREGATION == 'mean'
        self.node_encoder = mlp(self.in_dim, hidden, hidden, layers, act, True)
        self.edge_encoder = mlp(COORDINATES + 1, hidden, hidden, layers, act, True)
        self.processor = nn.ModuleList(
            MessagePassingBlock(hidden, layers, act, self.mean_aggregation) for _ in range(cfg.PROCESSOR_BLOCKS)
        )
        self.decoder = mlp(hidden, hidden, self.out_dim, layers, act, False)

    def forward(self, features, edge_index, target=None, **_):
        x = self.normaliser.inputs(features)
        src, dst = edge_index[0], edge_index[1]
        pos = x[:, :COORDINATES]
        rel = pos[dst] - pos[src]
        e = self.edge_encoder(torch.cat([rel, rel.norm(dim=1, keepdim=True)], dim=1))
        h = self.node_encoder(x)
        inv_degree = None
        if self.mean_aggregation:
            degree = torch.zeros(len(x), 1, dtype=x.dtype, device=x.device).index_add_(
                0, dst, torch.ones(len(dst), 1, dtype=x.dtype, device=x.device)
            )
            inv_degree = 1.0 / degree.clamp(min=1.0)
        for block in self.processor:
            h, e = block(h, e, src, dst, inv_degree)
        return self.outputs(self.decoder(h), target)


@MODELS.register_class()
class MeshMLP(MeshModel):
    """A per-vertex MLP over the same features; batches hold whole samples.

    In train mode the batch's points are shuffled and, with POINTS_PER_STEP > 0, the
    first POINTS_PER_STEP of them make the step (a random subset of points from every
    sample of the batch); evaluation uses every point in order.
    """

    para_dict = {
        'HIDDEN_DIMS': {'value': [128, 128, 128], 'description': 'widths of the hidden layers', 'min': 1},
        'ACTIVATION': {'value': 'silu', 'description': 'relu | silu | gelu | tanh', 'choices': list(ACTIVATIONS)},
        'POINTS_PER_STEP': {
            'value': 0,
            'description': 'train on this many shuffled points of a batch (0: all)',
            'min': 0,
        },
    }
    ARCH_KEYS = ('HIDDEN_DIMS', 'ACTIVATION')

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        check_whole_sizes(cfg, 'HIDDEN_DIMS')
        self.points_per_step = cfg.POINTS_PER_STEP
        act, layers, dim = ACTIVATIONS[cfg.ACTIVATION], [], self.in_dim
        for width in cfg.HIDDEN_DIMS:
            layers += [nn.Linear(dim, width), act()]
            dim = width
        self.net = nn.Sequential(*layers, nn.Linear(dim, self.out_dim))

    def forward(self, features, target=None, **_):
        x = self.normaliser.inputs(features)
        if self.training and target is not None:
            order = torch.randperm(len(x), device=x.device)
            if self.points_per_step:
                order = order[: self.points_per_step]
            x, target = x[order], target[order]
        return self.outputs(self.net(x), target)
