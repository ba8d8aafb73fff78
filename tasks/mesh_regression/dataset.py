"""MeshDataset: the samples of one split of a mesh manifest, as per-vertex features and targets.

The manifest is a CSV with one row per sample (subject, phase, stage, split, file; file
paths relative to the manifest; its stage must be the file's).  Each sample file is an ``.npz`` with ``points`` [V, 3]
(mean-shape coordinates), ``coefficients`` [N] (the subject's PCA coefficients),
``stage``, ``edges`` [2, E] (undirected mesh edges) and ``target`` [V, D].  An item is
``{'features': [V, 3 + N + 1], 'target': [V, D], 'edge_index': [2, 2E]}`` (both edge
directions); the config's COLLATE names the function that batches items.

Where the manifest is missing and GENERATE is set, the synthetic dataset of
``generate.py`` is written there first (the same settings always give the same files).
"""

import csv
import json
import logging
import os

import numpy as np
import torch

from scepter_like.data.collate import BatchDict
from scepter_like.data.datasets import reject_nonfinite
from scepter_like.data.registry import COLLATES, DATASETS
from scepter_like.errors import ConfigError, DataError
from tasks.mesh_regression import generate
from tasks.mesh_regression.stats import compute_stats

SAMPLE_ARRAYS = ('points', 'coefficients', 'stage', 'edges', 'target')


def read_manifest(path):
    """The manifest's rows as dicts; DataError when it is missing or lacks a column."""
    try:
        with open(path, newline='') as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = reader.fieldnames or []
    except FileNotFoundError:
        raise DataError(
            f'manifest not found: {path}; write it with tools/make_mesh_dataset.py or set GENERATE in the data config'
        ) from None
    missing = [c for c in generate.MANIFEST_COLUMNS if c not in columns]
    if missing:
        raise DataError(f'{path}: manifest lacks columns {missing}; it needs {list(generate.MANIFEST_COLUMNS)}')
    return rows


def load_sample(path, row_text=''):
    """One sample file as ``{'features', 'target', 'edges'}`` numpy arrays (checked)."""
    if not os.path.isfile(path):
        raise DataError(f'{row_text}names a missing file: {path}; fix the manifest or regenerate the dataset')
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in SAMPLE_ARRAYS if k in data.files}
    except (OSError, ValueError) as e:
        raise DataError(f'{path}: not a readable .npz sample ({e})') from None
    return sample_from_arrays(arrays, path)


def sample_from_arrays(arrays, source, need_target=True):
    """``{'features', 'edges'}`` (and ``'target'``) numpy arrays from a sample's arrays, checked.

    ``arrays`` holds those of a sample file: ``points``, ``coefficients``, ``stage``,
    ``edges`` and (needed with ``need_target``) ``target``.
    """
    needed = SAMPLE_ARRAYS if need_target or 'target' in arrays else tuple(k for k in SAMPLE_ARRAYS if k != 'target')
    missing = [k for k in needed if k not in arrays]
    if missing:
        raise DataError(f'{source}: the sample lacks arrays {missing}; it needs {list(needed)}')
    points, edges = np.asarray(arrays['points']), np.asarray(arrays['edges'])
    n = len(points)
    if points.ndim != 2 or points.shape[1] != 3:
        raise DataError(f'{source}: points must be [V, 3]; got {points.shape}')
    check_graph_edges(edges, n, f'{source}: edges', both_directions=False)
    if np.asarray(arrays['stage']).size != 1:
        raise DataError(f"{source}: stage must be one number (the sample's phase); got {np.shape(arrays['stage'])}")
    if np.ndim(arrays['coefficients']) > 1:  # flattened, per-vertex values would become every vertex's features
        raise DataError(
            f"{source}: coefficients must be [N], the sample's N numbers (its PCA coefficients, the same on every"
            f' vertex); got {np.shape(arrays["coefficients"])}: per-vertex features are not read'
        )
    coefficients = finite_float32(arrays['coefficients'], f'{source}: coefficients')
    stage = np.full((n, 1), finite_float32(arrays['stage'], f'{source}: stage')[0], dtype=np.float32)
    points = check_float32_points(points, finite_float32(points, f'{source}: points'), edges, f'{source}: points')
    features = np.concatenate([points, np.broadcast_to(coefficients, (n, len(coefficients))), stage], 1)
    sample = {'features': features, 'edges': edges.astype(np.int64)}
    if 'target' in arrays:
        target = np.asarray(arrays['target'])
        if target.ndim != 2 or len(target) != n:
            raise DataError(f'{source}: target must be [V, D] with V = {n} points; got {target.shape}')
        sample['target'] = finite_float32(target, f'{source}: target')
    return sample


