"""A PINN problem as config: sampling, geometry, space x time domains, point sets, conditions, cached derivatives.

In-process and fast: every check builds the data and models directly.
"""

import logging
import math

import numpy as np
import pytest
import torch

from scepter_like.config import Config
from scepter_like.data import DATASETS
from scepter_like.data.domain import Domain
from scepter_like.data.geometry import Ball, Box, Difference, Polygon, Union
from scepter_like.data.point_sets import PointSets
from scepter_like.data.sampling import METHODS, hammersley, unit_points
from scepter_like.errors import ConfigError, DataError, ModelError, UserError
from scepter_like.model.base import prepare_model
from scepter_like.model.derivatives import Derivatives
from scepter_like.model.pinn import PhysicsInformedModel
from scepter_like.model.registry import MODELS


def draw_with(method, seed=0):
    rng = np.random.default_rng(seed)
    return lambda m, columns: unit_points(method, m, columns, rng)


# -- sampling ----------------------------------------------------------------------------------
def test_unit_points_are_reproducible_in_the_cube_and_hammersley_is_the_published_set():
    for method in METHODS:
        a, b = (
            unit_points(method, 64, 3, np.random.default_rng(7)),
            unit_points(method, 64, 3, np.random.default_rng(7)),
        )
        assert a.shape == (64, 3) and np.array_equal(a, b) and (a >= 0).all() and (a < 1).all(), method
    assert not np.array_equal(
        unit_points('sobol', 64, 3, np.random.default_rng(1)), unit_points('sobol', 64, 3, np.random.default_rng(2))
    )
    h = hammersley(8, 3)
    np.testing.assert_allclose(h[:, 0], (np.arange(1, 9) - 0.5) / 8)
    np.testing.assert_allclose(h[:4, 1], [1 / 2, 1 / 4, 3 / 4, 1 / 8])  # radical inverse base 2 of 1..4
    np.testing.assert_allclose(h[:4, 2], [1 / 3, 2 / 3, 1 / 9, 4 / 9])  # base 3
    # Latin hypercube: one point in each of n strata per axis
    lhs = unit_points('latin_hypercube', 50, 2, np.random.default_rng(0))
    assert all(sorted((lhs[:, k] * 50).astype(int)) == list(range(50)) for k in range(2))


# -- geometry ----------------------------------------------------------------------------------
SHAPES = {
    'interval': Box([-1.0], [2.0]),
    'rectangle': Box([0.0, 0.0], [2.0, 1.0]),
    'box': Box([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]),
    'disk': Ball([0.5, 0.5], 0.5),
    'ball': Ball([0.0, 0.0, 0.0], 1.0),
    'polygon': Polygon([[0, 0], [1, 0], [1, 1], [0.5, 1.5], [0, 1]]),
    'union': Union([Box([0.0, 0.0], [1.0, 1.0]), Ball([1.0, 0.5], 0.4)]),
    'difference': Difference([Box([0.0, 0.0], [1.0, 1.0]), Ball([0.5, 0.5], 0.25)]),
}


@pytest.mark.parametrize('name', sorted(SHAPES))
def test_interior_points_inside_boundary_points_on_it_with_outward_unit_normals(name):
    g = SHAPES[name]
    inner = g.sample_interior(400, draw_with('hammersley'))
    assert inner.shape == (400, g.dim) and (g.sdf(inner) < 0).all()
    points, normals = g.sample_boundary(400, draw_with('uniform'))
    assert np.abs(g.sdf(points)).max() < 1e-7
    np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1.0)
    if g.dim > 1:  # a step along the normal leaves the region, a step against it enters (off corners)
        assert (g.sdf(points + 1e-3 * normals) > 0).mean() > 0.97
        assert (g.sdf(points - 1e-3 * normals) < 0).mean() > 0.97


def test_boundary_measure_and_set_operations():
    rect = SHAPES['rectangle']  # faces y = 0, 1 have length 2, x = 0, 2 have length 1: 2/3 of the points
    points, normals = rect.sample_boundary(3000, draw_with('uniform', 3))
    on_y = np.isin(points[:, 1], [0.0, 1.0])
    assert abs(on_y.mean() - 2 / 3) < 0.03
    np.testing.assert_array_equal(
        normals[on_y & (points[:, 1] == 0.0)], [[0.0, -1.0]] * (on_y & (points[:, 1] == 0)).sum()
    )
    hole = SHAPES['difference']  # the hole's circle is part of the boundary, its normal pointing to its centre
    points, normals = hole.sample_boundary(2000, draw_with('uniform'))
    on_circle = np.abs(np.linalg.norm(points - 0.5, axis=1) - 0.25) < 1e-9
    assert 0.25 < on_circle.mean() < 0.55  # perimeter 1.57 of 5.57
    np.testing.assert_allclose(normals[on_circle], -(points[on_circle] - 0.5) / 0.25, atol=1e-9)
    inner = hole.sample_interior(500, draw_with('sobol'))
    assert (np.linalg.norm(inner - 0.5, axis=1) > 0.25).all()
    joined = SHAPES['union']  # no boundary point inside the other part
    points, _ = joined.sample_boundary(1000, draw_with('uniform'))
    assert not ((np.linalg.norm(points - [1.0, 0.5], axis=1) < 0.4 - 1e-9) & (points[:, 0] < 1 - 1e-9)).any()


@pytest.mark.parametrize('method', ['hammersley', 'uniform'])
def test_csg_boundaries_where_the_parts_share_edges(method):
    """DeepXDE's CSG rules: a difference's boundary is the first part's outside the closed subtracted one and the
    subtracted one's strictly inside the first; a union's is each part's outside the other (closed) one, an edge
    both share counted once. An L (a square minus its upper right quarter) has no point on the removed edges."""
    ell = Difference([Box([-1.0, -1.0], [1.0, 1.0]), Box([0.0, 0.0], [1.0, 1.0])])  # perimeter 8
    union = Union([Box([-1.0, -1.0], [1.0, 0.0]), Box([-1.0, -1.0], [0.0, 1.0])])  # the same L
    for g in (ell, union):
        points, normals = g.sample_boundary(1600, draw_with(method))
        assert not ((points[:, 0] > 1e-9) & (points[:, 1] > 1e-9)).any()  # nothing on x = 1 or y = 1 above 0
        x, y = points[:, 0], points[:, 1]
        edges = {  # each edge's share is its length / 8: uniform density, shared edges once
            'y=0': (y == 0) & (x > 0),
            'x=0': (x == 0) & (y > 0),
            'x=1': x == 1,
            'y=1': y == 1,
            'x=-1': x == -1,
            'y=-1': y == -1,
        }
        for edge, length in zip(edges.values(), [1, 1, 1, 1, 2, 2]):
            assert abs(edge.mean() - length / 8) < 0.025, (g, method, edge.mean())
        np.testing.assert_array_equal(normals[edges['y=0']], [[0.0, 1.0]] * edges['y=0'].sum())  # out of the L
        np.testing.assert_array_equal(normals[edges['x=0']], [[1.0, 0.0]] * edges['x=0'].sum())
        np.testing.assert_array_equal(normals[edges['x=1']], [[1.0, 0.0]] * edges['x=1'].sum())
    # a grid on the L keeps no point of the removed edges (nor the corner (1, 1)); the hole's edges stay
    grid = Domain(ell).grid([5, 5])
    quarter = {tuple(p) for p in grid[(grid[:, 0] >= 0) & (grid[:, 1] >= 0)].tolist()}
    assert len(grid) == 21 and quarter == {(0.0, 0.0), (0.0, 0.5), (0.0, 1.0), (0.5, 0.0), (1.0, 0.0)}
    assert len(Domain(union).grid([5, 5])) == 21
    # parts side by side: their common edge is inside the union; a part touching from outside removes nothing
    pair = Union([Box([0.0, 0.0], [1.0, 1.0]), Box([1.0, 0.0], [2.0, 1.0])])
    points, _ = pair.sample_boundary(600, draw_with(method))
    assert not ((points[:, 0] == 1.0) & (points[:, 1] > 0) & (points[:, 1] < 1)).any()
    assert abs((points[:, 1] == 1.0).mean() - 2 / 6) < 0.03
    touching = Difference([Box([0.0, 0.0], [1.0, 1.0]), Box([1.0, 0.0], [2.0, 1.0])])
    points, normals = touching.sample_boundary(800, draw_with(method))
    right = points[:, 0] == 1.0
    assert abs(right.mean() - 1 / 4) < 0.03 and (normals[right] == [1.0, 0.0]).all()


