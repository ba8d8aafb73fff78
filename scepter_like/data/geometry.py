"""Regions of space to draw collocation points from: interval, rectangle / box, disk / ball, polygon, and
their unions and differences.

Every region knows its signed distance ``sdf(p)`` (negative inside, zero on the boundary,
positive outside; exact in sign, and in value near the boundary) and its boundary as
pieces of known measure that map points of the unit cube onto the boundary, with outward
normals.  That is all sampling needs:

- interior points: unit-cube points mapped onto the bounding box, kept where ``sdf < 0``;
- boundary points: unit-cube points mapped onto the pieces (a piece picked with probability
  proportional to its measure by the first coordinate), kept where the point lies on the
  region's own boundary, by DeepXDE's CSG rules: a union keeps each part's boundary outside
  the other (closed) parts, a difference keeps its first part's boundary outside the
  (closed) subtracted ones and the subtracted ones' boundary strictly inside the first,
  with their normals turned around.  Where pieces meet (``|sdf| <= tolerance`` of two or
  more), a step of ``PROBE`` off the point decides: it is kept when the region lies against
  its normal and not along it (an L's removed edges, where a subtracted square shares the
  outer one's sides, lie on neither; two parts side by side share an inner edge), and
  counted once, on the first piece, where two pieces share it with the same normal (a
  union's common outer edge).
- grid points (``closed``): the points of the closed region, without those edges.

Sampling draws unit points through a ``draw(m, columns)`` function (``sampling.unit_points``
with its method and generator), so every draw is a pure function of the seed.  The
``GEOMETRIES`` entries (``Interval``, ``Rectangle``, ``Box``, ``Disk``, ``Ball``, ``Polygon``,
``Union``, ``Difference``) build these from a config.
"""

import numpy as np

from scepter_like.data.registry import GEOMETRIES
from scepter_like.errors import ConfigError

RELATIVE_TOLERANCE = 1e-9  # of the bounding box's diagonal: how far from a boundary a point still lies on it
PROBE = 1e-6  # of the bounding box's diagonal: the step off a point where boundaries meet, to see where the region is
BATCH = 1 << 20  # the most candidates drawn at once: bounds a draw's memory
BUDGET = 1 << 26  # the most candidates a set may need: a region needing more is too thin to sample
TRIAL = 1 << 16  # candidates drawn before their share inside is trusted to judge the region


def rejection_sample(n, candidates, where='GEOMETRY'):
    """The first ``n`` points ``candidates(m)`` keeps, drawing ``m = n, 2n, 4n, ...`` candidates (each try a fresh
    draw) up to ``BATCH`` at once, then adding draws of ``BATCH``.

    ``candidates(m)`` returns ``(points, keep mask)`` (or a tuple of arrays and the mask); the result is a pure
    function of the generator's state.  A region that keeps none of ``TRIAL`` candidates, or would need more than
    ``BUDGET`` of them, is a ``ConfigError`` naming ``where`` at once, not minutes of drawing and gigabytes.
    """
    m, drawn, inside, parts = max(n, 1), 0, 0, []
    while True:
        *arrays, keep = candidates(min(m, BATCH))
        drawn, inside = drawn + len(keep), inside + int(keep.sum())
        if m <= BATCH:  # below the batch size each try replaces the last
            parts = []
        parts.append([a[keep] for a in arrays])
        if sum(len(p[0]) for p in parts) >= n:
            arrays = [np.concatenate(columns)[:n] for columns in zip(*parts)]
            return arrays[0] if len(arrays) == 1 else tuple(arrays)
        if drawn >= TRIAL and (inside == 0 or n * drawn / inside > BUDGET):
            share = f'{inside or "none"} of {drawn} random points of its bounding box fell inside'
            need = inside and f', so {n} points would need about {n * drawn / inside:.2g} candidates (over {BUDGET})'
            raise ConfigError(
                f'{where}: the region is empty or too thin to sample: {share}{need or ""}; check the parts of a'
                ' Difference or Union and their LOW / HIGH'
            )
        m *= 2


