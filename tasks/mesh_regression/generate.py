"""The synthetic mesh dataset: code-generated shapes, phases and a per-vertex target field.

A template surface (a subdivided icosphere stretched into an ellipsoid, in mm) plus a
family of shapes ``template + sum_i c_i * mode_i`` whose modes are smooth radial
deformations; each subject draws its coefficients ``c ~ N(0, 1)`` and is seen at several
phases (``stage`` in [0, 1)).  The target at each vertex is a displacement (mm) that
depends on the vertex position on the subject's shape, the coefficients and the stage.

On disk, as real datasets are: one ``.npz`` per (subject, phase) sample and a
``manifest.csv`` with one row per sample (subject, phase, stage, split, file).  Splits
are by subject.  The same ``GenerationSpec`` always writes the same files.
"""

import csv
import dataclasses
import json
import os
import shutil

import numpy as np

MANIFEST_COLUMNS = ('subject', 'phase', 'stage', 'split', 'file')
SPEC_FILE = 'generation.json'
TEMPLATE_RADII_MM = (30.0, 24.0, 36.0)
MODE_AMPLITUDE_MM = 3.0


@dataclasses.dataclass(frozen=True)
class GenerationSpec:
    """What the generator makes; the same spec writes the same files."""

    seed: int = 0
    subjects: int = 48
    phases: int = 3
    pca_modes: int = 4
    levels: tuple = (2, 3)  # icosphere subdivision per subject, cycled (162 / 642 vertices)
    val_subjects: int = 4
    test_subjects: int = 4

    def __post_init__(self):
        object.__setattr__(self, 'levels', tuple(int(v) for v in self.levels))
        problems = []
        if self.subjects < self.val_subjects + self.test_subjects + 1:
            problems.append('subjects must exceed val_subjects + test_subjects')
        if min(self.phases, self.pca_modes, self.subjects) < 1:
            problems.append('subjects, phases and pca_modes must be at least 1')
        if not self.levels or not all(0 <= v <= 5 for v in self.levels):
            problems.append('levels must be icosphere subdivisions in 0..5')
        if problems:
            raise ValueError('; '.join(problems))

    def to_dict(self):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def icosphere(level):
    """(unit vertices [V, 3] float64, triangles [T, 3] int64) of an icosahedron subdivided ``level`` times."""
    t = (1.0 + 5.0**0.5) / 2.0
    verts = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t)]
    verts += [(0, -1, -t), (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4)]
    faces += [(11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8)]
    faces += [(3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    verts = [np.array(v, dtype=np.float64) / np.linalg.norm(v) for v in verts]
    for _ in range(level):
        midpoint = {}  # edge (a, b), a < b -> index of its new middle vertex
        new_faces = []
        for a, b, c in faces:
            ab, bc, ca = (_middle(verts, midpoint, i, j) for i, j in ((a, b), (b, c), (c, a)))
            new_faces += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        faces = new_faces
    return np.stack(verts), np.asarray(faces, dtype=np.int64)


def _middle(verts, midpoint, a, b):
    """Index of the unit vertex halfway between ``a`` and ``b`` (appended to ``verts`` once)."""
    key = (min(a, b), max(a, b))
    if key not in midpoint:
        m = verts[a] + verts[b]
        verts.append(m / np.linalg.norm(m))
        midpoint[key] = len(verts) - 1
    return midpoint[key]


def mesh_edges(triangles):
    """Undirected edges [2, E] (each once, smaller index first, sorted) of a triangle mesh."""
    pairs = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    pairs = np.sort(pairs, axis=1)
    return np.unique(pairs, axis=0).T.copy()


def mode_fields(unit, n_modes):
    """Radial deformation fields [n_modes, V, 3] (mm per unit coefficient) on unit directions."""
    x, y, z = unit.T
    scalars = [z, 3.0 * x * y, 0.5 * (3.0 * z**2 - 1.0), x, y * z * 3.0, x**2 - y**2]
    fields = []
    for i in range(n_modes):
        base = scalars[i % len(scalars)] * (1.0 + 0.25 * (i // len(scalars)))
        fields.append(MODE_AMPLITUDE_MM * base[:, None] * unit)
    return np.stack(fields)


def target_field(shape, coefficients, stage):
    """Displacement (mm) [V, 3] at the vertices ``shape`` [V, 3] of a subject at ``stage``.

    A contraction that follows the cardiac-like phase, strengthened by the first
    coefficient, plus a twist about z that grows with height: smooth in position,
    coefficients and stage.
    """
    radius = np.asarray(TEMPLATE_RADII_MM)
    rel = shape / radius
    pulse = np.sin(2.0 * np.pi * stage)
    contraction = -2.5 * pulse * (1.0 + 0.3 * np.tanh(coefficients[0])) * rel * radius.mean() / 10.0
    twist_angle = 0.08 * (1.0 - np.cos(2.0 * np.pi * stage)) * rel[:, 2:3]
    twist = twist_angle * np.stack([-shape[:, 1], shape[:, 0], np.zeros(len(shape))], axis=1)
    return contraction + twist


def subject_splits(spec):
    """Split name per subject: a seeded choice of val and test subjects, the rest train."""
    order = np.random.default_rng(spec.seed + 1).permutation(spec.subjects)
    splits = ['train'] * spec.subjects
    for s in order[: spec.val_subjects]:
        splits[s] = 'val'
    for s in order[spec.val_subjects : spec.val_subjects + spec.test_subjects]:
        splits[s] = 'test'
    return splits


def write_dataset(folder, spec):
    """Write every sample, ``generation.json`` and finally ``manifest.csv`` into ``folder``.

    The files go into a private temporary folder first and are moved in one by one, the
    manifest last, so a present manifest always names complete files (two processes
    writing the same spec at once write the same bytes).  Returns the manifest path.
    """
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f'.tmp-generate.{os.getpid()}')
    os.makedirs(tmp, exist_ok=True)
    try:
        rows = _write_samples(tmp, spec)
        with open(os.path.join(tmp, SPEC_FILE), 'w') as f:
            json.dump(spec.to_dict(), f, indent=1, sort_keys=True)
        with open(os.path.join(tmp, 'manifest.csv'), 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=MANIFEST_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        names = sorted(os.listdir(tmp))
        names.remove('manifest.csv')
        for name in [*names, 'manifest.csv']:
            os.replace(os.path.join(tmp, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(folder, 'manifest.csv')


def _write_samples(folder, spec):
    rng = np.random.default_rng(spec.seed)
    coefficients = rng.standard_normal((spec.subjects, spec.pca_modes))
    splits = subject_splits(spec)
    meshes = {}
    rows = []
    for subject in range(spec.subjects):
        level = spec.levels[subject % len(spec.levels)]
        if level not in meshes:
            unit, triangles = icosphere(level)
            meshes[level] = (unit, unit * np.asarray(TEMPLATE_RADII_MM), mesh_edges(triangles))
        unit, template, edges = meshes[level]
        c = coefficients[subject]
        shape = template + np.tensordot(c, mode_fields(unit, spec.pca_modes), axes=1)
        for phase in range(spec.phases):
            stage = phase / spec.phases
            name = f'subject{subject:03d}_phase{phase:02d}.npz'
            np.savez(
                os.path.join(folder, name),
                points=template.astype(np.float32),
                coefficients=c.astype(np.float32),
                stage=np.float32(stage),
                edges=edges,
                target=target_field(shape, c, stage).astype(np.float32),
            )
            rows.append(
                {'subject': f'subject{subject:03d}', 'phase': phase, 'stage': f'{stage:.6f}', 'split': splits[subject]}
                | {'file': name}
            )
    return rows