def test_space_time_domain_interior_boundary_initial_and_grid():
    domain = Domain(Box([-1.0], [1.0]), (0.0, 2.0))
    assert domain.names == ('x', 't')
    inner = domain.interior(200, draw_with('hammersley'))
    assert ((inner[:, 1] > 0) & (inner[:, 1] <= 2) & (np.abs(inner[:, 0]) < 1)).all()
    points, normals = domain.boundary(100, draw_with('hammersley'))
    assert set(np.abs(points[:, 0])) == {1.0} and (points[:, 1] > 0).all()
    np.testing.assert_array_equal(normals[:, 1], 0.0)
    np.testing.assert_array_equal(normals[:, 0], np.sign(points[:, 0]))
    initial = domain.initial(50, draw_with('uniform'))
    assert (initial[:, 1] == 0.0).all() and (np.abs(initial[:, 0]) < 1).all()
    grid = domain.grid([5, 3])
    assert grid.shape == (15, 2) and grid[:, 1].max() == 2.0
    disk = Domain(Ball([0.0, 0.0], 1.0)).grid([21, 21])  # only the grid points in the disk
    assert (np.linalg.norm(disk, axis=1) <= 1 + 1e-9).all() and 300 < len(disk) < 21 * 21


# -- point sets ----------------------------------------------------------------------------------
def point_sets(sets, geometry=None, time=None, **keys):
    cfg = {'NAME': 'PointSets', 'GEOMETRY': geometry or {'NAME': 'Rectangle'}, 'SETS': sets, **keys}
    if time is not None:
        cfg['TIME'] = time
    return DATASETS.build(Config(cfg, path='SOLVER.TRAIN_DATA'))


DIRICHLET = [{'NAME': 'Dirichlet', 'VALUE': 0}]


def test_point_sets_full_batch_by_default_whatever_the_counts():
    data = point_sets(
        {'pde': {'KIND': 'interior', 'COUNT': 4000}, 'bc': {'KIND': 'boundary', 'COUNT': 7, 'CONDITIONS': DIRICHLET}}
    )
    assert len(data) == 1  # one step per pass: every point of every set in it
    batch = data.take([0])
    assert batch['pde.x'].shape == (4000, 2) and batch['bc.x'].shape == (7, 2) and batch['bc.normal'].shape == (7, 2)
    assert batch['problem'].coordinates == ('x', 'y') and [s.name for s in batch['problem'].sets] == ['pde', 'bc']
    assert batch['problem'].sets[0].needs_grad and not batch['problem'].sets[1].needs_grad
    assert data.take([0])['pde.x'] is batch['pde.x']  # the batch is built once, not per step


def test_mini_batched_sets_shuffle_per_pass_and_cycle_within_a_pass():
    data = point_sets(
        {
            'pde': {'KIND': 'interior', 'COUNT': 10, 'BATCH_SIZE': 4},  # 3 batches: 3, 3, 4 points... per pass
            'bc': {'KIND': 'boundary', 'COUNT': 6, 'BATCH_SIZE': 3, 'CONDITIONS': DIRICHLET},  # 2 batches, cycled
        }
    )
    assert len(data) == 3
    first = [data.take([k]) for k in range(3)]
    seen = torch.cat([b['pde.x'] for b in first])
    assert len(seen) == 10 and len(torch.unique(seen, dim=0)) == 10  # each point once per pass
    torch.testing.assert_close(first[2]['bc.x'], first[0]['bc.x'])  # the smaller set starts over
    data.set_epoch(1)
    assert not torch.equal(data.take([0])['pde.x'], first[0]['pde.x'])  # a new shuffle
    again = point_sets(
        {
            'pde': {'KIND': 'interior', 'COUNT': 10, 'BATCH_SIZE': 4},
            'bc': {'KIND': 'boundary', 'COUNT': 6, 'BATCH_SIZE': 3, 'CONDITIONS': DIRICHLET},
        }
    )
    again.set_epoch(1)  # a resumed run jumps to pass 1: the same shuffle
    torch.testing.assert_close(again.take([0])['pde.x'], data.take([0])['pde.x'])


def test_draws_are_pure_functions_of_seed_set_and_round_and_resample():
    sets = {'pde': {'KIND': 'interior', 'COUNT': 30, 'SAMPLING': 'uniform', 'RESAMPLE_EVERY': 2}}
    a = point_sets(sets, SEED=5)
    torch.rand(10), np.random.rand(10)  # random state used elsewhere changes nothing
    b = point_sets(sets, SEED=5)
    assert torch.equal(a.take([0])['pde.x'], b.take([0])['pde.x'])
    assert not torch.equal(a.take([0])['pde.x'], point_sets(sets, SEED=6).take([0])['pde.x'])
    round0 = a.take([0])['pde.x']
    a.set_epoch(1)
    assert torch.equal(a.take([0])['pde.x'], round0)
    a.set_epoch(2)
    assert not torch.equal(a.take([0])['pde.x'], round0)
    b.set_epoch(3)  # straight to pass 3: round 1 as well
    assert torch.equal(a.take([0])['pde.x'], b.take([0])['pde.x'])


def test_each_rank_takes_its_own_share_of_every_set(monkeypatch):
    from scepter_like.data import point_sets as module
    from scepter_like.data.sampler import ShardedSampler

    monkeypatch.setattr(module, 'get_world_size', lambda: 2)
    data = point_sets(
        {'pde': {'KIND': 'interior', 'COUNT': 9}, 'bc': {'KIND': 'boundary', 'COUNT': 4, 'CONDITIONS': DIRICHLET}}
    )
    assert len(data) == 2  # one step per pass on each of 2 ranks
    shares = []
    for rank in range(2):
        (item,) = ShardedSampler(len(data), num_replicas=2, rank=rank, shuffle=False).rank_indices().tolist()
        shares.append(data.take([item]))
    whole = torch.cat([s['pde.x'] for s in shares])
    assert len(whole) == 9 and len(torch.unique(whole, dim=0)) == 9
    assert [len(s['bc.x']) for s in shares] == [2, 2]