def pick_piece(u0, measures):
    """For unit values ``u0``, the piece each falls in (pieces sized by ``measures``) and ``u0`` rescaled
    to [0, 1) within that piece."""
    edges = np.concatenate([[0.0], np.cumsum(measures)]) / np.sum(measures)
    index = np.clip(np.searchsorted(edges, u0, side='right') - 1, 0, len(measures) - 1)
    width = edges[index + 1] - edges[index]
    return index, np.clip((u0 - edges[index]) / np.where(width > 0, width, 1.0), 0.0, np.nextafter(1.0, 0.0))


class Geometry:
    """A closed region of R^dim with a bounding box ``low``..``high``."""

    dim = 0
    low = high = None
    where = 'GEOMETRY'  # the config path, for errors

    def sdf(self, points):
        raise NotImplementedError

    def pieces(self):
        """``[(primitive, sign)]``: the primitives whose boundaries make up this one's (sign -1: normals turned)."""
        return [(self, 1.0)]

    @property
    def tolerance(self):
        return RELATIVE_TOLERANCE * float(np.linalg.norm(self.high - self.low))

    @property
    def probe(self):
        return PROBE * float(np.linalg.norm(self.high - self.low))

    def _on_pieces(self, points, pieces):
        """``[len(pieces), m]``: whether each point lies on each piece's boundary."""
        return np.stack([np.abs(piece.sdf(points)) <= self.tolerance for piece, _ in pieces])

    def closed(self, points):
        """Mask of ``points`` in the closed region: inside, or on a boundary with the region next to it.  Where
        the boundaries of two or more pieces meet, a point is kept only when a step of ``probe`` in some
        direction (the axes and diagonals) goes inside: an edge a difference removed (an L's) has the
        region on neither side."""
        sdf = self.sdf(points)
        keep = sdf <= self.tolerance
        pieces = self.pieces()
        if len(pieces) < 2:
            return keep
        meet = np.flatnonzero(keep & (sdf >= -self.tolerance) & (self._on_pieces(points, pieces).sum(0) >= 2))
        if meet.size:
            steps = _probe_directions(self.dim) * self.probe
            near = points[meet][:, None, :] + steps[None]  # [k, directions, dim]
            inside = (self.sdf(near.reshape(-1, self.dim)) < 0).reshape(len(meet), len(steps)).any(1)
            keep[meet[~inside]] = False
        return keep

    def interior_from_unit(self, u):
        """Unit points ``[m, dim]`` on the bounding box, and the mask of those strictly inside."""
        points = self.low + u * (self.high - self.low)
        return points, self.sdf(points) < 0

    def boundary_from_unit(self, u):
        """Unit points ``[m, dim]`` on the boundary: ``(points, outward normals, mask of the kept ones)``."""
        pieces = self.pieces()
        index, u0 = pick_piece(u[:, 0], [p.measure for p, _ in pieces])
        points, normals = np.empty_like(u), np.empty_like(u)
        for k, (piece, sign) in enumerate(pieces):
            rows = index == k
            if rows.any():
                part = u[rows].copy()
                part[:, 0] = u0[rows]
                points[rows], normals[rows] = piece.boundary_points(part)
                normals[rows] *= sign
        keep = np.abs(self.sdf(points)) <= self.tolerance
        if len(pieces) > 1:  # where pieces meet, |sdf| <= tolerance cannot tell: step off the point to see
            on = self._on_pieces(points, pieces)
            meet = np.flatnonzero(keep & (on.sum(0) >= 2))
            if meet.size:
                keep[meet] = self._on_own_boundary(points[meet], normals[meet], index[meet], pieces, on[:, meet])
        return points, normals, keep

    def _on_own_boundary(self, points, normals, index, pieces, on):
        """For points where pieces meet (``index``: the piece each was drawn on, ``on``: the pieces each lies
        on): the region lies against the normal and not along it, and no earlier piece has this boundary
        with the same normal (a shared edge counted once)."""
        h = self.probe
        outer, inner = points + h * normals, points - h * normals
        keep = (self.sdf(outer) > 0) & (self.sdf(inner) < 0)
        for j, (piece, sign) in enumerate(pieces):
            earlier = (index > j) & on[j]
            if earlier.any():  # piece j's own outward normal (turned by its sign) is this point's
                same = (sign * piece.sdf(outer) > 0) & (sign * piece.sdf(inner) < 0)
                keep &= ~(earlier & same)
        return keep

    def sample_interior(self, n, draw):
        return rejection_sample(n, lambda m: self.interior_from_unit(draw(m, self.dim)), self.where)

    def sample_boundary(self, n, draw):
        """``n`` boundary points and their outward unit normals, float64 ``[n, dim]`` each."""
        return rejection_sample(n, lambda m: self.boundary_from_unit(draw(m, self.dim)), self.where)


