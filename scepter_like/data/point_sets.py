"""The points of a physics-informed problem: named point sets, all of them in every train step.

``PointSets`` (TRAIN_DATA) holds a domain -- ``GEOMETRY`` (a GEOMETRIES config) times
``TIME`` [t0, t1] for a time-dependent problem -- and ``SETS``, each with its own kind,
count, sampling, batch size, resampling and conditions::

    SETS:
      pde:      {KIND: interior, COUNT: 2540}                       # the PDE residual: loss_pde
      boundary: {KIND: boundary, COUNT: 80, CONDITIONS: [{NAME: Dirichlet, VALUE: 0}]}
      initial:  {KIND: initial, COUNT: 160, CONDITIONS: [{NAME: InitialValue, VALUE: '-sin(pi * x)'}]}
      data:     {KIND: observations, FILE: obs.csv}                  # u = the observed values

Each step's batch holds every set: ``'<set>.x'`` (its points), ``'<set>.normal'`` (boundary
sets), the arrays its conditions need (``conditions.py``) and ``'problem'`` (a ``Problem``:
the coordinate names and, per set, its kind and conditions), so the model computes each
loss term from the batch alone.  An item of this dataset is a whole step's batch: the loader
takes one at a time, in order (``ITEM_IS_BATCH``).

Batches.  A set's ``BATCH_SIZE`` (0, the default: the whole set) is its points per step
over all ranks; a pass has as many steps as the set with the most batches needs, and a set
with fewer batches starts over within the pass.  Under DDP each rank takes its own share
of every set.  A mini-batched set is shuffled each pass.

Determinism.  Set i's draw in resample round r is a pure function of (SEED, i, r) through
its own generator, never of random state used elsewhere; its shuffle, of (SEED, i, pass).
``RESAMPLE_EVERY: k`` draws anew every k passes (a pass is one step in full-batch
training).  Points added by residual-based refinement (``add_points``, the RARHook) stay
through resampling and are restored from the hook's checkpoint state, so a resumed run
sees exactly the points the interrupted one saw.
"""

import csv
import logging
import math
import os
from typing import NamedTuple

import numpy as np
import torch

from scepter_like.config import Config
from scepter_like.data.conditions import batch_key
from scepter_like.data.datasets import ArrayDataset, reject_nonfinite
from scepter_like.data.domain import TIME_NAME, Domain, time_interval
from scepter_like.data.geometry import Box
from scepter_like.data.registry import CONDITIONS, DATASETS, GEOMETRIES
from scepter_like.data.sampling import METHODS, unit_points
from scepter_like.data.tables import number_or_none
from scepter_like.errors import ConfigError, DataError, suggest
from scepter_like.registry import resolve_params
from scepter_like.utils.distributed import get_world_size

COORD_KEY = 'x'
PROBLEM_KEY = 'problem'
KINDS = ('interior', 'boundary', 'initial', 'observations')
_DRAWN = ('interior', 'boundary', 'initial')

SET_PARA_DICT = {
    'KIND': {'value': None, 'description': f'one of {KINDS}', 'required': True, 'choices': list(KINDS)},
    'COUNT': {'value': 0, 'description': 'points drawn (interior, boundary, initial sets)', 'min': 0},
    'SAMPLING': {'value': 'hammersley', 'description': f'how points are drawn: {METHODS}', 'choices': list(METHODS)},
    'BATCH_SIZE': {
        'value': 0,
        'description': 'points of this set per step over all ranks (0: all: full batch)',
        'min': 0,
    },
    'RESAMPLE_EVERY': {'value': 0, 'description': 'draw anew every this many passes (0: one draw)', 'min': 0},
    'FACES': {
        'value': [],
        'description': "boundary sets of a box: only these faces: an axis (both faces, e.g. 'x') or one side ('x_low')",
    },
    'CONDITIONS': {'value': [], 'description': 'CONDITIONS configs on the points (boundary and initial sets)'},
    'FILE': {'value': '', 'description': 'observations: .csv rows (coordinates, then values) or .npz (x, u)'},
    'POINTS': {'value': None, 'description': 'observations given inline: [[coordinates], ...]'},
    'VALUES': {'value': None, 'description': 'observations given inline: the values at POINTS'},
    'COMPONENTS': {'value': [0], 'description': 'observations: the network outputs the value columns observe'},
}
SIDES = ('low', 'high')  # FACES: x_low is the face at LOW's x, x_high the one at HIGH's