def test_observations_from_csv_npz_and_inline(tmp_path):
    csv = tmp_path / 'obs.csv'
    csv.write_text('x,t,u\n0.1,0.5,1.5\n0.2,0.6,2.5\n')
    npz = tmp_path / 'obs.npz'
    np.savez(npz, x=np.array([[0.3, 0.1]]), u=np.array([[7.0]]))
    for obs in (
        {'FILE': str(csv)},
        {'FILE': str(npz)},
        {'POINTS': [[0.1, 0.5]], 'VALUES': [4.0]},
        {'POINTS': [[0.1, 0.5]], 'VALUES': [[4.0]]},
    ):
        data = point_sets({'data': {'KIND': 'observations', **obs}}, geometry={'NAME': 'Interval'}, time=[0, 1])
        batch = data.take([0])
        assert batch['data.x'].shape[1] == 2 and batch['data.values'].shape == (len(batch['data.x']), 1)
    torch.testing.assert_close(batch['data.values'], torch.tensor([[4.0]]))
    rows = {'POINTS': [[0.1, 0.5], [0.2, 0.6], [0.3, 0.7]], 'VALUES': [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]}
    data = point_sets(
        {'data': {'KIND': 'observations', 'COMPONENTS': [0, 1], **rows}}, geometry={'NAME': 'Interval'}, time=[0, 1]
    )
    torch.testing.assert_close(data.take([0])['data.values'], torch.tensor(rows['VALUES']))  # one row per point


