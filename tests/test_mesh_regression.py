"""Mesh regression (tasks/mesh_regression): message passing, graph batches, statistics, bad input."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO, run_tool, tool_env

import tasks.mesh_regression  # noqa: F401  (registrations)
from scepter_like.config import Config
from scepter_like.data.registry import DATASETS
from scepter_like.model.registry import MODELS
from tasks.mesh_regression.collate import collate_graphs
from tasks.mesh_regression.generate import GenerationSpec, write_dataset
from tasks.mesh_regression.metric import MeshRMSEMetric
from tasks.mesh_regression.stats import compute_stats

TINY = {'SEED': 3, 'SUBJECTS': 4, 'PHASES': 2, 'PCA_MODES': 2, 'LEVELS': [1, 2], 'VAL_SUBJECTS': 1, 'TEST_SUBJECTS': 1}


def identity_stats(n_features, n_target):
    return {
        'feature_mean': [0.0] * n_features,
        'feature_scale': [1.0] * n_features,
        'target_mean': [0.0] * n_target,
        'target_scale': 1.0,
    }


@pytest.fixture(scope='module')
def tiny_manifest(tmp_path_factory):
    spec = GenerationSpec(**{k.lower(): v for k, v in TINY.items()})
    return write_dataset(tmp_path_factory.mktemp('mesh') / 'data', spec)


def mesh_config(manifest, work_dir, model=None, **solver):
    data = {'NAME': 'MeshDataset', 'MANIFEST': str(manifest), 'BATCH_SIZE': 2}
    cfg = {
        'NAME': 'MeshRegressionSolver',
        'WORK_DIR': str(work_dir),
        'MAX_EPOCHS': 1,
        'MODEL': model or {'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'PROCESSOR_BLOCKS': 1},
        'OPTIMIZER': {'NAME': 'Adam', 'LEARNING_RATE': 0.001},
        'TRAIN_DATA': dict(data, SPLIT='train'),
        'EVAL_DATA': dict(data, SPLIT='val', SHUFFLE=False),
        'METRICS': [{'NAME': 'MeshRMSEMetric'}],
        'TRAIN_HOOKS': [{'NAME': 'BackwardHook'}],
    }
    cfg.update(solver)
    return {'ENV': {'SEED': 0, 'NUM_THREADS': 1}, 'IMPORTS': ['tasks.mesh_regression'], 'SOLVER': cfg}


def write_config(path, cfg):
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.parametrize('aggregation', ['sum', 'mean'])
def test_message_passing_matches_hand_computation(aggregation):
    """One block on a 4-vertex graph (a one-way edge, a two-way edge, an isolated vertex) against loops over edges."""
    torch.manual_seed(0)
    model = MODELS.build(
        {'NAME': 'MeshGraphNet', 'HIDDEN': 4, 'PROCESSOR_BLOCKS': 1, 'AGGREGATION': aggregation}
        | {'STATS': identity_stats(5, 2) | {'target_mean': [0.5, -1.0], 'target_scale': 2.0}}
    ).eval()
    features = torch.randn(4, 5)
    edges = [(0, 1), (1, 2), (2, 1)]  # (sender, receiver); vertex 3 receives nothing
    edge_index = torch.tensor(edges).T
    with torch.no_grad():
        pred = model(features=features, edge_index=edge_index)['pred']
        enc_e = []
        for s, r in edges:
            rel = features[r, :3] - features[s, :3]
            enc_e.append(model.edge_encoder(torch.cat([rel, rel.norm().view(1)])))
        h = [model.node_encoder(features[v]) for v in range(4)]
        block = model.processor[0]
        new_e = [e + block.edge_mlp(torch.cat([e, h[s], h[r]])) for e, (s, r) in zip(enc_e, edges)]
        expected = []
        for v in range(4):
            incoming = [e for e, (_, r) in zip(new_e, edges) if r == v]
            agg = sum(incoming) if incoming else torch.zeros(4)
            if aggregation == 'mean' and incoming:
                agg = agg / len(incoming)
            h_v = h[v] + block.node_mlp(torch.cat([h[v], agg]))
            expected.append(model.decoder(h_v) * 2.0 + torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(pred, torch.stack(expected), rtol=1e-5, atol=1e-6)


def test_collate_offsets_edge_indices_by_vertex_counts():
    a = {'features': torch.zeros(3, 2), 'target': torch.zeros(3, 1), 'edge_index': torch.tensor([[0, 1], [1, 2]])}
    b = {'features': torch.ones(2, 2), 'target': torch.ones(2, 1), 'edge_index': torch.tensor([[1], [0]])}
    c = {'features': torch.full((4, 2), 2.0), 'target': torch.zeros(4, 1), 'edge_index': torch.tensor([[3], [0]])}
    batch = collate_graphs([a, b, c])
    assert batch['edge_index'].tolist() == [[0, 1, 4, 8], [1, 2, 3, 5]]
    assert batch['num_nodes'].tolist() == [3, 2, 4]
    assert batch['features'].shape == (9, 2) and batch['features'][3:5].eq(1).all()
    assert batch['target'].shape == (9, 1)


def test_dataset_batches_whole_graphs_through_the_named_collate(tiny_manifest):
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    batch = ds.__getitems__([0, len(ds) - 1])
    sizes = [len(ds[0]['features']), len(ds[len(ds) - 1]['features'])]
    assert batch['num_nodes'].tolist() == sizes and sizes[0] != sizes[1]  # levels 1 and 2: 42 and 162 vertices
    assert batch['edge_index'][:, ds[0]['edge_index'].shape[1] :].min() == sizes[0]


def test_statistics_come_from_the_training_split_only(tiny_manifest):
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    stats = ds.normalisation_stats()
    folder = os.path.dirname(tiny_manifest)
    rows = [line.split(',') for line in open(tiny_manifest).read().splitlines()[1:]]
    targets = {split: [] for split in ('train', 'val', 'test')}
    for _, _, _, split, name in rows:
        with np.load(os.path.join(folder, name)) as f:
            targets[split].append(f['target'].astype(np.float64))
    train = np.concatenate(targets['train'])
    np.testing.assert_allclose(stats.target_mean, train.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.target_scale, np.sqrt(((train - train.mean(0)) ** 2).mean()), rtol=1e-12)
    every = np.concatenate([t for ts in targets.values() for t in ts])
    assert stats.target_scale != pytest.approx(np.sqrt(((every - every.mean(0)) ** 2).mean()), rel=1e-3)
    assert stats.samples == len(targets['train']) and stats.feature_names[-1] == 'stage'


def test_statistics_are_identical_on_two_ranks(tiny_manifest, tmp_path):
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(tiny_manifest, tmp_path / 'run'))
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={port}']
    cmd += [os.path.join(REPO, 'tests', 'mesh_stats_probe.py'), cfg, str(tmp_path)]
    res = subprocess.run(cmd, cwd=REPO, env=tool_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = [json.loads((tmp_path / f'rank{r}.json').read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]
    saved = json.loads((tmp_path / 'run' / 'stats.json').read_text())
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    assert saved == compute_stats(ds.samples).to_dict()
    np.testing.assert_allclose(ranks[0]['feature_mean'], saved['feature_mean'], rtol=1e-6)


def test_description_rebuilds_the_same_model(tiny_manifest):
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'val'})
    batch = ds.__getitems__(list(range(len(ds))))
    for model_cfg in ({'NAME': 'MeshGraphNet', 'HIDDEN': 8}, {'NAME': 'MeshMLP', 'HIDDEN_DIMS': [8, 8]}):
        model = MODELS.build(model_cfg | {'STATS': ds.normalisation_stats().to_dict()}).eval()
        desc = json.loads(json.dumps(model.describe()))
        rebuilt = type(model).from_description(desc).eval()
        rebuilt.load_state_dict(model.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(rebuilt(**batch)['pred'], model(**batch)['pred'], rtol=0, atol=0)
        assert type(rebuilt) is type(model) and type(model).COMPILE_INCOMPATIBLE is None


def test_rmse_metric_pools_batches_by_sums():
    pred, target = torch.randn(7, 3), torch.randn(7, 3)
    metric = MeshRMSEMetric(Config({'KEYS': ['pred', 'target']}))
    metric.update({'pred': pred[:2], 'target': target[:2]})
    metric.update({'pred': pred[2:], 'target': target[2:]})
    expected = (pred.double() - target.double()).pow(2).sum(1).mean().sqrt().item()
    assert metric.compute()['rmse'] == pytest.approx(expected, rel=1e-12)


def copy_dataset(manifest, tmp_path):
    folder = tmp_path / 'data'
    folder.mkdir()
    src = os.path.dirname(manifest)
    for name in os.listdir(src):
        (folder / name).write_bytes(open(os.path.join(src, name), 'rb').read())
    return folder


def assert_one_error_line(res, *words):
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith('error: ') and 'Traceback' not in res.stderr, res.stderr[-3000:]
    for word in words:
        assert word in lines[-1], lines[-1]


def test_manifest_naming_a_missing_file_is_one_error_line(tiny_manifest, tmp_path):
    folder = copy_dataset(tiny_manifest, tmp_path)
    rows = [line.split(',') for line in (folder / 'manifest.csv').read_text().splitlines()[1:]]
    name = next(row[-1] for row in rows if row[3] == 'train')
    (folder / name).unlink()
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(folder / 'manifest.csv', tmp_path / 'run'))
    assert_one_error_line(run_tool('run_train.py', '--cfg', cfg), name, 'missing file')


def test_sample_wider_than_the_statistics_is_one_error_line(tiny_manifest, tmp_path):
    """The val samples carry one PCA coefficient more than the training statistics know."""
    folder = copy_dataset(tiny_manifest, tmp_path)
    for line in (folder / 'manifest.csv').read_text().splitlines()[1:]:
        *_, split, name = line.split(',')
        if split == 'val':
            with np.load(folder / name) as f:
                arrays = dict(f)
            arrays['coefficients'] = np.append(arrays['coefficients'], np.float32(0.5))
            np.savez(folder / name, **arrays)
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(folder / 'manifest.csv', tmp_path / 'run'))
    assert_one_error_line(run_tool('run_train.py', '--cfg', cfg), 'normalisation statistics', '6 per vertex')


def test_evaluation_from_a_checkpoint_reproduces_the_training_rmse(tiny_manifest, tmp_path):
    """run_eval has no TRAIN_DATA: the model takes the run's stats.json, the checkpoint its weights."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1}]
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(tiny_manifest, tmp_path / 'run', TRAIN_HOOKS=hooks))
    res = run_tool('run_train.py', '--cfg', cfg)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()]
    trained = next(line['values']['rmse'] for line in lines if line['kind'] == 'eval')
    res = run_tool('run_eval.py', '--cfg', cfg, '--checkpoint', tmp_path / 'run')
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / 'run' / 'metrics.json').read_text())['eval']['rmse'] == trained


def test_make_mesh_dataset_writes_the_same_files_for_the_same_options(tmp_path):
    args = ['--subjects', 3, '--phases', 2, '--pca-modes', 2, '--levels', 1, '--val-subjects', 1, '--test-subjects', 1]
    for name in ('a', 'b'):
        res = run_tool('make_mesh_dataset.py', '--out', tmp_path / name, *args)
        assert res.returncode == 0, res.stderr
    names = sorted(os.listdir(tmp_path / 'a'))
    assert len(names) == 3 * 2 + 2 and names == sorted(os.listdir(tmp_path / 'b'))
    for name in names:
        assert (tmp_path / 'a' / name).read_bytes() == (tmp_path / 'b' / name).read_bytes(), name
    splits = [line.split(',')[3] for line in (tmp_path / 'a' / 'manifest.csv').read_text().splitlines()[1:]]
    assert sorted(set(splits)) == ['test', 'train', 'val'] and splits.count('train') == 2
    assert_one_error_line(run_tool('make_mesh_dataset.py', '--out', tmp_path / 'a', *args), 'already there')