def check_manifest_stage(row, sample, where):
    """A DataError unless the manifest row's stage is its file's (which the features hold, and run_inference reads
    without a manifest): two values for one sample mean one is wrong, and training would take the file's silently.
    Agreement is to 1e-6 (relative beyond 1), as a CSV may hold the value rounded to six decimals."""
    held = float(sample['features'][0, -1])
    try:
        stage = float(row['stage'])
    except (TypeError, ValueError):
        stage = None
    if stage is None or not abs(stage - held) <= 1e-6 * max(1.0, abs(held)):
        raise DataError(
            f'{where}has stage {row["stage"]!r}, but its file {row["file"]} holds stage {held:.7g}, the value the'
            ' model reads; make the two agree'
        )


def check_graph_edges(edges, n, where, both_directions):
    """A DataError unless ``edges`` are the edges of a mesh of ``n`` vertices as the model takes them: [2, E] integer
    vertex indices below ``n`` (``check_edge_index``), at least one, none from a vertex to itself, none twice; and
    with ``both_directions`` (a model input, PyG's ``edge_index``) each with its reverse, else (a sample file's
    ``edges``, whose reverse the dataset adds) each once.  Each is an input the model takes without a word but
    predicts something else from: one-way edges halve the messages, a duplicate counts twice."""
    edges = check_edge_index(edges, n, where).astype(np.int64)
    if not edges.size:  # MeshGraphNet would pass no messages on it, and its statistics would hold no edge
        raise DataError(f'{where} is [2, 0]: the mesh has no edges; give its edges')
    loops = np.flatnonzero(edges[0] == edges[1])
    if loops.size:  # a message from a vertex to itself is no neighbourhood information
        raise DataError(
            f'{where}: {loops.size} edge(s) join a vertex to itself, the first at column {loops[0]} (0-based);'
            ' give each edge between two vertices'
        )
    if not both_directions:
        twice = edges.shape[1] - np.unique(np.sort(edges, axis=0), axis=1).shape[1]
        if twice:  # PyG's edge_index lists both directions; the reverse is added here, so each would count twice
            raise DataError(f'{where}: {twice} edge(s) are listed twice (e.g. in both directions); give each edge once')
        return
    keys = edges[0] * n + edges[1]
    _, first = np.unique(keys, return_index=True)
    if len(first) < len(keys):
        column = np.setdiff1d(np.arange(len(keys)), first)[0]
        raise DataError(
            f'{where}: {len(keys) - len(first)} edge(s) are listed more than once in the same direction, the first'
            f' at column {column} (0-based); give each direction of each edge once'
        )
    lacking = np.flatnonzero(~np.isin(edges[1] * n + edges[0], keys))
    if lacking.size:
        a, b = edges[:, lacking[0]]
        raise DataError(
            f'{where}: {lacking.size} edge(s) lack their reverse, the first at column {lacking[0]} (0-based: {a} -> {b}'
            f' without {b} -> {a}); the model takes both directions of every edge (edges listed once e:'
            ' np.concatenate([e, e[::-1]], 1))'
        )


def check_edge_index(edges, n, where):
    """``edges`` as a numpy array; a DataError unless it is [2, E] integer vertex indices below ``n``: an [E, 2]
    array would be read as two edges, silently, and an index past the vertices (or a float one) fails deep inside
    the model."""
    edges = edges.cpu().numpy() if isinstance(edges, torch.Tensor) else np.asarray(edges)
    if edges.ndim != 2 or edges.shape[0] != 2 or (edges.size and (edges.min() < 0 or edges.max() >= n)):
        turned = edges.ndim == 2 and edges.shape[1] == 2 and edges.shape[0] != 2
        raise DataError(
            f'{where} must be [2, E] vertex indices below {n}'
            + (f'; got {list(edges.shape)}: transpose it' if turned else '')
        )
    if edges.size and not np.issubdtype(edges.dtype, np.integer):
        raise DataError(f'{where} must be integer vertex indices; got {edges.dtype}')
    return edges