BAD = {
    'an initial condition on a boundary set': (
        {'bc': {'KIND': 'boundary', 'COUNT': 4, 'CONDITIONS': [{'NAME': 'InitialValue', 'VALUE': 0}]}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.bc\.CONDITIONS\[0\]\.NAME: an InitialValue condition belongs on an initial set;',
    ),
    'a condition needing normals on an initial set': (
        {'ic': {'KIND': 'initial', 'COUNT': 4, 'CONDITIONS': [{'NAME': 'Neumann', 'VALUE': 0}]}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.ic\.CONDITIONS\[0\]\.NAME: a Neumann condition belongs on a boundary set \(it'
        r' needs outward normals',
    ),
    'no points': ({'pde': {'KIND': 'interior', 'COUNT': 0}}, r'^SOLVER\.TRAIN_DATA\.SETS\.pde\.COUNT: a point set'),
    'an initial set without TIME': (
        {'ic': {'KIND': 'initial', 'COUNT': 4, 'CONDITIONS': [{'NAME': 'InitialValue', 'VALUE': 0}]}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.ic\.KIND: an initial set lies at the first time, and the problem has none',
    ),
    'observations of the wrong shape': (
        {'d': {'KIND': 'observations', 'POINTS': [[0.1]], 'VALUES': [1.0]}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.d\.POINTS: POINTS are rows of 2 coordinates \(x, y\)',
    ),
    'observation values given one list per component': (  # [[u0 at 3 points], [u1 at 3 points]]: not rows
        {
            'd': {
                'KIND': 'observations',
                'COMPONENTS': [0, 1],
                'POINTS': [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]],
                'VALUES': [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
            }
        },
        r'^SOLVER\.TRAIN_DATA\.SETS\.d\.VALUES: VALUES has shape \[2, 3\]; it needs one row per point, the values of'
        r' COMPONENTS \[0, 1\] at that point: shape \[3, 2\] for 3 POINTS; it looks like one list per component',
    ),
    'observation values flat for two components': (
        {
            'd': {
                'KIND': 'observations',
                'COMPONENTS': [0, 1],
                'POINTS': [[0.1, 0.1], [0.2, 0.2]],
                'VALUES': [1, 2, 3, 4],
            }
        },
        r'^SOLVER\.TRAIN_DATA\.SETS\.d\.VALUES: VALUES has shape \[4\]; it needs one row per point.*shape \[2, 2\]',
    ),
    'ragged observation values': (
        {'d': {'KIND': 'observations', 'POINTS': [[0.1, 0.1], [0.2, 0.2]], 'VALUES': [[1.0], [2.0, 3.0]]}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.d\.VALUES: VALUES needs numbers, one row per point',
    ),
    'a key of another kind': (
        {'pde': {'KIND': 'interior', 'COUNT': 3, 'FACES': ['x']}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.pde\.FACES: a set of KIND interior takes no FACES',
    ),
    'a boundary set without conditions': (
        {'bc': {'KIND': 'boundary', 'COUNT': 3}},
        r'^SOLVER\.TRAIN_DATA\.SETS\.bc\.CONDITIONS: a boundary set without conditions',
    ),
    'a value naming no coordinate': (
        {'bc': {'KIND': 'boundary', 'COUNT': 3, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 'sin(z)'}]}},
        r"^SOLVER\.TRAIN_DATA\.SETS\.bc\.CONDITIONS\[0\]\.VALUE: 'sin\(z\)' names 'z'",
    ),
    'a value that is not finite at a drawn point': (
        {
            'left': {
                'KIND': 'boundary',
                'COUNT': 4,
                'FACES': ['x_low'],
                'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 'log(x)'}],
            }
        },
        r"^SOLVER\.TRAIN_DATA\.SETS\.left\.CONDITIONS\[0\]\.VALUE: 'log\(x\)' is NaN or inf at 4 of 4 drawn point\(s\),"
        r" the first at \{'x': 0\.0, 'y': 0\.[0-9]+\} \(value -inf\)",
    ),
    'code in a value': (
        {'bc': {'KIND': 'boundary', 'COUNT': 3, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': '__import__("os")'}]}},
        r'VALUE: .* only numbers',
    ),
    'periodic off its faces': (
        {'bc': {'KIND': 'boundary', 'COUNT': 3, 'CONDITIONS': [{'NAME': 'Periodic', 'AXIS': 'x'}]}},
        r'AXIS: a periodic condition pairs the two faces of x; draw its set there only: .*FACES: \[x\]',
    ),
    'a misspelt condition key': (
        {'bc': {'KIND': 'boundary', 'COUNT': 3, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALEU': 1.0}]}},
        r'CONDITIONS\[0\]\.VALEU: unknown key for CONDITIONS\.Dirichlet; did you mean VALUE\?',
    ),
    'two terms of one name': (
        {
            'bc': {'KIND': 'interior', 'COUNT': 3},
            'b': {'KIND': 'boundary', 'COUNT': 3, 'CONDITIONS': [{'NAME': 'Dirichlet', 'TERM': 'bc'}]},
        },
        r"two loss terms are called \['bc'\]",
    ),
}


@pytest.mark.parametrize('case', sorted(BAD))
def test_bad_point_sets_name_the_key(case):
    sets, message = BAD[case]
    with pytest.raises(ConfigError, match=message):
        point_sets(sets)


def test_a_value_not_finite_at_a_point_of_a_later_draw_is_an_error_at_that_draw():
    """Each resampling evaluates the values anew, and checks them: the error comes at the draw, not as a NaN loss."""

    def sets(value):
        condition = {'NAME': 'Dirichlet', 'VALUE': value}
        return {'bc': {'KIND': 'boundary', 'COUNT': 3, 'RESAMPLE_EVERY': 1, 'CONDITIONS': [condition]}}

    clean = point_sets(sets(0))
    x0 = clean.take([0])['bc.x'][:, 0].max().item()
    clean.set_epoch(1)
    x1 = clean.take([0])['bc.x'][:, 0].max().item()
    assert x1 > x0  # round 1 draws a point further right than round 0's: sqrt(c - x) is NaN there only
    data = point_sets(sets(f'sqrt({(x0 + x1) / 2} - x)'))
    with pytest.raises(
        ConfigError, match=r'^SOLVER\.TRAIN_DATA\.SETS\.bc\.CONDITIONS\[0\]\.VALUE: .* is NaN or inf at \d of 3'
    ):
        data.set_epoch(1)


def test_whitespace_separated_observation_files_as_numpy_loadtxt_reads_them(tmp_path):
    """DeepXDE's data files are np.loadtxt's: numbers separated by spaces or tabs, '#' comments; no comma in the
    first line makes a file whitespace-separated (its first data row was taken as a header and the error quoted
    the second), and a header line of names is allowed as in a .csv."""
    expected = torch.tensor([[0.1, 0.5], [0.2, 0.6]]), torch.tensor([[1.5], [2.5]])
    for name, text in [
        ('plain.txt', '1.000000000000000000e-01 5.000000000000000000e-01 1.5\n0.2\t0.6   2.5\n'),
        ('named.dat', '# written by savetxt\nx t u\n0.1 0.5 1.5\n\n0.2 0.6 2.5\n'),
        ('spaced.csv', '0.1, 0.5, 1.5\n0.2,0.6,2.5\n'),
    ]:
        (tmp_path / name).write_text(text)
        data = point_sets(
            {'d': {'KIND': 'observations', 'FILE': str(tmp_path / name)}}, geometry={'NAME': 'Interval'}, time=[0, 1]
        )
        batch = data.take([0])
        torch.testing.assert_close((batch['d.x'], batch['d.values']), expected, msg=name)
    for name, text, message in [
        (
            'mixed.txt',
            '0.1 0.5 1.5\n0.2,0.6,2.5\n',
            r"mixed\.txt line 2 is not all numbers: '0\.2,0\.6,2\.5'; the file is read as whitespace-separated, as"
            r' numpy\.loadtxt and DeepXDE data files \(no comma in its first line\): an optional header line of names,'
            r' then one row of numbers per point$',
        ),
        (
            'semicolons.txt',
            '0.1;0.5;1.5\n0.2;0.6;2.5\n',
            r"semicolons\.txt line 2 is not all numbers: '0\.2;0\.6;2\.5'; .*whitespace-separated.* \(line 1 was read"
            r" as that header: '0\.1;0\.5;1\.5'\)$",
        ),
        ('short.csv', 'x,t,u\n0.1,0.5,1.5\n0.2,0.6\n', r'short\.csv line 3 holds 2 numbers and the first row 3; rows'),
    ]:
        (tmp_path / name).write_text(text)
        with pytest.raises(DataError, match=r'^SOLVER\.TRAIN_DATA\.SETS\.d\.FILE: .*' + message):
            point_sets(
                {'d': {'KIND': 'observations', 'FILE': str(tmp_path / name)}},
                geometry={'NAME': 'Interval'},
                time=[0, 1],
            )


def test_bad_time_domain_and_observation_files(tmp_path):
    with pytest.raises(ConfigError, match=r'^SOLVER\.TRAIN_DATA\.TIME: the time domain \[t0, t1\] = \[1, 1\] needs'):
        point_sets({'pde': {'KIND': 'interior', 'COUNT': 3}}, time=[1, 1])
    wide = tmp_path / 'wide.csv'
    wide.write_text('0.1,0.2,0.3,0.4\n')
    with pytest.raises(
        ConfigError,
        match=r'^SOLVER\.TRAIN_DATA\.SETS\.d\.FILE: .*has 4 columns; a row is the'
        r' coordinates \(x, t\) then 1 value',
    ):
        point_sets({'d': {'KIND': 'observations', 'FILE': str(wide)}}, geometry={'NAME': 'Interval'}, time=[0, 1])
    swapped = tmp_path / 'swapped.csv'
    swapped.write_text('t,x,u\n0.0,0.5,1.0\n')
    with pytest.raises(DataError, match=r"SETS\.d\.FILE: .* has the columns \['t', 'x', 'u'\]; a row must hold the"):
        point_sets({'d': {'KIND': 'observations', 'FILE': str(swapped)}}, geometry={'NAME': 'Interval'}, time=[0, 1])
    holed = tmp_path / 'holed.csv'
    holed.write_text('x,t,u\n0.5,0.0,1.0\n0.5,0.1,nan\n')
    with pytest.raises(DataError, match=r'SETS\.d\.FILE: NaN or inf in 1 row\(s\), the first at row 1'):
        point_sets({'d': {'KIND': 'observations', 'FILE': str(holed)}}, geometry={'NAME': 'Interval'}, time=[0, 1])
    with pytest.raises(DataError, match=r'SETS\.d\.POINTS: NaN or inf in 1 row'):
        point_sets(
            {'d': {'KIND': 'observations', 'POINTS': [[0.5, 0.0]], 'VALUES': [float('inf')]}},
            geometry={'NAME': 'Interval'},
            time=[0, 1],
        )
    import logging

    stray = tmp_path / 'stray.csv'
    stray.write_text('0.5,0.2,1.0\n5.0,0.2,1.0\n0.5,-3.0,1.0\n')
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger('scepter_like').addHandler(handler)
    try:
        point_sets({'d': {'KIND': 'observations', 'FILE': str(stray)}}, geometry={'NAME': 'Interval'}, time=[0, 1])
    finally:
        logging.getLogger('scepter_like').removeHandler(handler)
    assert [r.getMessage() for r in records] == [
        'SOLVER.TRAIN_DATA.SETS.d.FILE: 2 of 3 observation(s) lie outside the domain (x, t), the first at row 1:'
        ' [5.0, 0.2]; check the columns are the coordinates in that order'
    ]
    empty = tmp_path / 'empty.csv'
    empty.write_text('x,t,u\n')
    with pytest.raises((ConfigError, DataError), match=r'SETS\.d\.FILE'):
        point_sets({'d': {'KIND': 'observations', 'FILE': str(empty)}}, geometry={'NAME': 'Interval'}, time=[0, 1])


def test_a_header_naming_the_coordinates_in_another_order_is_an_error_and_one_naming_none_a_warning(tmp_path, caplog):
    """`time,x,u` (time first) was read as (x, t, u) silently: a header naming a coordinate (time for t, any case)
    in another column is the order error; one whose coordinate columns name none of them a warning."""
    sets = lambda path: {'d': {'KIND': 'observations', 'FILE': str(path)}}  # noqa: E731
    for header in ['time,x,u', 'Time,X,u', 'u,x,t', 'x,u,t']:
        path = tmp_path / 'obs.csv'
        path.write_text(f'{header}\n0.0,0.5,1.0\n')
        with pytest.raises(
            DataError,
            match=r'SETS\.d\.FILE: .* has the columns \[.*\]; a row must hold the coordinates in'
            r" the domain's order \['x', 't'\] first",
        ):
            point_sets(sets(path), geometry={'NAME': 'Interval'}, time=[0, 1])
    for header, warned in [('x,t,u', False), ('X,Time,T', False), ('pos,tt,u', True), ('a,b,c', True)]:
        path = tmp_path / 'obs.csv'
        path.write_text(f'{header}\n0.5,0.0,1.0\n')
        caplog.clear()
        with caplog.at_level('WARNING', logger='scepter_like'):
            data = point_sets(sets(path), geometry={'NAME': 'Interval'}, time=[0, 1])
        torch.testing.assert_close(data.take([0])['d.x'], torch.tensor([[0.5, 0.0]]))
        messages = [r.getMessage() for r in caplog.records]
        assert messages == (
            [
                f'SOLVER.TRAIN_DATA.SETS.d.FILE: {path} has the columns {header.split(",")}, which do not name the'
                " coordinates ['x', 't']; its columns are read in the domain's order ['x', 't'] first, then the"
                ' value(s): check the file holds them so'
            ]
            if warned
            else []
        ), header


def test_npz_observations_of_another_orientation_and_sets_that_are_not_mappings(tmp_path):
    x, u = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]), np.array([[1.0], [2.0], [3.0]])
    for arrays, message in [
        (
            {'x': x.T, 'u': u},
            r'x has shape \[2, 3\]; it needs one row per point, the 2 coordinates \(x, t\): shape'
            r' \[n, 2\]; it looks transposed',
        ),
        (
            {'x': x, 'u': u.T},
            r'u has shape \[1, 3\]; it needs one row per point, the 1 value\(s\) of COMPONENTS: shape'
            r' \[n, 1\] \(or \[n\]\); it looks transposed',
        ),
        ({'x': x, 'u': u[:2]}, r'x has 3 rows \[3, 2\] and u 2 rows \[2, 1\]; it needs one row of u per point'),
    ]:
        path = tmp_path / 'obs.npz'
        np.savez(path, **arrays)
        with pytest.raises(DataError, match=r'^SOLVER\.TRAIN_DATA\.SETS\.d\.FILE: .*obs\.npz: ' + message):
            point_sets({'d': {'KIND': 'observations', 'FILE': str(path)}}, geometry={'NAME': 'Interval'}, time=[0, 1])
    np.savez(path, x=x, u=u[:, 0])  # [n] for one component
    data = point_sets({'d': {'KIND': 'observations', 'FILE': str(path)}}, geometry={'NAME': 'Interval'}, time=[0, 1])
    torch.testing.assert_close(data.take([0])['d.values'], torch.tensor(u, dtype=torch.float32))
    for value, shown in [(None, 'null'), (3, '3')]:
        with pytest.raises(
            ConfigError,
            match=rf'^SOLVER\.TRAIN_DATA\.SETS\.bc: a point set is a mapping .*, got {shown}; to leave out a set, give'
            r' SETS whole with only the sets to keep: on the command line SOLVER\.TRAIN_DATA\.SETS=\{\.\.\.\} \(it'
            r' replaces SETS\), in a file whose _BASE_ has SETS, with _delete_: true beside them$',
        ):
            point_sets({'pde': {'KIND': 'interior', 'COUNT': 3}, 'bc': value})


# -- conditions: residuals of an exact field are zero ----------------------------------------------
@MODELS.register_class()
class ExactFieldPINN(PhysicsInformedModel):
    """The network's output replaced by a known field (output_transform): every residual should vanish."""

    para_dict = {'FIELD': {'value': 'square', 'description': 'which known field'}}

    def output_transform(self, x, u):
        if self.cfg.FIELD == 'square':  # u = x^2 + y^2: laplace 4, du/dn = 2 on the unit circle, u = 1 there
            return (x**2).sum(1, keepdim=True) + 0 * u
        if self.cfg.FIELD == 'periodic':  # u = sin(2 pi x) + y
            return torch.sin(2 * math.pi * x[:, :1]) + x[:, 1:2] + 0 * u
        if self.cfg.FIELD in ('sine', '-sine'):  # an ODE's u(x) = sin x, or the wrong sign's -sin x
            return (1 if self.cfg.FIELD == 'sine' else -1) * torch.sin(x) + 0 * u
        return torch.sin(x[:, :1]) + 3 * x[:, 1:2] + 0 * u  # 'wave-ish': u(x, t) = sin x + 3 t

    def pde_residual(self, x, u, d):
        return d.laplacian() - 4 if self.cfg.FIELD == 'square' else d('x', 'x') + torch.sin(x[:, :1])


def losses_of(field, sets, geometry, time=None, in_dim=2):
    model = MODELS.build(
        {
            'NAME': 'ExactFieldPINN',
            'FIELD': field,
            'NETWORK': {'NAME': 'MLP', 'IN_DIM': in_dim, 'HIDDEN_DIMS': [4], 'OUT_DIM': 1},
        }
    )
    data = point_sets(sets, geometry=geometry, time=time)
    return model(**data.take([0]))


def test_dirichlet_neumann_robin_on_a_disk():
    out = losses_of(
        'square',
        {
            'pde': {'KIND': 'interior', 'COUNT': 50},
            'wall': {
                'KIND': 'boundary',
                'COUNT': 40,
                'CONDITIONS': [
                    {'NAME': 'Dirichlet', 'VALUE': 'x**2 + y**2'},
                    {'NAME': 'Neumann', 'VALUE': 2},
                    {'NAME': 'Robin', 'A': 3.0, 'B': 0.5, 'VALUE': 4},  # 3 * 1 + 0.5 * 2
                ],
            },
        },
        {'NAME': 'Disk', 'CENTER': [0.0, 0.0], 'RADIUS': 1.0},
    )
    assert set(out) == {'loss_pde', 'loss_wall_0', 'loss_wall_1', 'loss_wall_2'}
    assert all(v.item() < 1e-9 for v in out.values()), out
    wrong = losses_of(
        'square',
        {'wall': {'KIND': 'boundary', 'COUNT': 8, 'CONDITIONS': [{'NAME': 'Neumann', 'VALUE': 1}]}},
        {'NAME': 'Disk', 'CENTER': [0.0, 0.0], 'RADIUS': 1.0},
    )
    assert wrong['loss_wall'].item() == pytest.approx(1.0, rel=1e-5)  # du/dn = 2, not 1


def test_periodic_and_initial_conditions():
    periodic = losses_of(
        'periodic',
        {
            'sides': {
                'KIND': 'boundary',
                'COUNT': 20,
                'FACES': ['x'],
                'CONDITIONS': [
                    {'NAME': 'Periodic', 'AXIS': 'x'},
                    {'NAME': 'Periodic', 'AXIS': 'x', 'DERIVATIVE_ORDER': 1},
                ],
            },
        },
        {'NAME': 'Rectangle'},
    )
    assert all(v.item() < 1e-9 for v in periodic.values()), periodic
    timed = losses_of(
        'wave',
        {
            'pde': {'KIND': 'interior', 'COUNT': 30},
            'start': {
                'KIND': 'initial',
                'COUNT': 20,
                'CONDITIONS': [{'NAME': 'InitialValue', 'VALUE': 'sin(x)'}, {'NAME': 'InitialDerivative', 'VALUE': 3}],
            },
        },
        {'NAME': 'Interval', 'LOW': 0, 'HIGH': 2},
        time=[0, 1],
    )
    assert set(timed) == {'loss_pde', 'loss_start_0', 'loss_start_1'}
    assert all(v.item() < 1e-9 for v in timed.values()), timed


def test_an_ode_states_its_initial_derivative_on_a_boundary_set_at_a_face():
    """DeepXDE's OperatorBC u'(0) = 1 on a TimeDomain: without TIME, InitialDerivative on FACES [x_low] is du/dx
    itself; Neumann there takes the outward normal, -du/dx (the same VALUE 1 would train u = -sin x)."""
    ode = {'NAME': 'Interval', 'LOW': 0, 'HIGH': 6.28}
    conditions = [
        {'NAME': 'Dirichlet', 'VALUE': 0},
        {'NAME': 'InitialDerivative', 'VALUE': 1},  # u'(0) = 1
        {'NAME': 'Neumann', 'VALUE': -1},  # du/dn = -u'(0) at x_low
    ]
    start = {'KIND': 'boundary', 'COUNT': 1, 'FACES': ['x_low'], 'CONDITIONS': conditions}
    right = losses_of('sine', {'start': start}, ode, in_dim=1)
    assert set(right) == {'loss_start_0', 'loss_start_1', 'loss_start_2'}
    assert all(v.item() < 1e-12 for v in right.values()), right
    wrong = losses_of('-sine', {'start': start}, ode, in_dim=1)
    assert wrong['loss_start_1'].item() == pytest.approx(4.0) and wrong['loss_start_2'].item() == pytest.approx(4.0)
    with pytest.raises(
        ConfigError,
        match=r'^SOLVER\.TRAIN_DATA\.SETS\.start\.FACES: without TIME an InitialDeri.*'
        r'FACES: \[x_low\]',
    ):
        point_sets({'start': {**start, 'FACES': []}}, geometry=ode)  # both ends: no one start
    with pytest.raises(
        ConfigError,
        match=r'^SOLVER\.TRAIN_DATA\.SETS\.start\.KIND: an initial set .* for an ODE whose'
        r' time is the coordinate x, make it a boundary set at the start, FACES: \[x_low\], with'
        r' Dirichlet .* and InitialDerivative \(du/dx = g; Neumann would be the outward -du/dx\)$',
    ):
        point_sets({'start': {**start, 'KIND': 'initial', 'FACES': [], 'CONDITIONS': conditions[:1]}}, geometry=ode)
    with pytest.raises(
        ConfigError,
        match=r'CONDITIONS\[1\]\.NAME: an InitialDerivative condition belongs on a boundary'
        r" set \(the problem has no TIME: an ODE, whose time is the coordinate x, states u'\(x0\) = g"
        r" on a boundary set at that face, FACES: \[x_low\]\); 'start' is a set of KIND initial$",
    ):
        point_sets({'start': {**start, 'KIND': 'initial', 'FACES': []}}, geometry=ode)
    with pytest.raises(
        ConfigError,
        match=r'CONDITIONS\[1\]\.NAME: an InitialDerivative condition belongs on an initial'
        r' set; .start. is a set of KIND boundary$',
    ):
        point_sets({'start': start}, geometry=ode, time=[0, 1])  # with TIME, du/dt belongs at t0


# -- cached derivatives ----------------------------------------------------------------------------
def test_derivatives_take_each_gradient_once(monkeypatch):
    calls = []
    grad = torch.autograd.grad

    def counting(*args, **kwargs):
        calls.append(1)
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, 'grad', counting)
    x = torch.rand(20, 2, dtype=torch.float64, requires_grad=True)
    u = torch.sin(3 * x[:, :1]) * torch.exp(x[:, 1:])  # u(x, t) = sin(3x) e^t
    d = Derivatives(u, x, ('x', 't'))
    burgers = d('t') + u * d('x') - 0.1 * d('x', 'x')  # DeepXDE: 2 gradients (jacobian, hessian row)
    assert len(calls) == 2 and burgers.shape == (20, 1)
    torch.testing.assert_close(d('x', 't'), d('t', 'x'))
    assert len(calls) == 2  # d/dt of du/dx comes from the second gradient already taken
    s, c, e = torch.sin(3 * x[:, :1]), torch.cos(3 * x[:, :1]), torch.exp(x[:, 1:])
    torch.testing.assert_close(d('x', 'x'), (-9 * s * e).detach())
    torch.testing.assert_close(d('x', 't'), (3 * c * e).detach())
    torch.testing.assert_close(d.laplacian(), (-9 * s * e).detach())  # over x only: t is time


# -- model options ---------------------------------------------------------------------------------
def test_trainable_parameters_fourier_features_and_output_transform():
    cfg = {
        'NAME': 'ExactFieldPINN',
        'FIELD': 'square',
        'PARAMETERS': {'D': 0.5, 'k': 2},
        'FOURIER_FEATURES': {'NUM': 8, 'SCALE': 2.0},
        'NETWORK': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [4], 'OUT_DIM': 1},
    }
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    assert model.network[0].in_features == 16 and model.fourier_matrix.shape == (2, 8)
    assert {'D', 'k', 'fourier_matrix'} <= set(model.state_dict())
    assert model.D.item() == 0.5 and model.D in list(model.parameters())
    data = point_sets({'pde': {'KIND': 'interior', 'COUNT': 5}})
    model(**data.take([0]))
    assert model.logged_state() == {'D': 0.5, 'k': 2.0}  # every log line shows them as they are then
    torch.manual_seed(0)
    assert torch.equal(MODELS.build(cfg).fourier_matrix, model.fourier_matrix)
    with pytest.raises(ConfigError, match=r'PARAMETERS: .loss_x. cannot name a parameter'):
        MODELS.build({**cfg, 'PARAMETERS': {'loss_x': 1.0}})
    # the keys a train log line writes itself (and the aggregators' weights): the value would be hidden (lr in
    # metrics.jsonl) or printed twice under one name
    for name in ('lr', 'eta', 'time', 'data', 'step', 'epoch', 'iter', 'samples', 'mem', 'grad_norm', 'weight_pde'):
        with pytest.raises(
            ConfigError,
            match=rf'^PARAMETERS: .{name}. cannot name a parameter \(a plain word, not starting with loss or weight_,'
            r' not a key the train log line writes itself: epoch, iter, step, lr, time, data, samples, FLOP, eta, mem,'
            r' grad_norm, not taken by the model\); rename it$',
        ):
            MODELS.build({**cfg, 'PARAMETERS': {name: 1.0}})
    with pytest.raises(ConfigError, match=r'.network. cannot name .*; .* has an attribute network\); rename it'):
        MODELS.build({**cfg, 'PARAMETERS': {'network': 1.0}})
    model.eval()
    x = torch.rand(6, 2)
    torch.testing.assert_close(model(x=x)['u'], (x**2).sum(1, keepdim=True))  # the transform holds in eval too


@MODELS.register_class()
class SlipPINN(PhysicsInformedModel):
    """A residual with one of the mistakes that used to train a wrong loss without a word."""

    para_dict = {'SLIP': {'value': 'none', 'description': 'which mistake pde_residual makes'}}

    def pde_residual(self, x, u, d):
        slip = self.cfg.SLIP
        if slip == 'broadcast':
            return d('x', 'x')[:, 0] - u  # [N] against [N, 1]: [N, N]
        if slip == 'mean':
            return (d('x', 'x') - u).square().mean()
        if slip == 'system':
            return d('x', 'x') - u, (d('y') - u).squeeze(1).unsqueeze(0)  # the second is [1, N]
        if slip == 'component':
            return d('x', component=1) - u  # the network has one output
        if slip == 'name':
            return d('T') - u  # the coordinates are x, y
        if slip == 'constant':
            return d('x', 'x') - self.cfg.PARAMETERS.D * u  # the initial number, not the trainable self.D
        if slip == 'parameter':
            return d('x', 'x') - self.D * u
        return d('x', 'x') - u


def slip_model(slip, out_dim=1, **keys):
    return MODELS.build(
        {
            'NAME': 'SlipPINN',
            'SLIP': slip,
            'NETWORK': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [4], 'OUT_DIM': out_dim},
            **keys,
        }
    )


def test_a_pde_parameter_no_loss_depends_on_is_named_once_at_the_first_step(caplog):
    batch = point_sets({'pde': {'KIND': 'interior', 'COUNT': 6}}).take([0])
    model = slip_model('constant', PARAMETERS={'D': 0.5, 'k': 1.0})
    with caplog.at_level('WARNING'):
        model(**batch)
        model(**batch)
    warned = [r.getMessage() for r in caplog.records if 'no loss term depends on' in r.getMessage()]
    assert warned == [
        'PARAMETERS: no loss term depends on D, k, so they stay at the initial value; use self.D (the trainable'
        ' tensor) in pde_residual or a condition'
    ]
    caplog.clear()
    with caplog.at_level('WARNING'):
        slip_model('parameter', PARAMETERS={'D': 0.5})(**batch)
    assert not caplog.records


def test_pretrained_weights_start_the_learned_parameters_and_a_warning_names_each_configured_start_they_replace(
    tmp_path, caplog
):
    trained = slip_model('parameter', PARAMETERS={'D': 0.5, 'k': 1.0})
    with torch.no_grad():
        trained.D.fill_(0.25)  # k stays at its start: the file holds the same value the config gives
    torch.save(trained.state_dict(), tmp_path / 'weights.pth')
    model = slip_model('parameter', PARAMETERS={'D': 0.5, 'k': 1.0}, PRETRAINED_MODEL=str(tmp_path / 'weights.pth'))
    with caplog.at_level('WARNING'):
        prepare_model(model, model.cfg, logging.getLogger('scepter_like'))
    assert model.D.item() == 0.25 and model.k.item() == 1.0  # loaded, as a fine-tune wants
    torch.testing.assert_close(model.network.state_dict(), trained.network.state_dict())
    assert [r.getMessage() for r in caplog.records] == [
        f'PARAMETERS: {tmp_path / "weights.pth"} (PRETRAINED_MODEL) holds the learned parameters too, and they start'
        ' from its values, not the configured ones: D 0.5 -> 0.25'
    ]


def test_a_pde_parameter_read_under_a_name_parameters_lacks_names_the_close_one():
    batch = point_sets({'pde': {'KIND': 'interior', 'COUNT': 6}}).take([0])
    for given in ('d', 'DD'):  # the residual reads self.D
        with pytest.raises(ConfigError, match=rf'^PARAMETERS: SlipPINN reads self.D, which PARAMETERS does not give;'
                           rf' did you mean {given}\?$'):  # fmt: skip
            slip_model('parameter', PARAMETERS={given: 0.5})(**batch)
    with pytest.raises(AttributeError, match="'SlipPINN' object has no attribute 'D'"):  # nothing close
        slip_model('parameter', PARAMETERS={'k': 0.5})(**batch)


def test_residuals_of_the_wrong_shape_and_components_the_network_lacks_are_errors():
    batch = point_sets({'pde': {'KIND': 'interior', 'COUNT': 6}}).take([0])
    assert set(slip_model('none')(**batch)) == {'loss_pde'}
    for slip, shape in [('broadcast', r'\(6, 6\)'), ('mean', r'\(\)'), ('system', r'residual 1 .* \(1, 6\)')]:
        with pytest.raises(ModelError, match=rf'SlipPINN\.pde_residual: .*{shape} for 6 points; a residual holds one'):
            slip_model(slip)(**batch)
    with pytest.raises(ModelError, match=r'^SlipPINN\.pde_residual: component 1 is out of range: the network gives 1'
                       r' output\(s\), counted from 0 \(NETWORK\.OUT_DIM\)$'):  # fmt: skip
        slip_model('component')(**batch)
    with pytest.raises(
        ModelError, match=r"^SlipPINN\.pde_residual: no coordinate 'T': the coordinates are \['x', 'y'\]$"
    ):
        slip_model('name')(**batch)  # the user's naming mistakes: one error line (exit 2), as a COMPONENT's is
    with pytest.raises(ModelError, match=r'^SlipPINN\.pde_residual: component 1 is out of range'):
        slip_model('component').residual(batch['pde.x'], ['x', 'y'])  # residual-based refinement's call too
    assert issubclass(ModelError, UserError) and issubclass(ModelError, ValueError)
    wall = {'KIND': 'boundary', 'COUNT': 4, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 0, 'COMPONENT': 1}]}
    with pytest.raises(ConfigError, match=r'CONDITIONS\[0\]\.COMPONENT: \[1\] names outputs the network lacks'):
        slip_model('none')(**point_sets({'wall': wall}).take([0]))
    assert 'loss_wall' in slip_model('none', out_dim=2)(**point_sets({'wall': wall}).take([0]))
    seen = {'KIND': 'observations', 'POINTS': [[0.1, 0.2]], 'VALUES': [[1.0, 2.0]], 'COMPONENTS': [0, 1]}
    with pytest.raises(ConfigError, match=r'SETS\.d\.COMPONENTS: \[0, 1\] names outputs the network lacks'):
        slip_model('none')(**point_sets({'d': seen}).take([0]))
    with pytest.raises(ConfigError, match=r"PARAMETERS\.D: an initial value is one number, got 'abc'"):
        MODELS.build({'NAME': 'SlipPINN', 'PARAMETERS': {'D': 'abc'}})
    with pytest.raises(DataError, match=r"SlipPINN evaluates the field at points 'x' \[N, coordinates\]; the inputs"):
        slip_model('none').eval()(points=torch.zeros(3, 2))  # run_inference --input of an npz without x


@MODELS.register_class()
class SlipTransformPINN(SlipPINN):
    """A hard constraint with the column slip of a DeepXDE port: ``[N, 1] + [N]`` (``[N, N]``), or an ``[N]``."""

    def output_transform(self, x, u):
        if self.cfg.SLIP == 'broadcast':
            return torch.sin(x[:, :1]) + x[:, 1] * u[:, 0]
        return torch.sin(x[:, 0]) + x[:, 1] * u[:, 0]


NET = {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [4], 'OUT_DIM': 1}


def test_an_output_transform_of_another_shape_than_the_network_output_is_one_error_line():
    x = torch.rand(5, 2)
    for slip, shape in [('broadcast', r'\[5, 5\]'), ('flat', r'\[5\]')]:
        model = MODELS.build({'NAME': 'SlipTransformPINN', 'SLIP': slip, 'NETWORK': NET})
        if slip == 'broadcast':
            model.eval()(x=x[:1])  # one point shows no broadcast (the solver's first forward may be one): checked on
        with pytest.raises(
            ModelError,
            match=rf'^SlipTransformPINN\.output_transform\(x, u\) gives a field of shape {shape} for 5 points x'
            r" \[5, 2\]; it needs the network output's shape \[5, 1\], \[N, OUT_DIM\] \(an \[N, 1\] term",
        ):
            model.eval()(x=x)  # inference: it used to predict u [5, 5] without a word
        with pytest.raises(ModelError, match=r'output_transform'):
            model.train()(**point_sets({'pde': {'KIND': 'interior', 'COUNT': 5}}).take([0]))


@MODELS.register_class()
class ExactPINN(SlipPINN):
    para_dict = {'EXACT': {'value': 'column', 'description': 'the shape exact_solution gives'}}

    def exact_solution(self, x):
        column = torch.sin(x[:, :1])
        return {'column': column, 'flat': column[:, 0], 'wide': column.repeat(1, 2).reshape(-1)}[self.cfg.EXACT]


def test_an_exact_solution_of_another_shape_than_the_field_is_an_error_naming_both():
    x = torch.rand(5, 2)
    for exact, out_dim in [('column', 1), ('flat', 1), ('wide', 2)]:
        model = MODELS.build(
            {
                'NAME': 'ExactPINN',
                'EXACT': exact,
                'NETWORK': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [4], 'OUT_DIM': out_dim},
            }
        )
        if exact != 'wide':
            torch.testing.assert_close(model.eval()(x=x)['u_exact'], torch.sin(x[:, :1]))
            continue
        with pytest.raises(  # 10 numbers for [5, 2]: a reshape by size would have mixed points and outputs
            DataError,
            match=r'^NETWORK: ExactPINN\.exact_solution\(x\) gives u_exact of shape \[10\] for 5 points x \[5, 2\], and'
            r' the network gives u of shape \[5, 2\] \(OUT_DIM 2\); they need one column per output, \[5, 2\]',
        ):
            model.eval()(x=x)
    model = MODELS.build(
        {'NAME': 'ExactPINN', 'NETWORK': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [4], 'OUT_DIM': 2}}
    )
    with pytest.raises(DataError, match=r'gives u_exact of shape \[5, 1\] .* u of shape \[5, 2\] \(OUT_DIM 2\)'):
        model.eval()(x=x)  # NETWORK.OUT_DIM 2 with a one-column exact solution