_KEYS_OF = {  # the set keys each kind reads (KIND and BATCH_SIZE: every kind)
    'interior': ('COUNT', 'SAMPLING', 'RESAMPLE_EVERY'),
    'boundary': ('COUNT', 'SAMPLING', 'RESAMPLE_EVERY', 'FACES', 'CONDITIONS'),
    'initial': ('COUNT', 'SAMPLING', 'RESAMPLE_EVERY', 'CONDITIONS'),
    'observations': ('FILE', 'POINTS', 'VALUES', 'COMPONENTS'),
}


class SetSpec(NamedTuple):
    """What the model needs to know of a point set: its name, kind, whether its points need gradients, and its
    conditions."""

    name: str
    kind: str
    needs_grad: bool
    conditions: tuple


class Problem(NamedTuple):
    """The batch's ``'problem'``: the coordinate names and the point sets."""

    coordinates: tuple
    sets: tuple


def _as_tensor(array):
    return torch.from_numpy(np.ascontiguousarray(array)).to(torch.get_default_dtype())


class PointSet:
    """One named set: its points (drawn, read, or added by refinement) and the batches they are cut into."""

    def __init__(self, name, cfg, index, domain, seed, world_size):
        if not name.isidentifier():
            raise ConfigError(f'{cfg.path}: a point set name is a plain word (letters, digits, _), got {name!r}')
        # a key at its default is as good as left out: a run's config.yaml, every default filled in, runs again
        given = {key for key, value in cfg.items() if value != SET_PARA_DICT.get(key, {}).get('value', ...)}
        resolve_params(cfg, SET_PARA_DICT, f'the point set {name!r}')
        self.name, self.kind, self.cfg = name, cfg.KIND, cfg
        unused = sorted(given - {'KIND', 'BATCH_SIZE', *_KEYS_OF[self.kind]})
        if unused:
            raise ConfigError(
                f'{cfg.path_of(unused[0])}: a set of KIND {self.kind} takes no {unused[0]}; its keys:'
                f' KIND, BATCH_SIZE, {", ".join(_KEYS_OF[self.kind])}'
            )
        self.domain, self.seed, self.index, self.world_size = domain, seed, index, world_size
        self.x_key = batch_key(name, COORD_KEY)  # its arrays are keyed as in the batch: '<set>.x', ...
        self.conditions = self._build_conditions()
        self.faces = self._faces()
        if self.kind == 'initial' and domain.time is None:
            first = domain.names[0]
            raise ConfigError(
                f'{cfg.path_of("KIND")}: an initial set lies at the first time, and the problem has none; give the'
                f' data a TIME: [t0, t1], or, for an ODE whose time is the coordinate {first}, make it a boundary set'
                f' at the start, FACES: [{first}_low], with Dirichlet (u = g there) and InitialDerivative'
                f' (du/d{first} = g; Neumann would be the outward -du/d{first})'
            )
        if self.kind == 'observations':
            self.fixed = self._observations()
            self.count = len(self.fixed[self.x_key])
        else:
            self.fixed = None
            self.count = cfg.COUNT
            if self.count == 0:
                raise ConfigError(f'{cfg.path_of("COUNT")}: a point set needs at least 1 point; set COUNT')
        self.batch_size = min(cfg.BATCH_SIZE or self.count, self.count)
        self.batches = math.ceil(self.count / self.batch_size)  # per pass
        self.added = []  # (first pass, points [k, dim]): points refinement added, in the set from that pass on
        self.state = (None, 0)  # (resample round, additions) the arrays hold
        self.drawn = None  # the arrays of the round's draw
        self.arrays = None  # the set's per-point tensors now
        self.order = None  # this pass's shuffle of a mini-batched set

    # -- set-up ------------------------------------------------------------------------------
    def _build_conditions(self):
        entries = self.cfg.CONDITIONS
        if not isinstance(entries, list):
            raise ConfigError(f'{self.cfg.path_of("CONDITIONS")}: expected a list of CONDITIONS configs')
        if self.kind in ('boundary', 'initial') and not entries:
            raise ConfigError(
                f'{self.cfg.path_of("CONDITIONS")}: a {self.kind} set without conditions adds no loss; give it'
                ' CONDITIONS, e.g. [{NAME: Dirichlet, VALUE: 0}]'
            )
        if self.kind == 'observations':
            # the set's own keys configure it: an error about COMPONENTS names the set's
            entries = [Config({'NAME': 'Observation', 'COMPONENTS': list(self.cfg.COMPONENTS)}, path=self.cfg.path)]
        terms = [self.name] if len(entries) == 1 else [f'{self.name}_{i}' for i in range(len(entries))]
        return tuple(
            CONDITIONS.build(entry, point_set=self.name, kind=self.kind, term=term, domain=self.domain)
            for entry, term in zip(entries, terms)
        )

    def _faces(self):
        """The box faces the set is drawn on (``Box.face_measures`` indices), or None: all of the boundary.
        ``x`` names both faces of an axis, ``x_low`` / ``x_high`` one of them."""
        faces = list(self.cfg.FACES or [])
        space = list(self.domain.names[: self.domain.space_dim])
        if faces and not isinstance(self.domain.geometry, Box):
            raise ConfigError(f'{self.cfg.path_of("FACES")}: only a box-shaped GEOMETRY has faces to choose')
        index = {name: [2 * a, 2 * a + 1] for a, name in enumerate(space)}
        index.update({f'{name}_{side}': [2 * a + k] for a, name in enumerate(space) for k, side in enumerate(SIDES)})
        bad = [f for f in faces if f not in index]
        if bad:
            raise ConfigError(
                f'{self.cfg.path_of("FACES")}: {bad} name no faces; choose from {list(index)}'
                f'{suggest(bad[0], list(index))}'
            )
        for condition in self.conditions:
            condition.check_faces(faces, self.cfg.path)
        return sorted({face for name in faces for face in index[name]}) or None

    def _observations(self):
        cfg, dim = self.cfg, self.domain.dim
        columns = len(cfg.COMPONENTS)
        if cfg.FILE:
            points, values = read_observations(cfg.FILE, dim, columns, cfg.path_of('FILE'), self.domain.names)
        elif cfg.POINTS is not None and cfg.VALUES is not None:
            points, values = _inline_array(cfg, 'POINTS'), _inline_array(cfg, 'VALUES')
            if points.ndim != 2 or points.shape[1] != dim:
                raise ConfigError(
                    f'{cfg.path_of("POINTS")}: POINTS are rows of {dim} coordinates ({", ".join(self.domain.names)})'
                    f' and VALUES {columns} number(s) per point (COMPONENTS); got {list(points.shape)} and'
                    f' {list(values.shape)}'
                )
            values = self._inline_values(values, len(points), columns)
        else:
            raise ConfigError(f'{cfg.path}: an observations set needs FILE, or POINTS and VALUES')
        where = cfg.path_of('FILE' if cfg.FILE else 'POINTS')
        if len(points) == 0:
            raise ConfigError(f'{where}: a point set needs at least 1 point')
        reject_nonfinite(np.concatenate([points, values], axis=1), where)
        outside = self.domain.outside(points)
        if len(outside):  # noisy data may stray a little; far out, the columns are likely not the coordinates
            logging.getLogger(__name__).warning(
                f'{where}: {len(outside)} of {len(points)} observation(s) lie outside the domain'
                f' ({", ".join(self.domain.names)}), the first at row {outside[0]}: {points[outside[0]].tolist()};'
                ' check the columns are the coordinates in that order'
            )
        return {self.x_key: _as_tensor(points), batch_key(self.name, 'values'): _as_tensor(values)}

    def _inline_values(self, values, n, columns):
        """VALUES as ``[n, columns]``: exactly one row per point (a list per component, ``[[u0 ...], [u1 ...]]``,
        would fill the rows across points, so any other shape is refused)."""
        cfg = self.cfg
        if values.shape == (n, columns) or (columns == 1 and values.shape == (n,)):
            return values.reshape(n, columns)
        want = f'[{n}, {columns}]' + (f' (or [{n}])' if columns == 1 else '')
        hint = ''
        if columns > 1 and values.shape == (columns, n):
            hint = '; it looks like one list per component: write them as one row per point instead (transpose it)'
        raise ConfigError(
            f'{cfg.path_of("VALUES")}: VALUES has shape {list(values.shape)}; it needs one row per point, the values'
            f' of COMPONENTS {list(cfg.COMPONENTS)} at that point: shape {want} for {n} POINTS{hint}'
        )

    @property
    def needs_grad(self):
        return self.kind == 'interior' or any(c.needs_grad for c in self.conditions)

    @property
    def spec(self):
        return SetSpec(self.name, self.kind, self.needs_grad, self.conditions)

    # -- points ------------------------------------------------------------------------------
    def draw(self, round_):
        """The set's arrays of resample round ``round_`` (before refinement): a pure function of (SEED, set, round)."""
        if self.fixed is not None:
            return dict(self.fixed)
        rng = np.random.default_rng([self.seed, self.index, round_])
        method = self.cfg.SAMPLING

        def draw(m, columns):
            return unit_points(method, m, columns, rng, shift=round_ > 0)

        normals = None
        if self.kind == 'interior':
            points = self.domain.interior(self.count, draw)
        elif self.kind == 'boundary':
            points, normals = self.domain.boundary(self.count, draw, self.faces)
        else:
            points = self.domain.initial(self.count, draw)
        arrays = {self.x_key: points}
        if normals is not None:
            arrays[batch_key(self.name, 'normal')] = normals
        for condition in self.conditions:
            arrays.update(condition.arrays(points, normals))
        return {k: _as_tensor(v) for k, v in arrays.items()}

    def set_pass(self, pass_index):
        """Use the points and order of pass ``pass_index``; returns whether they changed."""
        every = self.cfg.RESAMPLE_EVERY if self.fixed is None else 0
        round_ = pass_index // every if every else 0
        added = [points for first, points in self.added if first <= pass_index]
        changed = (round_, len(added)) != self.state
        if changed:
            if round_ != self.state[0]:
                self.drawn = self.draw(round_)
            self.state = (round_, len(added))
            self.arrays = dict(self.drawn)
            if added:
                x = self.arrays[self.x_key]
                self.arrays[self.x_key] = torch.cat([x, *(p.to(x.dtype) for p in added)])
        if self.batches > 1:  # a mini-batched set: a new shuffle each pass
            rng = np.random.default_rng([self.seed, self.index, pass_index, 1])
            self.order = torch.from_numpy(rng.permutation(len(self.arrays[self.x_key])))
            changed = True
        return changed

    def candidates(self, count, method, round_):
        """``count`` interior points of refinement round ``round_``: a pure function of (SEED, set, round)."""
        rng = np.random.default_rng([self.seed, self.index, round_, 2])
        return _as_tensor(self.domain.interior(count, lambda m, columns: unit_points(method, m, columns, rng)))

    def chunk(self, item):
        """The arrays of this set in step-item ``item``: its share for one rank and step."""
        chunks = self.batches * self.world_size
        if chunks == 1:
            return self.arrays
        n, c = len(self.arrays[self.x_key]), item % chunks
        begin, end = c * n // chunks, (c + 1) * n // chunks  # chunk sizes differ by one at most
        if self.order is None:  # a full-batch set's share of one rank: a slice, no copy
            return {k: v[begin:end] for k, v in self.arrays.items()}
        rows = self.order[begin:end]
        return {k: v.index_select(0, rows) for k, v in self.arrays.items()}