def check_float32_points(points, cast, edges, where):
    """``cast`` (``points`` in float32, the precision of the features and of the model); a DataError where the cast
    changed an edge's length by more than 1 %: float32 holds about 7 significant digits, so coordinates far from
    the origin (UTM metres, 4.5e6, at 5 cm spacing) merge distinct vertices, and centring by the statistics comes
    after the cast, too late to restore them."""
    if points.dtype == np.float32:
        return cast
    exact, rounded = np.asarray(points, dtype=np.float64), cast.astype(np.float64)
    length = np.linalg.norm(exact[edges[1]] - exact[edges[0]], axis=1)
    changed = np.abs(np.linalg.norm(rounded[edges[1]] - rounded[edges[0]], axis=1) - length) > 0.01 * length
    if changed.any():
        merged = int((changed & (cast[edges[1]] == cast[edges[0]]).all(1)).sum())
        raise DataError(
            f'{where}: in float32, the precision the model computes in, {changed.sum()} of {len(length)} edge(s)'
            f' change length by more than 1 % ({merged} become zero: distinct vertices merge); the coordinates reach'
            f' {np.abs(exact).max():.4g} from the origin, the shortest edge is {length.min():.3g}: subtract one'
            ' origin (the same for every sample, e.g. a corner of the site) from points before saving them'
        )
    return cast


def finite_float32(array, where):
    """``array`` as float32 (at least 1-D); a DataError naming ``where`` and the first bad row where it holds NaN or
    inf, or a value float32 cannot hold: every input array is checked alike, since one NaN coefficient turns every
    vertex's features, the statistics and the loss into NaN far from the file that holds it."""
    with np.errstate(over='ignore'):  # an overflow becomes inf, reported next as such
        array = np.atleast_1d(np.asarray(array, dtype=np.float32))
    reject_nonfinite(array, where)
    return array


def graph_item(sample, with_edges=True):
    """A sample's item: ``features`` and ``target`` tensors, and ``edge_index`` (both directions of every edge)."""
    item = {k: torch.from_numpy(sample[k]) for k in ('features', 'target') if k in sample}
    if with_edges:
        edges = torch.from_numpy(sample['edges'])
        item['edge_index'] = torch.cat([edges, edges.flip(0)], dim=1)
    return item


def shared_samples(train, other):
    """What the MeshDataset ``other`` shares with ``train``: a text naming how many files and subjects (those of one
    manifest folder) and the first of each, '' when none.  A shared sample's mesh is in the training statistics
    and the training loss, so its error is no measure of meshes the model never saw."""
    said = []
    for kind in ('file', 'subject'):
        mine = set(getattr(train, f'{kind}s', ()))
        both = [x for x in dict.fromkeys(getattr(other, f'{kind}s', ())) if x in mine]
        if both:
            first = both[0] if kind == 'file' else both[0][1]
            said.append(f'{len(both)} {kind}(s) (the first: {first})')
    return ' and '.join(said)


def generation_spec(cfg):
    """The GenerationSpec of the data config's GENERATE mapping (its keys: the spec's fields, upper case)."""
    fields = {f.upper(): f for f in generate.GenerationSpec.__dataclass_fields__}
    unknown = [k for k in cfg.GENERATE if k not in fields]
    if unknown:
        raise ConfigError(f'{cfg.path_of("GENERATE")}: unknown keys {unknown}; its keys: {sorted(fields)}')
    try:
        return generate.GenerationSpec(**{fields[k]: v for k, v in cfg.GENERATE.items()})
    except (TypeError, ValueError) as e:
        raise ConfigError(f'{cfg.path_of("GENERATE")}: {e}') from None


