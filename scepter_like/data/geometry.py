"""Axis-aligned boxes to draw collocation points from: an interval (1-D), a rectangle (2-D), a box (3-D, or more).

Points are drawn with a ``numpy.random.Generator`` the caller passes in, so a draw is a
pure function of that generator's seed.  Interior points are uniform in the open box;
boundary points are uniform over the boundary's measure (each face is chosen with
probability proportional to its area; an interval's two end points are equally likely).
"""

import numpy as np

from scepter_like.errors import ConfigError


class Box:
    """The box ``[low_0, high_0] x ... x [low_{d-1}, high_{d-1}]``; ``high > low`` on every axis."""

    def __init__(self, low, high, where='GEOMETRY'):
        low, high = np.asarray(low, dtype=np.float64).reshape(-1), np.asarray(high, dtype=np.float64).reshape(-1)
        if low.size == 0 or low.shape != high.shape:
            raise ConfigError(
                f'{where}: LOW and HIGH need the same number (>= 1) of coordinates, got {low.tolist()} and'
                f' {high.tolist()}'
            )
        extent = high - low
        if not np.all(np.isfinite(extent)) or np.any(extent <= 0):
            raise ConfigError(
                f'{where}: each HIGH coordinate must exceed its LOW one (extent HIGH - LOW = {extent.tolist()});'
                ' fix LOW / HIGH'
            )
        self.low, self.high, self.extent = low, high, extent

    @property
    def dim(self):
        return self.low.size

    def sample_interior(self, n, rng):
        """``n`` points uniform in the box, float64 ``[n, dim]``."""
        return self.low + rng.random((n, self.dim)) * self.extent

    def face_measures(self):
        """Measure of each of the ``2 * dim`` faces, ordered (axis 0 low, axis 0 high, axis 1 low, ...)."""
        areas = [np.prod(np.delete(self.extent, axis)) for axis in range(self.dim)]
        return np.repeat(np.asarray(areas, dtype=np.float64), 2)

    def sample_boundary(self, n, rng):
        """``n`` points uniform over the boundary, float64 ``[n, dim]``."""
        measures = self.face_measures()
        faces = rng.choice(measures.size, size=n, p=measures / measures.sum())
        points = self.sample_interior(n, rng)
        axis, upper = faces // 2, faces % 2 == 1
        rows = np.arange(n)
        points[rows, axis] = np.where(upper, self.high[axis], self.low[axis])
        return points

    def grid(self, resolution, where='RESOLUTION'):
        """The ``prod(resolution)`` points of a regular grid including the faces, ``[N, dim]`` (last axis fastest)."""
        if len(resolution) != self.dim or any(r < 2 for r in resolution):
            raise ConfigError(
                f'{where}: need {self.dim} numbers of at least 2 (points per axis), got {list(resolution)}'
            )
        axes = [np.linspace(lo, hi, r) for lo, hi, r in zip(self.low, self.high, resolution)]
        mesh = np.meshgrid(*axes, indexing='ij')
        return np.stack([m.reshape(-1) for m in mesh], axis=1)