def _probe_directions(dim):
    """Steps to look around a point: every combination of -1, 0, 1 per axis (up to 4-D); beyond, the axes
    and the pairs of axes."""
    import itertools

    if dim <= 4:
        steps = [d for d in itertools.product((-1.0, 0.0, 1.0), repeat=dim) if any(d)]
    else:
        eye = np.eye(dim)
        steps = [s * eye[a] for a in range(dim) for s in (-1, 1)]
        steps += [
            s * eye[a] + r * eye[b] for a in range(dim) for b in range(a + 1, dim) for s in (-1, 1) for r in (-1, 1)
        ]
    return np.asarray(steps, dtype=np.float64)


def _as_vector(value, where, name):
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if array.size == 0 or not np.all(np.isfinite(array)):
        raise ConfigError(f'{where}: {name} needs finite numbers, got {value!r}')
    return array


class Box(Geometry):
    """The box ``[low_0, high_0] x ...``: an interval (1-D), a rectangle (2-D), a box (3-D or more)."""

    def __init__(self, low, high, where='GEOMETRY'):
        low, high = _as_vector(low, where, 'LOW'), _as_vector(high, where, 'HIGH')
        if low.shape != high.shape:
            raise ConfigError(
                f'{where}: LOW and HIGH need the same number (>= 1) of coordinates, got {low.tolist()} and'
                f' {high.tolist()}'
            )
        if np.any(high <= low):
            raise ConfigError(
                f'{where}: each HIGH coordinate must exceed its LOW one (extent HIGH - LOW = {(high - low).tolist()});'
                ' fix LOW / HIGH'
            )
        self.low, self.high, self.dim, self.where = low, high, low.size, where

    def face_measures(self, faces=None):
        """Measure of each of the ``2 * dim`` faces (face ``2a``: axis a's low one, ``2a + 1``: its high one);
        faces not in ``faces`` (when given) count 0."""
        extent = self.high - self.low
        areas = np.repeat([np.prod(np.delete(extent, a)) for a in range(self.dim)], 2)
        if faces is not None:
            areas = areas * np.isin(np.arange(2 * self.dim), faces)
        return areas

    @property
    def measure(self):
        return float(self.face_measures().sum())

    def sdf(self, points):
        center, half = (self.low + self.high) / 2, (self.high - self.low) / 2
        q = np.abs(points - center) - half
        return np.linalg.norm(np.maximum(q, 0.0), axis=1) + np.minimum(q.max(axis=1), 0.0)

    def boundary_points(self, u, faces=None):
        """Unit points ``[m, dim]`` on the faces (``faces`` only, when given): first column picks the face."""
        face, u0 = pick_piece(u[:, 0], self.face_measures(faces))
        axis, upper = face // 2, face % 2 == 1
        rest = np.concatenate([u0[:, None], u[:, 1:]], axis=1)[:, : self.dim - 1]
        points = np.empty_like(u)
        for a in range(self.dim):  # the face's own axis is fixed; the others take the remaining unit columns
            others = [b for b in range(self.dim) if b != a]
            rows = np.flatnonzero(axis == a)
            if others and rows.size:
                points[np.ix_(rows, others)] = self.low[others] + rest[rows] * (self.high - self.low)[others]
        rows = np.arange(len(u))
        points[rows, axis] = np.where(upper, self.high[axis], self.low[axis])
        normals = np.zeros_like(u)
        normals[rows, axis] = np.where(upper, 1.0, -1.0)
        return points, normals

    def opposite(self, points, axis):
        """Points on the faces of ``axis`` moved to the opposite face (their periodic images)."""
        out = points.copy()
        out[:, axis] = self.low[axis] + self.high[axis] - points[:, axis]
        return out


