"""The domain of a PDE: a region of space (``geometry.py``), times a time interval for a time-dependent one.

Coordinates are named ``x`` (1-D), ``x, y`` (2-D), ``x, y, z`` (3-D), ``x0, x1, ...`` beyond,
then ``t`` when there is time: the columns of every point array, in that order.  Points
are drawn by kind:

- ``interior``: inside the region, and for t in (t0, t1];
- ``boundary``: on the region's boundary (with outward normals, 0 along t), for t in (t0, t1];
- ``initial``: inside the region at t = t0.

Each draw takes its unit-cube points from ``draw(m, columns)`` (sampling method and
generator), so it is a pure function of the seed.
"""

import numpy as np

from scepter_like.data.geometry import Box, rejection_sample
from scepter_like.errors import ConfigError

SPACE_NAMES = ('x', 'y', 'z')
TIME_NAME = 't'


def space_names(dim):
    return SPACE_NAMES[:dim] if dim <= len(SPACE_NAMES) else tuple(f'x{i}' for i in range(dim))


def time_interval(value, where):
    """``(t0, t1)`` from a config's TIME (None: no time); t1 must exceed t0."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(isinstance(v, (int, float)) for v in value):
        raise ConfigError(f'{where}: TIME is the interval [t0, t1] of a time-dependent problem, got {value!r}')
    t0, t1 = float(value[0]), float(value[1])
    if not t1 > t0:
        raise ConfigError(f'{where}: the time domain [t0, t1] = {list(value)} needs t1 > t0; fix TIME')
    return t0, t1


def check_coordinates_agree(names, where):
    """A ConfigError when the points of a split (eval, test) have other coordinates than the train data's, which the
    model is built for (``names``: mode -> coordinate names, of the splits that have them; ``where``: mode -> config
    path): the network's first layer would fail on them, its message blaming IN_DIM, where the data differ."""
    train = names.get('train')
    for mode, own in names.items():
        if train is None or tuple(own) == tuple(train):
            continue
        if TIME_NAME in train and TIME_NAME not in own:
            fix = f'give it the time of the train data: {where[mode]}.TIME as {where["train"]}.TIME'
        elif TIME_NAME in own and TIME_NAME not in train:
            fix = f'leave out {where[mode]}.TIME: the train data have no time'
        else:
            fix = f'give {where[mode]}.GEOMETRY the dimension of {where["train"]}.GEOMETRY'
        raise ConfigError(
            f"{where[mode]}: its points have the coordinates ({', '.join(own)}), and the train data's, which the"
            f' model is built for, ({", ".join(train)}); {fix}'
        )


class Domain:
    """``geometry`` (space), times ``time = (t0, t1)`` when given."""

    def __init__(self, geometry, time=None):
        self.geometry, self.time = geometry, time
        self.names = space_names(geometry.dim) + ((TIME_NAME,) if time is not None else ())

    @property
    def dim(self):
        return len(self.names)

    @property
    def space_dim(self):
        return self.geometry.dim

    def outside(self, points, tolerance=1e-6):
        """Row indices of ``points`` ``[n, dim]`` outside the region (beyond ``tolerance`` of its size) or its times."""
        size = float(np.max(np.asarray(self.geometry.high) - np.asarray(self.geometry.low)))
        out = self.geometry.sdf(points[:, : self.space_dim]) > tolerance * size
        if self.time is not None:
            t0, t1 = self.time
            t = points[:, self.space_dim]
            out |= (t < t0 - tolerance * (t1 - t0)) | (t > t1 + tolerance * (t1 - t0))
        return np.flatnonzero(out)

    def _with_time(self, space, u_time):
        if self.time is None:
            return space
        t0, t1 = self.time
        return np.concatenate([space, (t0 + (1.0 - u_time) * (t1 - t0))[:, None]], axis=1)  # t in (t0, t1]

    def interior(self, n, draw):
        g = self.geometry

        def candidates(m):
            u = draw(m, self.dim)
            space, keep = g.interior_from_unit(u[:, : g.dim])
            return self._with_time(space, u[:, -1]), keep

        return rejection_sample(n, candidates, g.where)

    def boundary(self, n, draw, faces=None):
        """``(points, outward normals)``; ``faces``: a box's faces of these indices only (``Box.face_measures``)."""
        g = self.geometry

        def candidates(m):
            u = draw(m, self.dim)
            if faces is not None:
                space, normals = g.boundary_points(u[:, : g.dim], faces)
                keep = np.ones(m, dtype=bool)
            else:
                space, normals, keep = g.boundary_from_unit(u[:, : g.dim])
            if self.time is not None:  # the lateral boundary: its normals have no time part
                normals = np.concatenate([normals, np.zeros((m, 1))], axis=1)
            return self._with_time(space, u[:, -1]), normals, keep

        return rejection_sample(n, candidates, g.where)

    def initial(self, n, draw):
        if self.time is None:
            raise ValueError('a domain without time has no initial points')
        space = self.geometry.sample_interior(n, draw)
        return np.concatenate([space, np.full((n, 1), self.time[0])], axis=1)

    def grid(self, resolution, where='RESOLUTION'):
        """The points of a regular grid over the bounding box (and time), faces included, that lie in the
        closed domain (not on an edge a difference removed): ``[N, dim]``, the last coordinate fastest."""
        if len(resolution) != self.dim or any(not isinstance(r, int) or r < 2 for r in resolution):
            raise ConfigError(
                f'{where}: need {self.dim} whole numbers of at least 2 (points along {", ".join(self.names)}),'
                f' got {list(resolution)}'
            )
        g = self.geometry
        bounds = list(zip(g.low, g.high)) + ([self.time] if self.time is not None else [])
        axes = [np.linspace(lo, hi, r) for (lo, hi), r in zip(bounds, resolution)]
        points = np.stack([m.reshape(-1) for m in np.meshgrid(*axes, indexing='ij')], axis=1)
        if isinstance(g, Box):
            return points
        return points[g.closed(points[:, : g.dim])]