def test_a_pde_residual_the_model_cannot_call_is_an_error_when_it_is_built():
    class TwoArgumentPINN(PhysicsInformedModel):
        def pde_residual(self, x, u):  # no d
            return u

    MODELS.register_class('TwoArgumentPINN')(TwoArgumentPINN)
    try:
        with pytest.raises(ConfigError, match=r'TwoArgumentPINN\.pde_residual\(x, u\) cannot be called as pde_'):
            MODELS.build({'NAME': 'TwoArgumentPINN'})
    finally:
        MODELS._entries.pop('TwoArgumentPINN', None)


def test_a_point_sets_model_refuses_other_train_batches():
    model = MODELS.build(
        {'NAME': 'ExactFieldPINN', 'NETWORK': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [4], 'OUT_DIM': 1}}
    )
    with pytest.raises(DataError, match='trains on the batches of PointSets'):
        model(x=torch.rand(3, 2))


def test_loader_takes_one_step_item_at_a_time_and_refuses_a_batch_size():
    from scepter_like.data.loader import resolve_loader_keys

    cfg = Config({'NAME': 'PointSets', 'BATCH_SIZE': 2400}, path='SOLVER.TRAIN_DATA')
    with pytest.raises(ConfigError, match=r'^SOLVER\.TRAIN_DATA\.BATCH_SIZE: PointSets makes the batch of each step'):
        resolve_loader_keys(cfg, 'train')
    keys = resolve_loader_keys(Config({'NAME': 'PointSets'}, path='SOLVER.TRAIN_DATA'), 'train')
    assert keys.BATCH_SIZE == 1 and keys.SHUFFLE is False
    assert isinstance(point_sets({'pde': {'KIND': 'interior', 'COUNT': 2}}), PointSets)