def ensure_generated(cfg, logger=None):
    """Write the synthetic dataset at MANIFEST if it is missing and GENERATE is set (said in the log: a mistyped
    MANIFEST of one's own data would otherwise train on synthetic meshes without a word); check its settings."""
    if not cfg.GENERATE:
        return
    spec = generation_spec(cfg)
    folder = os.path.dirname(os.path.abspath(cfg.MANIFEST))
    if os.path.basename(cfg.MANIFEST) != 'manifest.csv':
        raise ConfigError(f'{cfg.path_of("MANIFEST")}: a generated dataset is written as <folder>/manifest.csv')
    if not os.path.isfile(cfg.MANIFEST):
        (logger or logging.getLogger(__name__)).warning(
            f'{cfg.path_of("MANIFEST")}: {cfg.MANIFEST} does not exist: {cfg.path_of("GENERATE")} writes the synthetic'
            ' dataset there and the run trains on it; for meshes of your own, point MANIFEST at their manifest.csv'
            ' and drop GENERATE (GENERATE: {_delete_: true} under a _BASE_ config that sets it)'
        )
        generate.write_dataset(folder, spec)
        return
    spec_path = os.path.join(folder, generate.SPEC_FILE)
    if os.path.isfile(spec_path):
        with open(spec_path) as f:
            written = json.load(f)
        if written != spec.to_dict():
            raise DataError(
                f'{cfg.MANIFEST} was generated with {written}, not with {cfg.path_of("GENERATE")} = {spec.to_dict()};'
                ' delete that folder or point MANIFEST elsewhere'
            )


@DATASETS.register_class()
class MeshDataset(torch.utils.data.Dataset):
    """Every sample of SPLIT, held in memory as tensors."""

    para_dict = {
        'MANIFEST': {'value': './cache/mesh_regression/manifest.csv', 'description': 'manifest CSV of the samples'},
        'SPLIT': {'value': 'train', 'description': "the manifest's split to read (train | val | test | ...)"},
        'GENERATE': {
            'value': {},
            'description': 'generate the synthetic dataset at MANIFEST when it is missing, with these settings '
            '(SEED, SUBJECTS, PHASES, PCA_MODES, LEVELS, VAL_SUBJECTS, TEST_SUBJECTS); {}: never generate',
        },
        'WITH_EDGES': {'value': True, 'description': "items carry 'edge_index' (MeshGraphNet; the MLP needs none)"},
        'COLLATE': {'value': 'GraphCollate', 'description': 'a COLLATES name: how items become one batch'},
    }

    def __init__(self, cfg, logger=None):
        self.collate_fn = COLLATES.get(cfg.COLLATE, cfg.path_of('COLLATE'))
        ensure_generated(cfg, logger)
        numbered = [(n, r) for n, r in enumerate(read_manifest(cfg.MANIFEST), 1) if r['split'] == cfg.SPLIT]
        rows = [r for _, r in numbered]
        if not rows:
            raise DataError(f'{cfg.MANIFEST}: no samples in split {cfg.SPLIT!r}; fix {cfg.path_of("SPLIT")}')
        root = os.path.dirname(os.path.abspath(cfg.MANIFEST))
        self.rows = rows
        self.files = [os.path.realpath(os.path.join(root, row['file'])) for row in rows]
        self.subjects = [(root, row['subject']) for row in rows]  # a subject name is one manifest folder's
        self.samples = []
        for number, row in numbered:  # the row's number in the manifest, not in its split
            where = f'{cfg.MANIFEST} row {number} ({row["subject"]}, phase {row["phase"]}) '
            self.samples.append(load_sample(os.path.join(root, row['file']), where))
            check_manifest_stage(row, self.samples[-1], where)
        first = self.samples[0]
        for row, sample in zip(rows, self.samples):
            for key in ('features', 'target'):
                if sample[key].shape[1] != first[key].shape[1]:
                    raise DataError(
                        f'{row["file"]}: {key} width {sample[key].shape[1]} differs from {rows[0]["file"]}'
                        f' ({first[key].shape[1]}); every sample needs the same PCA modes and target channels'
                    )
        self.items = [graph_item(s, cfg.WITH_EDGES) for s in self.samples]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def __getitems__(self, indices):
        """A whole batch, already collated by COLLATE (the loader's collate passes a BatchDict through)."""
        return BatchDict(self.collate_fn([self.items[i] for i in indices]))

    def normalisation_stats(self):
        """Statistics of this dataset's samples (float64; see ``stats.compute_stats``)."""
        return compute_stats(self.samples)