class Ball(Geometry):
    """A disk (2-D) or a ball (3-D) of ``radius`` around ``center``."""

    def __init__(self, center, radius, where='GEOMETRY'):
        self.center = _as_vector(center, where, 'CENTER')
        if self.center.size not in (2, 3):
            raise ConfigError(f'{where}: CENTER needs 2 (disk) or 3 (ball) coordinates, got {self.center.tolist()}')
        if not radius > 0:
            raise ConfigError(f'{where}: RADIUS must be positive, got {radius}')
        self.radius, self.dim, self.where = float(radius), self.center.size, where
        self.low, self.high = self.center - self.radius, self.center + self.radius

    @property
    def measure(self):
        return 2 * np.pi * self.radius if self.dim == 2 else 4 * np.pi * self.radius**2

    def sdf(self, points):
        return np.linalg.norm(points - self.center, axis=1) - self.radius

    def boundary_points(self, u):
        if self.dim == 2:
            angle = 2 * np.pi * u[:, 0]
            normals = np.stack([np.cos(angle), np.sin(angle)], axis=1)
        else:  # z uniform in [-1, 1] and a uniform angle: uniform on the sphere
            z, angle = 1 - 2 * u[:, 0], 2 * np.pi * u[:, 1]
            s = np.sqrt(np.clip(1 - z**2, 0.0, None))
            normals = np.stack([s * np.cos(angle), s * np.sin(angle), z], axis=1)
        return self.center + self.radius * normals, normals


class Polygon(Geometry):
    """A simple polygon (2-D) through ``vertices`` in order (either orientation)."""

    def __init__(self, vertices, where='GEOMETRY'):
        v = np.asarray(vertices, dtype=np.float64)
        if v.ndim != 2 or v.shape[1] != 2 or len(v) < 3 or not np.all(np.isfinite(v)):
            raise ConfigError(f'{where}: VERTICES needs at least 3 points [x, y], got {vertices!r}')
        area = 0.5 * np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
        if abs(area) == 0:
            raise ConfigError(f'{where}: VERTICES enclose no area')
        self.vertices = v if area > 0 else v[::-1]  # counter-clockwise: the outward normal is (dy, -dx)
        self.edges = np.roll(self.vertices, -1, axis=0) - self.vertices
        self.lengths = np.linalg.norm(self.edges, axis=1)
        self.dim, self.low, self.high, self.where = 2, v.min(axis=0), v.max(axis=0), where

    @property
    def measure(self):
        return float(self.lengths.sum())

    def sdf(self, points):
        rel = points[:, None, :] - self.vertices[None]  # [m, k, 2]
        t = np.clip((rel * self.edges).sum(-1) / self.lengths**2, 0.0, 1.0)
        distance = np.linalg.norm(rel - t[..., None] * self.edges, axis=-1).min(axis=1)
        a, b = self.vertices, np.roll(self.vertices, -1, axis=0)
        y = points[:, 1:2]
        crosses = (a[:, 1] > y) != (b[:, 1] > y)
        with np.errstate(divide='ignore', invalid='ignore'):
            x_cross = a[:, 0] + (y - a[:, 1]) * (b[:, 0] - a[:, 0]) / (b[:, 1] - a[:, 1])
        inside = (crosses & (points[:, 0:1] < x_cross)).sum(axis=1) % 2 == 1
        return np.where(inside, -distance, distance)

    def boundary_points(self, u):
        edge, s = pick_piece(u[:, 0], self.lengths)
        points = self.vertices[edge] + s[:, None] * self.edges[edge]
        normals = np.stack([self.edges[edge, 1], -self.edges[edge, 0]], axis=1) / self.lengths[edge, None]
        return points, normals


class _Combination(Geometry):
    def __init__(self, parts, where):
        dims = {p.dim for p in parts}
        if len(parts) < 2 or len(dims) != 1:
            raise ConfigError(f'{where}: OF needs at least two regions of one dimension, got dimensions {dims}')
        self.parts, self.dim, self.where = list(parts), dims.pop(), where


class Union(_Combination):
    """Every point of any of ``parts``."""

    def __init__(self, parts, where='GEOMETRY'):
        super().__init__(parts, where)
        self.low = np.min([p.low for p in parts], axis=0)
        self.high = np.max([p.high for p in parts], axis=0)

    def sdf(self, points):
        return np.min([p.sdf(points) for p in self.parts], axis=0)

    def pieces(self):
        return [piece for part in self.parts for piece in part.pieces()]


