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
from torch.utils.checkpoint import checkpoint

from scepter_like.data.datasets import reject_nonfinite
from scepter_like.errors import ConfigError, DataError
from scepter_like.model.base import BaseModel
from scepter_like.model.networks import ACTIVATIONS, check_whole_sizes
from scepter_like.model.registry import MODELS
from tasks.mesh_regression.dataset import check_graph_edges, graph_item, sample_from_arrays
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


def require_stats(stats, cfg, field, key, fallback, needed):
    """A DataError when ``needed`` and the statistics lack ``field`` (a stats.json written before it existed)."""
    if needed and getattr(stats, field) is None:
        raise DataError(
            f'{cfg.path_of(key)}: {cfg[key]!r} needs {field} in the normalisation statistics, which these'
            f' (written before it existed) lack; train again with MeshRegressionSolver to recompute them,'
            f' or set {key}: {fallback}'
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
    """Feature, target and (for MeshGraphNet) edge normalisation from a NormStats, kept as buffers.

    ``target_scale`` is one scale for every channel, or with ``per_channel`` each channel's
    standard deviation [D]; ``edge_mean`` and ``edge_scale`` exist with ``edges``.
    """

    def __init__(self, stats, per_channel=False, edges=False):
        super().__init__()
        self.feature_names = list(stats.feature_names)
        self.per_channel, self.has_edges = per_channel, edges
        self.register_buffer('feature_mean', torch.tensor(stats.feature_mean, dtype=torch.float32))
        self.register_buffer('feature_scale', torch.tensor(stats.feature_scale, dtype=torch.float32))
        self.register_buffer('target_mean', torch.tensor(stats.target_mean, dtype=torch.float32))
        target_scale = stats.target_std if per_channel else float(stats.target_scale)
        self.register_buffer('target_scale', torch.tensor(target_scale, dtype=torch.float32))
        if edges:
            self.register_buffer('edge_mean', torch.tensor(stats.edge_mean, dtype=torch.float32))
            self.register_buffer('edge_scale', torch.tensor(stats.edge_scale, dtype=torch.float32))

    def stats(self):
        """The statistics these buffers hold (as loaded, e.g. from a checkpoint)."""
        stats = NormStats(
            feature_names=list(self.feature_names),
            feature_mean=self.feature_mean.tolist(),
            feature_scale=self.feature_scale.tolist(),
            target_mean=self.target_mean.tolist(),
            target_scale=float(self.target_scale.double().pow(2).mean().sqrt()),  # per channel: their RMS
        )
        if self.per_channel:
            stats.target_std = self.target_scale.tolist()
        if self.has_edges:
            stats.edge_mean, stats.edge_scale = self.edge_mean.tolist(), self.edge_scale.tolist()
        return stats

    def differences(self, stats):
        """How the statistics these buffers hold differ from ``stats``: one ``'name by up to X (Y %)'`` per buffer
        that does beyond float32 rounding (X the largest difference, Y it relative to the buffer's largest value)."""
        fresh = Normaliser(stats, self.per_channel, self.has_edges)
        found = []
        for name, buffer in self.named_buffers():
            held = buffer.detach().double().cpu()  # compared where the fresh ones are (the model may be on a GPU)
            gap = (fresh.get_buffer(name).double() - held).abs().max().item()
            size = max(held.abs().max().item(), 1e-12)
            if gap > 1e-6 * size:
                found.append(f'{name} by up to {gap:.4g} ({100 * gap / size:.3g} %)')
        return found

    def inputs(self, features):
        if features.dim() != 2 or features.shape[1] != len(self.feature_mean):
            raise DataError(
                f'the samples have features of shape {tuple(features.shape)}, but the normalisation statistics'
                f' are for {len(self.feature_mean)} per vertex ({", ".join(self.feature_names)}); use data with'
                ' the PCA modes of the training run, or retrain on this data'
            )
        return (features - self.feature_mean) / self.feature_scale

    def edges(self, edge_inputs):
        return (edge_inputs - self.edge_mean) / self.edge_scale

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
        'TARGET_SCALE': {
            'value': 'shared',
            'description': "the targets' divisor: 'shared' (one for all channels: the loss weighs them as the"
            " physical RMSE does) | 'per_channel' (each channel's standard deviation, as PhysicsNeMo's examples)",
            'choices': ['shared', 'per_channel'],
        },
    }
    # the config keys that fix the architecture (with the statistics' widths); a subclass adds its own
    ARCH_KEYS = ('TARGET_SCALE',)
    INPUT_BATCHING = 'whole'  # a sample is one graph: features [V, F] and edge_index [2, E] in one forward
    DYNAMIC_DIMS = {'features': 0, 'target': 0, 'edge_index': 1}  # vertices and edges differ between batches

    def __init__(self, cfg, logger=None, standardise_edges=False):
        super().__init__(cfg, logger)
        stats = model_stats(cfg)
        per_channel = cfg.TARGET_SCALE == 'per_channel'
        require_stats(stats, cfg, 'target_std', 'TARGET_SCALE', 'shared', per_channel)
        require_stats(stats, cfg, 'edge_mean', 'EDGE_FEATURES', 'raw', standardise_edges)
        self.normaliser = Normaliser(stats, per_channel, standardise_edges)
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

    def metrics_hint(self):
        return '[{NAME: MeshRMSEMetric, KEYS: [pred, target]}]'

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

        Arrays already named by batch key (``features``, ``edge_index``) pass as they are, once their features
        are found finite and their ``edge_index`` holds both directions of every edge, once, and no self-loop (as
        the dataset makes it from a sample file's ``edges``): ``check_graph_edges``.
        """
        if 'features' in arrays:
            reject_nonfinite(arrays['features'], f'{source}: features')
            if 'edge_index' in arrays:
                n = len(arrays['features'])
                check_graph_edges(arrays['edge_index'], n, f'{source}: edge_index', both_directions=True)
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


def run_blocks(blocks, h, e, src, dst, inv_degree):
    """Message-passing ``blocks`` one after the other: the latest node and edge latents."""
    for block in blocks:
        h, e = block(h, e, src, dst, inv_degree)
    return h, e


@MODELS.register_class()
class MeshGraphNet(MeshModel):
    """Encoder, PROCESSOR_BLOCKS message-passing blocks with residuals, decoder (Pfaff et al. 2021).

    Edge inputs are the difference of the two vertices' per-axis-normalised coordinates and
    its length, not the physical length PhysicsNeMo's examples use (with EDGE_FEATURES
    'standardised', each column then standardised by the training edges' statistics); node
    inputs the normalised per-vertex features.

    With PROCESSOR_CHECKPOINT_SEGMENTS = S > 0 the blocks run in S segments whose
    activations are not kept for backward but recomputed there (activation checkpointing,
    PhysicsNeMo's ``num_processor_checkpoint_segments``): the memory of the processor's
    activations falls to the segments' inputs plus one segment's, for one more forward of
    the processor per step.  The gradients are the plain model's, to float32 rounding.
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
        'EDGE_FEATURES': {
            'value': 'raw',
            'description': "'raw' (differences of the per-axis-normalised coordinates, and their length) |"
            " 'standardised' (then each column by the training edges' mean and standard deviation; PhysicsNeMo's"
            ' examples standardise differences and lengths of the physical positions instead)',
            'choices': ['raw', 'standardised'],
        },
        'PROCESSOR_CHECKPOINT_SEGMENTS': {
            'value': 0,
            'description': 'recompute the processor activations in backward, in this many segments of blocks'
            ' (less memory, one more processor forward); 0: off; PROCESSOR_BLOCKS must be a multiple',
            'min': 0,
        },
    }
    ARCH_KEYS = (
        'HIDDEN',
        'PROCESSOR_BLOCKS',
        'MLP_LAYERS',
        'AGGREGATION',
        'ACTIVATION',
        'EDGE_FEATURES',
        *MeshModel.ARCH_KEYS,
    )

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger, standardise_edges=cfg.EDGE_FEATURES == 'standardised')
        segments = cfg.PROCESSOR_CHECKPOINT_SEGMENTS
        if segments and cfg.PROCESSOR_BLOCKS % segments:
            raise ConfigError(
                f'{cfg.path_of("PROCESSOR_CHECKPOINT_SEGMENTS")}: {segments} segments do not divide'
                f' PROCESSOR_BLOCKS {cfg.PROCESSOR_BLOCKS}; give a divisor of it, or 0 (off)'
            )
        self.segment_blocks = cfg.PROCESSOR_BLOCKS // segments if segments else 0
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
        edge_inputs = torch.cat([rel, rel.norm(dim=1, keepdim=True)], dim=1)
        if self.normaliser.has_edges:
            edge_inputs = self.normaliser.edges(edge_inputs)
        e = self.edge_encoder(edge_inputs)
        h = self.node_encoder(x)
        inv_degree = None
        if self.mean_aggregation:
            degree = torch.zeros(len(x), 1, dtype=x.dtype, device=x.device).index_add_(
                0, dst, torch.ones(len(dst), 1, dtype=x.dtype, device=x.device)
            )
            inv_degree = 1.0 / degree.clamp(min=1.0)
        if self.segment_blocks and torch.is_grad_enabled():
            for start in range(0, len(self.processor), self.segment_blocks):
                segment = self.processor[start : start + self.segment_blocks]
                h, e = checkpoint(run_blocks, segment, h, e, src, dst, inv_degree, use_reentrant=False)
        else:
            h, e = run_blocks(self.processor, h, e, src, dst, inv_degree)
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
    ARCH_KEYS = ('HIDDEN_DIMS', 'ACTIVATION', *MeshModel.ARCH_KEYS)

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