@pytest.mark.parametrize('method', ['hammersley', 'uniform', 'sobol'])
def test_rejection_sampling_covers_the_whole_region(method):
    """Kept candidates are spread over, not cut: the first n of a Hammersley set (x sorted) missed the far arm."""
    ell = Polygon([[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]])  # area 3: the arm x > 1 is a third
    inner = ell.sample_interior(600, draw_with(method))
    assert abs((inner[:, 0] > 1).mean() - 1 / 3) < 0.04, method
    disk = Ball([0.0, 0.0], 1.0).sample_interior(600, draw_with(method))
    assert abs(disk[:, 0].mean()) < 0.05 and disk[:, 0].max() > 0.9, method
    ell_union = Union([Box([0.0, 0.0], [1.0, 2.0]), Box([0.0, 0.0], [2.0, 1.0])])  # perimeter 8
    edge, _ = ell_union.sample_boundary(800, draw_with(method))
    assert abs(np.isclose(edge[:, 1], 2.0).sum() / 800 - 1 / 8) < 0.04, method  # the top edge, length 1


def test_an_empty_or_thin_region_is_one_error_line_at_once_and_draws_are_bounded(monkeypatch):
    """A Difference removing the whole region drew towards COUNT x 2^24 candidates for minutes (GBs), then a bare
    ValueError; now a ConfigError naming the geometry after a few rounds, every draw at most BATCH."""
    from scepter_like.data import geometry

    square = {'NAME': 'Rectangle', 'LOW': [0, 0], 'HIGH': [1, 1]}
    interior, wall = {'KIND': 'interior', 'COUNT': 1000}, {'KIND': 'boundary', 'COUNT': 1, 'CONDITIONS': DIRICHLET}
    for cut_high, point_set in [(2, interior), (2, wall), (0.9999999, interior)]:  # empty (no boundary), a sliver
        region = {'NAME': 'Difference', 'OF': [square, {'NAME': 'Rectangle', 'LOW': [-1, -1], 'HIGH': [2, cut_high]}]}
        with pytest.raises(
            ConfigError, match=r'^SOLVER\.TRAIN_DATA\.GEOMETRY: the region is empty or too thin to sample: none of'
        ):
            point_sets({'s': point_set}, geometry=region)
    sizes = []

    def half(m):  # every other candidate inside
        sizes.append(m)
        return np.arange(m, dtype=float), np.arange(m) % 2 == 0

    monkeypatch.setattr(geometry, 'BATCH', 64)
    points = geometry.rejection_sample(1000, half)
    assert len(points) == 1000 and max(sizes) == 64  # past BATCH, draws of BATCH add up
    monkeypatch.setattr(geometry, 'BUDGET', 1000)
    monkeypatch.setattr(geometry, 'TRIAL', 128)
    with pytest.raises(ConfigError, match=r'^G: .*: 64 of 128 random .*, so 1000 points would need about 2e\+03'):
        geometry.rejection_sample(1000, half, 'G')


