"""Normalisation statistics: computed once from the training split, saved as ``stats.json``.

Inputs: per feature column, the mean and standard deviation over every training vertex.
Targets: the per-channel mean, and two scales a model chooses between (its TARGET_SCALE):
one for all channels (``target_scale``, the RMS of the centred target over every channel,
so the normalised loss weighs channels as the physical RMSE does) or each channel's own
standard deviation (``target_std``).  Edges (for MeshGraphNet's EDGE_FEATURES
'standardised'): per column of its edge inputs (the difference of the two vertices'
per-axis-normalised coordinates, in both directions, and its length), the mean and standard
deviation over every training edge.  A constant column gets scale 1.

``target_std`` and the edge statistics are absent from a ``stats.json`` written before
they existed; the options that need them then ask for new statistics.
"""

import dataclasses
import json
import math

import numpy as np

from scepter_like.errors import DataError
from scepter_like.utils.checkpoint import atomic_write_text
from scepter_like.utils.distributed import broadcast_object, get_rank

STATS_FILE = 'stats.json'


@dataclasses.dataclass
class NormStats:
    feature_names: list
    feature_mean: list
    feature_scale: list
    target_mean: list
    target_scale: float
    target_std: list = None
    edge_mean: list = None
    edge_scale: list = None
    samples: int = 0
    vertices: int = 0

    @property
    def n_features(self):
        return len(self.feature_mean)

    @property
    def n_target(self):
        return len(self.target_mean)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data, source='statistics'):
        """Statistics from a plain dict (a ``stats.json``, a model description); DataError if malformed."""
        fields = {f.name for f in dataclasses.fields(cls)}
        required = {'feature_mean', 'feature_scale', 'target_mean', 'target_scale'}
        data = dict(data or {})
        if not required <= set(data) or set(data) - fields:
            raise DataError(
                f'{source}: not mesh normalisation statistics (needs {sorted(required)}, got {sorted(data)});'
                ' give a stats.json written by a training run'
            )
        data.setdefault('feature_names', [f'f{i}' for i in range(len(data['feature_mean']))])
        stats = cls(**data)
        if len(stats.feature_scale) != stats.n_features or len(stats.feature_names) != stats.n_features:
            raise DataError(f'{source}: feature_mean, feature_scale and feature_names differ in length')
        return stats


def feature_names(n_coefficients):
    return ['x', 'y', 'z', *(f'pca_c{i + 1}' for i in range(n_coefficients)), 'stage']


def compute_stats(samples):
    """Statistics of ``samples`` (dicts with ``features`` [V, F], ``target`` [V, D], ``edges`` [2, E]) in float64."""
    if not samples:
        raise DataError('normalisation statistics need at least one training sample')
    features = np.concatenate([np.asarray(s['features'], dtype=np.float64) for s in samples])
    target = np.concatenate([np.asarray(s['target'], dtype=np.float64) for s in samples])
    f_mean, f_scale = features.mean(0), _scale(features.std(0))
    t_mean = target.mean(0)
    edges = np.concatenate(
        [edge_inputs((s['features'][:, :3] - f_mean[:3]) / f_scale[:3], s['edges']) for s in samples]
    )
    return NormStats(
        feature_names=feature_names(features.shape[1] - 4),
        feature_mean=f_mean.tolist(),
        feature_scale=f_scale.tolist(),
        target_mean=t_mean.tolist(),
        target_scale=float(_scale(np.sqrt(((target - t_mean) ** 2).mean()))),
        target_std=_scale(target.std(0)).tolist(),
        edge_mean=edges.mean(0).tolist(),
        edge_scale=_scale(edges.std(0)).tolist(),
        samples=len(samples),
        vertices=len(features),
    )


def edge_inputs(coordinates, edges):
    """MeshGraphNet's raw edge inputs [2E, 4] of undirected ``edges`` [2, E]: both directions' differences, length."""
    coordinates = np.asarray(coordinates, dtype=np.float64)
    rel = coordinates[edges[1]] - coordinates[edges[0]]
    rel = np.concatenate([rel, -rel])
    return np.concatenate([rel, np.linalg.norm(rel, axis=1, keepdims=True)], 1)


def _scale(std):
    """A standard deviation as a divisor: 1 where it is (nearly) zero, a constant column."""
    return np.where(std > 1e-12, std, 1.0)


def mean_baseline_rmse(samples, stats):
    """Per-point RMSE of predicting the training mean target everywhere: the figure a model must beat."""
    target = np.concatenate([np.asarray(s['target'], dtype=np.float64) for s in samples])
    return float(np.sqrt(((target - np.asarray(stats.target_mean)) ** 2).sum(1).mean()))


def shared_stats(dataset):
    """``dataset.normalisation_stats()`` computed on rank 0 and handed to every rank: the same values everywhere."""
    return NormStats.from_dict(broadcast_object(dataset.normalisation_stats().to_dict() if get_rank() == 0 else None))


def save_stats(stats, path):
    """Write ``stats`` to ``path`` atomically as strict JSON: a non-finite value is a ValueError, never a file."""
    atomic_write_text(path, json.dumps(stats.to_dict(), indent=1, allow_nan=False) + '\n')


def load_stats(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DataError(f'statistics file not found: {path}; give the stats.json of the training run') from None
    except (OSError, ValueError) as e:
        raise DataError(f'cannot read statistics file {path}: {e}') from None
    stats = NormStats.from_dict(data, source=path)
    scales = [*stats.feature_scale, stats.target_scale, *(stats.target_std or ()), *(stats.edge_scale or ())]
    if not all(math.isfinite(v) for v in scales):
        raise DataError(f'{path}: non-finite scales')
    return stats
