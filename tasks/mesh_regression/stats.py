"""Normalisation statistics: computed once from the training split, saved as ``stats.json``.

Inputs are normalised per feature column (mean and standard deviation over every
training vertex); targets by their per-channel mean and one scale (the RMS of the
centred target over every channel), so the normalised loss weighs channels as the
physical RMSE does.  A constant column gets scale 1.
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
    """Statistics of ``samples`` (dicts with ``features`` [V, F] and ``target`` [V, D]) in float64."""
    if not samples:
        raise DataError('normalisation statistics need at least one training sample')
    features = np.concatenate([np.asarray(s['features'], dtype=np.float64) for s in samples])
    target = np.concatenate([np.asarray(s['target'], dtype=np.float64) for s in samples])
    f_mean, f_std = features.mean(0), features.std(0)
    t_mean = target.mean(0)
    t_scale = float(np.sqrt(((target - t_mean) ** 2).mean()))
    return NormStats(
        feature_names=feature_names(features.shape[1] - 4),
        feature_mean=f_mean.tolist(),
        feature_scale=np.where(f_std > 1e-12, f_std, 1.0).tolist(),
        target_mean=t_mean.tolist(),
        target_scale=t_scale if t_scale > 1e-12 else 1.0,
        samples=len(samples),
        vertices=len(features),
    )


def mean_baseline_rmse(samples, stats):
    """Per-point RMSE of predicting the training mean target everywhere: the figure a model must beat."""
    target = np.concatenate([np.asarray(s['target'], dtype=np.float64) for s in samples])
    return float(np.sqrt(((target - np.asarray(stats.target_mean)) ** 2).sum(1).mean()))


def shared_stats(dataset):
    """``dataset.normalisation_stats()`` computed on rank 0 and handed to every rank: the same values everywhere."""
    return NormStats.from_dict(broadcast_object(dataset.normalisation_stats().to_dict() if get_rank() == 0 else None))


def save_stats(stats, path):
    atomic_write_text(path, json.dumps(stats.to_dict(), indent=1) + '\n')


def load_stats(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DataError(f'statistics file not found: {path}; give the stats.json of the training run') from None
    except (OSError, ValueError) as e:
        raise DataError(f'cannot read statistics file {path}: {e}') from None
    stats = NormStats.from_dict(data, source=path)
    if not all(math.isfinite(v) for v in [*stats.feature_scale, stats.target_scale]):
        raise DataError(f'{path}: non-finite scales')
    return stats