def test_a_boundary_set_on_one_side_of_an_axis():
    """DeepXDE's on_boundary filter (x = 0 only): FACES x_low; x names both faces of the axis."""
    wall = {'KIND': 'boundary', 'COUNT': 40, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 0}]}
    for faces, expect in [(['x_low'], {(0, 0.0)}), (['x_high', 'y_low'], {(0, 1.0), (1, 0.0)})]:
        batch = point_sets({'w': {**wall, 'FACES': faces}}, geometry={'NAME': 'Rectangle'}).take([0])
        x, n = batch['w.x'].numpy(), batch['w.normal'].numpy()
        on = set()
        for point, normal in zip(x, n):
            (axis,) = np.flatnonzero(normal)  # one face, its outward normal
            assert normal[axis] == (1.0 if point[axis] == 1.0 else -1.0)
            on.add((int(axis), float(point[axis])))
        assert on == expect, faces
    with pytest.raises(ConfigError, match=r"FACES: \['x_lo'\] name no faces; choose from .*did you mean x_low"):
        point_sets({'w': {**wall, 'FACES': ['x_lo']}}, geometry={'NAME': 'Rectangle'})


def test_deepxde_sin_activation_and_glorot_uniform_init():
    torch.manual_seed(0)
    net = MODELS.build(
        {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [50], 'OUT_DIM': 1, 'ACTIVATION': 'sin', 'INIT': 'glorot_uniform'}
    )
    first, last = net[0], net[2]
    bound = math.sqrt(6 / (2 + 50))  # Xavier uniform: U(-b, b), b = sqrt(6 / (fan_in + fan_out))
    assert first.weight.abs().max() <= bound and first.weight.abs().max() > 0.9 * bound
    assert not first.bias.any() and not last.bias.any()
    x = torch.rand(5, 2)
    torch.testing.assert_close(net(x), last(torch.sin(first(x))))