class Difference(_Combination):
    """The first of ``parts`` without the others."""

    def __init__(self, parts, where='GEOMETRY'):
        super().__init__(parts, where)
        self.low, self.high = parts[0].low, parts[0].high

    def sdf(self, points):
        return np.max([self.parts[0].sdf(points)] + [-p.sdf(points) for p in self.parts[1:]], axis=0)

    def pieces(self):
        cut = [(piece, -sign) for part in self.parts[1:] for piece, sign in part.pieces()]
        return self.parts[0].pieces() + cut


# -- config entries -------------------------------------------------------------------------------
def _number(where, name, value):
    values = _as_vector(value, where, name)
    if values.size != 1:
        raise ConfigError(f'{where}: {name} of an interval is one number, got {value!r}')
    return values


@GEOMETRIES.register_function(
    'Interval',
    para_dict={
        'LOW': {'value': 0.0, 'description': 'left end'},
        'HIGH': {'value': 1.0, 'description': 'right end (above LOW)'},
    },
)
def interval(cfg, logger=None):
    where = cfg.path or 'GEOMETRY'
    return Box(_number(where, 'LOW', cfg.LOW), _number(where, 'HIGH', cfg.HIGH), where)


_BOX_KEYS = {
    'LOW': {'value': [0.0, 0.0], 'description': 'lower corner'},
    'HIGH': {'value': [1.0, 1.0], 'description': 'upper corner; each coordinate above its LOW one'},
}


def _box_of_dim(cfg, dims, what):
    box = Box(cfg.LOW, cfg.HIGH, cfg.path or 'GEOMETRY')
    if box.dim not in dims:
        raise ConfigError(f'{cfg.path_of("LOW")}: a {what} has {dims[0]} coordinates, got {box.dim}')
    return box


@GEOMETRIES.register_function('Rectangle', para_dict=_BOX_KEYS)
def rectangle(cfg, logger=None):
    return _box_of_dim(cfg, (2,), 'rectangle')


@GEOMETRIES.register_function(
    'Box',
    para_dict={
        'LOW': {'value': [0.0, 0.0, 0.0], 'description': 'lower corner (any dimension)'},
        'HIGH': {'value': [1.0, 1.0, 1.0], 'description': 'upper corner (as many coordinates as LOW)'},
    },
)
def box(cfg, logger=None):
    return Box(cfg.LOW, cfg.HIGH, cfg.path or 'GEOMETRY')


def _ball_keys(center):
    return {
        'CENTER': {'value': center, 'description': 'center'},
        'RADIUS': {'value': 1.0, 'description': 'radius (positive)'},
    }


@GEOMETRIES.register_function('Disk', para_dict=_ball_keys([0.0, 0.0]))
def disk(cfg, logger=None):
    return Ball(cfg.CENTER, cfg.RADIUS, cfg.path or 'GEOMETRY')


@GEOMETRIES.register_function('Ball', para_dict=_ball_keys([0.0, 0.0, 0.0]))
def ball(cfg, logger=None):
    return Ball(cfg.CENTER, cfg.RADIUS, cfg.path or 'GEOMETRY')


@GEOMETRIES.register_function(
    'Polygon',
    para_dict={'VERTICES': {'value': None, 'description': 'corner points [[x, y], ...] in order', 'required': True}},
)
def polygon(cfg, logger=None):
    return Polygon(cfg.VERTICES, cfg.path or 'GEOMETRY')


_OF_KEY = {'OF': {'value': None, 'description': 'the GEOMETRIES configs combined', 'required': True}}


def _parts(cfg):
    if not isinstance(cfg.OF, list):
        raise ConfigError(f'{cfg.path_of("OF")}: expected a list of GEOMETRIES configs')
    return [GEOMETRIES.build(part) for part in cfg.OF]


@GEOMETRIES.register_function('Union', para_dict=_OF_KEY)
def union(cfg, logger=None):
    return Union(_parts(cfg), cfg.path or 'GEOMETRY')


@GEOMETRIES.register_function('Difference', para_dict=_OF_KEY)
def difference(cfg, logger=None):
    return Difference(_parts(cfg), cfg.path or 'GEOMETRY')