def _inline_array(cfg, key):
    """``cfg[key]`` (POINTS, VALUES) as a float64 array; a ragged list or a word is one line naming the key."""
    try:
        return np.asarray(cfg[key], dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(
            f'{cfg.path_of(key)}: {key} needs numbers, one row per point (rows of one length); got {cfg[key]!r}'[:400]
        ) from None


def _npz_rows(array, key, width, what, where, path):
    """Array ``key`` of an observations .npz as ``[n, width]``: one row per point (``[n]`` when ``width`` is 1)."""
    if array.ndim == 2 and array.shape[1] == width:
        return array
    if array.ndim == 1 and width == 1:
        return array[:, None]
    hint = ''
    if array.ndim == 2 and array.shape[0] == width:
        hint = f'; it looks transposed: save {key}.T'
    want = f'[n, {width}]' + (' (or [n])' if width == 1 else '')
    raise DataError(
        f'{where}: {path}: {key} has shape {list(array.shape)}; it needs one row per point, {what}: shape {want}{hint}'
    )


COMMA_FORMAT = 'comma-separated (its first line holds a comma)'
SPACE_FORMAT = 'whitespace-separated, as numpy.loadtxt and DeepXDE data files (no comma in its first line)'


def _read_text_table(path, dim, where, names):
    """The numbers of a text file of observations ``[n, columns]``: one row per point, comma-separated when the
    first line that is not a ``#`` comment holds a comma, else whitespace-separated (spaces or tabs); an optional
    first line of names (a header) is checked and skipped."""
    with open(path, newline='', encoding='utf-8') as f:
        lines = [(n, line) for n, line in enumerate(f, 1) if line.strip() and not line.lstrip().startswith('#')]
    comma = bool(lines) and ',' in lines[0][1]
    split = csv.reader([line for _, line in lines]) if comma else (line.split() for _, line in lines)
    rows = [(n, [cell.strip() for cell in cells]) for (n, _), cells in zip(lines, split)]
    layout = (
        f'the file is read as {COMMA_FORMAT if comma else SPACE_FORMAT}: an optional header line of names, then one'
        ' row of numbers per point'
    )
    if rows and number_or_none(rows[0][1][0]) is None:
        (first, header), rows = rows[0], rows[1:]  # a header line
        layout += f' (line {first} was read as that header: {dict(lines)[first].strip()[:120]!r})'
        _check_header(header, names, where, path)
    table = []
    for n, cells in rows:
        numbers = [number_or_none(cell) for cell in cells]
        if None in numbers:
            text = dict(lines)[n].strip()
            raise DataError(f'{where}: {path} line {n} is not all numbers: {text[:120]!r}; {layout}')
        if table and len(numbers) != len(table[0]):
            raise DataError(
                f'{where}: {path} line {n} holds {len(numbers)} numbers and the first row {len(table[0])}; rows'
                f' need one length: {layout}'
            )
        table.append(numbers)
    if not table:
        raise DataError(f'{where}: {path} holds no rows of numbers; {layout}')
    return np.asarray(table, dtype=np.float64)


HEADER_ALIASES = {'time': TIME_NAME}  # header words read as the coordinate they name


def _check_header(header, names, where, path):
    """A header naming a coordinate in another column than the domain's place for it is a DataError (the rows
    would be read with the columns swapped); one whose coordinate columns name nothing the domain knows gets a
    warning giving the order the columns are read in."""
    names = list(names)
    said = [HEADER_ALIASES.get(word.lower(), word) for word in header]
    if any(word in names and names.index(word) != column for column, word in enumerate(said)):
        raise DataError(
            f'{where}: {path} has the columns {header}; a row must hold the coordinates in the'
            f" domain's order {names} first, then the value(s)"
        )
    if [word.lower() for word in said[: len(names)]] != names:
        logging.getLogger(__name__).warning(
            f'{where}: {path} has the columns {header}, which do not name the coordinates {names}; its columns are'
            f" read in the domain's order {names} first, then the value(s): check the file holds them so"
        )


def read_observations(path, dim, columns, where, names):
    """``(points [n, dim], values [n, columns])`` from a text file (``_read_text_table``: comma- or
    whitespace-separated, a header line allowed) or an .npz (``x``, ``u``)."""
    if not os.path.isfile(path):
        raise ConfigError(f'{where}: file not found: {path}')
    if path.endswith('.npz'):
        with np.load(path, allow_pickle=False) as data:
            if 'x' not in data.files or 'u' not in data.files:
                raise DataError(f'{where}: {path} needs arrays x (points) and u (values); it has {data.files}')
            try:
                points, values = np.asarray(data['x'], np.float64), np.asarray(data['u'], np.float64)
            except (TypeError, ValueError) as e:
                raise DataError(f'{where}: {path}: arrays x and u need numbers ({e})') from None
        points = _npz_rows(points, 'x', dim, f'the {dim} coordinates ({", ".join(names)})', where, path)
        values = _npz_rows(values, 'u', columns, f'the {columns} value(s) of COMPONENTS', where, path)
        if len(points) != len(values):
            raise DataError(
                f'{where}: {path}: x has {len(points)} rows {list(points.shape)} and u {len(values)} rows'
                f' {list(values.shape)}; it needs one row of u per point, a row of x'
            )
        table = np.concatenate([points, values], axis=1)
    else:
        table = _read_text_table(path, dim, where, names)
    want = dim + columns
    if table.shape[1] != want:
        raise ConfigError(
            f'{where}: {path} has {table.shape[1]} columns; a row is the coordinates ({", ".join(names)}) then'
            f' {columns} value(s) (COMPONENTS): {want} columns'
        )
    return table[:, :dim], table[:, dim:]


@DATASETS.register_class()
class PointSets(torch.utils.data.Dataset):
    """The named point sets of a problem; item k is step k's batch of every set (see the module doc)."""

    ITEM_IS_BATCH = True  # the loader takes one item per step, in order (data/loader.py)
    para_dict = {
        'GEOMETRY': {'value': None, 'description': 'a GEOMETRIES config: the space domain', 'required': True},
        'TIME': {'value': None, 'description': '[t0, t1] for a time-dependent problem (none: steady)'},
        'SETS': {'value': None, 'description': 'name -> point set (KIND, COUNT, CONDITIONS, ...)', 'required': True},
        'SEED': {'value': 0, 'description': 'seed of the draws (independent of ENV.SEED, which seeds the network)'},
    }

    def __init__(self, cfg, logger=None):
        self.domain = Domain(GEOMETRIES.build(cfg.GEOMETRY), time_interval(cfg.TIME, cfg.path_of('TIME')))
        if not hasattr(cfg.SETS, 'items') or not cfg.SETS:
            raise ConfigError(f'{cfg.path_of("SETS")}: expected a mapping of set name -> point set config')
        for name, set_cfg in cfg.SETS.items():
            if not isinstance(set_cfg, Config):
                raise ConfigError(
                    f'{cfg.SETS.path_of(name)}: a point set is a mapping such as {{KIND: interior, COUNT: 1000}}, got'
                    f' {"null" if set_cfg is None else repr(set_cfg)}; to leave out a set, give SETS whole with only'
                    f' the sets to keep: on the command line {cfg.path_of("SETS")}={{...}} (it replaces SETS), in a'
                    ' file whose _BASE_ has SETS, with _delete_: true beside them'
                )
        world = get_world_size()
        self.sets = [
            PointSet(name, set_cfg, i, self.domain, cfg.SEED, world)
            for i, (name, set_cfg) in enumerate(cfg.SETS.items())
        ]
        terms = [s.name for s in self.sets if s.kind == 'interior'] + [c.term for s in self.sets for c in s.conditions]
        doubled = sorted({t for t in terms if terms.count(t) > 1})
        if doubled:
            raise ConfigError(f'{cfg.path_of("SETS")}: two loss terms are called {doubled}; rename a set or a TERM')
        self.steps = max(s.batches for s in self.sets)  # per pass, on each rank
        self.world_size = world
        self.problem = Problem(self.domain.names, tuple(s.spec for s in self.sets))
        self._batches = {}
        self.set_epoch(0)

    @property
    def coordinate_names(self):
        return self.domain.names

    def __len__(self):
        return self.steps * self.world_size

    def set_epoch(self, pass_index):
        """Use the points and orders of pass ``pass_index`` (the loop calls it before each pass)."""
        self.pass_index = pass_index
        if any([s.set_pass(pass_index) for s in self.sets]):
            self._batches = {}

    @property
    def resample_every(self):
        """The fewest passes a set keeps one draw for (0: every set keeps its draw all run), for the optimizer's
        check: L-BFGS's curvature pairs would mix the losses of different draws."""
        return min((s.cfg.RESAMPLE_EVERY for s in self.sets if s.fixed is None and s.cfg.RESAMPLE_EVERY), default=0)

    def set_named(self, name, where='SET'):
        for s in self.sets:
            if s.name == name:
                return s
        raise ConfigError(f'{where}: no point set is called {name!r}; the sets are {[s.name for s in self.sets]}')

    def add_points(self, name, points, first_pass):
        """Add ``points`` ``[k, dim]`` to the interior set ``name`` from pass ``first_pass`` on (refinement).

        Points that belong to a pass already under way wait for the next one, so where they
        enter depends only on the pass, and a run resumed mid-pass sees the same batches.
        """
        self.set_named(name).added.append((first_pass, points))

    def take(self, idx):
        """The batch of step-item ``idx[0]`` (one item: the loader's batch size is 1)."""
        item = int(idx[0])
        batch = self._batches.get(item)
        if batch is None:
            batch = {PROBLEM_KEY: self.problem}
            for s in self.sets:
                batch.update(s.chunk(item))
            self._batches[item] = batch
        return batch  # the same dict each step while the points stay: batches are read, never changed

    __getitems__ = ArrayDataset.__getitems__

    def __getitem__(self, index):
        return self.take([index])


@DATASETS.register_class()
class GridPoints(ArrayDataset):
    """The points of a regular grid over a domain (its bounding box and time, faces included; points outside a
    non-box region left out): items ``{'x': coordinates}``, the evaluation set."""

    para_dict = {
        'GEOMETRY': {'value': None, 'description': 'a GEOMETRIES config: the space domain', 'required': True},
        'TIME': {'value': None, 'description': '[t0, t1] for a time-dependent problem (none: steady)'},
        'RESOLUTION': {'value': [101, 101], 'description': 'points along each coordinate (time last), at least 2'},
    }

    def __init__(self, cfg, logger=None):
        self.domain = Domain(GEOMETRIES.build(cfg.GEOMETRY), time_interval(cfg.TIME, cfg.path_of('TIME')))
        super().__init__({COORD_KEY: _as_tensor(self.domain.grid(list(cfg.RESOLUTION), cfg.path_of('RESOLUTION')))})

    @property
    def coordinate_names(self):
        return self.domain.names
