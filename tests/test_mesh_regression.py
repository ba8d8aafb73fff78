"""Mesh regression (tasks/mesh_regression): message passing, graph batches, statistics, bad input."""

import glob
import json
import logging
import os
import re

import numpy as np
import pytest
import torch
import yaml
from compile_support import COMPILED_GRAPHS, COUNTING_BACKEND
from conftest import REPO, run_cli, run_tool, run_train_killed_at, torchrun_pair
from helpers import assert_same

import tasks.mesh_regression  # noqa: F401  (registrations)
from scepter_like.config import Config
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.registry import METRICS
from scepter_like.model.description import architecture_differences
from scepter_like.model.registry import MODELS
from scepter_like.solver.compile import compile_model, compile_settings
from tasks.mesh_regression.collate import collate_graphs
from tasks.mesh_regression.generate import GenerationSpec, write_dataset
from tasks.mesh_regression.models import MeshGraphNet
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
    res = torchrun_pair(os.path.join(REPO, 'tests', 'mesh_stats_probe.py'), cfg, tmp_path)
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
    for model_cfg in (
        {'NAME': 'MeshGraphNet', 'HIDDEN': 8},
        {'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'TARGET_SCALE': 'per_channel', 'EDGE_FEATURES': 'standardised'},
        {'NAME': 'MeshMLP', 'HIDDEN_DIMS': [8, 8]},
        {'NAME': 'MeshMLP', 'HIDDEN_DIMS': [8, 8], 'TARGET_SCALE': 'per_channel'},
    ):
        model = MODELS.build(model_cfg | {'STATS': ds.normalisation_stats().to_dict()}).eval()
        desc = json.loads(json.dumps(model.describe()))
        rebuilt = type(model).from_description(desc).eval()
        rebuilt.load_state_dict(model.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(rebuilt(**batch)['pred'], model(**batch)['pred'], rtol=0, atol=0)
        assert type(rebuilt) is type(model) and type(model).COMPILE_INCOMPATIBLE is None


def test_per_channel_targets_and_standardised_edges_reach_the_network_standardised(tiny_manifest):
    """TARGET_SCALE per_channel: every normalised target channel has std 1; EDGE_FEATURES standardised: every column
    of the edge encoder's input has mean 0 and std 1 over the training graphs (raw: the coordinate differences)."""
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    batch = ds.__getitems__(list(range(len(ds))))
    stats = ds.normalisation_stats()
    std = np.concatenate([s['target'] for s in ds.samples]).astype(np.float64).std(0)
    varies = std > 1e-12  # at the tiny set's two phases the z displacement is 0 everywhere: its scale is 1
    assert varies.tolist() == [True, True, False]
    np.testing.assert_allclose(stats.target_std, np.where(varies, std, 1.0), rtol=1e-12)
    seen = {}
    for edges in ('raw', 'standardised'):
        model = MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'TARGET_SCALE': 'per_channel',
                              'EDGE_FEATURES': edges, 'STATS': stats.to_dict()})  # fmt: skip
        handle = model.edge_encoder.register_forward_pre_hook(lambda _, args, key=edges: seen.__setitem__(key, args[0]))
        with torch.no_grad():
            model(**batch)
        handle.remove()
        normalised = model.normaliser.target(batch['target']).double()
        varying = normalised[:, :2].std(0, correction=0)
        torch.testing.assert_close(varying, torch.ones(2, dtype=torch.float64), rtol=1e-4, atol=0)
        torch.testing.assert_close(model.normaliser.physical(normalised.float()), batch['target'], rtol=1e-5, atol=1e-4)
    columns = seen['standardised'].double()
    torch.testing.assert_close(columns.mean(0), torch.zeros(4, dtype=torch.float64), rtol=0, atol=1e-5)
    torch.testing.assert_close(columns.std(0, correction=0), torch.ones(4, dtype=torch.float64), rtol=1e-4, atol=0)
    raw_std = seen['raw'].double().std(0, correction=0)
    assert (raw_std < 0.5).all()  # differences of neighbouring normalised coordinates: far from unit scale
    torch.testing.assert_close((seen['raw'] - torch.tensor(stats.edge_mean)) / torch.tensor(stats.edge_scale),
                               seen['standardised'], rtol=1e-5, atol=1e-5)  # fmt: skip


def test_statistics_written_before_per_channel_scales_existed_are_one_error_line(tiny_manifest, tmp_path):
    """An older stats.json (no target_std, no edge statistics) still serves the defaults; the options name the fix."""
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    old = {
        k: v
        for k, v in ds.normalisation_stats().to_dict().items()
        if k not in ('target_std', 'edge_mean', 'edge_scale')
    }
    path = tmp_path / 'stats.json'
    path.write_text(json.dumps(old))
    MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'STATS_FILE': str(path)})
    for key, value, field in (
        ('TARGET_SCALE', 'per_channel', 'target_std'),
        ('EDGE_FEATURES', 'standardised', 'edge_mean'),
    ):
        with pytest.raises(DataError, match=f"MODEL.{key}: '{value}' needs {field} .* lack; train again"):
            MODELS.build(
                Config({'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'STATS_FILE': str(path), key: value}, path='MODEL')
            )


def test_a_description_written_before_the_normalisation_options_counts_as_their_defaults(tiny_manifest):
    """An older checkpoint's description lacks TARGET_SCALE and EDGE_FEATURES: it fits a default model and is
    refused, naming the key, by a model that scales per channel."""
    stats = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest}).normalisation_stats().to_dict()
    model = MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'STATS': stats})
    old = model.describe()
    for key in ('TARGET_SCALE', 'EDGE_FEATURES', 'PROCESSOR_CHECKPOINT_SEGMENTS'):
        del old['config'][key]
    assert architecture_differences(old, model) == []
    per_channel = MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'STATS': stats, 'TARGET_SCALE': 'per_channel'})
    expected = "MODEL.TARGET_SCALE: the file's 'shared', the config's 'per_channel'"
    assert architecture_differences(old, per_channel) == [expected]


def test_checkpointed_processor_gives_the_plain_gradients_and_keeps_fewer_activations(tiny_manifest):
    """PROCESSOR_CHECKPOINT_SEGMENTS 1 and 3 (of 3 blocks): the loss equals the plain model's and every gradient
    too, to float32 rounding; the autograd graph holds fewer bytes of saved tensors; a segment count that does not
    divide the blocks is refused."""
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    batch, stats = ds.__getitems__([0, 1, 2]), ds.normalisation_stats().to_dict()
    runs = {}
    for segments in (0, 1, 3):
        torch.manual_seed(0)
        model = MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 16, 'PROCESSOR_BLOCKS': 3, 'MLP_LAYERS': 2,
                              'PROCESSOR_CHECKPOINT_SEGMENTS': segments, 'STATS': stats})  # fmt: skip
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t, saved=saved: saved.append(t.nbytes) or t, lambda t: t):
            loss = model(**batch)['loss']
        loss.backward()
        runs[segments] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()}, sum(saved))
    plain_loss, plain_grads, plain_bytes = runs[0]
    for segments in (1, 3):
        loss, grads, saved_bytes = runs[segments]
        assert torch.equal(loss, plain_loss)
        assert grads.keys() == plain_grads.keys()
        for name, grad in grads.items():  # the same sums, a segment's input gradient added up in another order
            torch.testing.assert_close(grad, plain_grads[name], rtol=1e-5, atol=1e-7, msg=f'{segments}: {name}')
        assert saved_bytes < plain_bytes / 2, (segments, saved_bytes, plain_bytes)
    with pytest.raises(ConfigError, match='PROCESSOR_CHECKPOINT_SEGMENTS: 2 segments do not divide PROCESSOR_BLOCKS 3'):
        MODELS.build(
            {'NAME': 'MeshGraphNet', 'PROCESSOR_BLOCKS': 3, 'PROCESSOR_CHECKPOINT_SEGMENTS': 2, 'STATS': stats}
        )


@pytest.mark.slow
def test_graph_batches_of_every_size_train_through_one_compiled_graph(tiny_manifest):
    """SOLVER.COMPILE marks the vertex and edge counts dynamic (MeshModel.DYNAMIC_DIMS): batches of three sizes
    compile one graph; without the marks the second size compiles a second graph (dynamic from then on)."""
    ds = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest, 'SPLIT': 'train'})
    last = len(ds) - 1
    settings = compile_settings(Config({'COMPILE': {'ENABLED': True, 'BACKEND': COUNTING_BACKEND}}, path='SOLVER'))
    for dynamic_dims, graphs in ((MeshGraphNet.DYNAMIC_DIMS, 1), ({}, 2)):
        torch._dynamo.reset()
        COMPILED_GRAPHS.clear()
        model = MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 8, 'STATS': ds.normalisation_stats().to_dict()})
        model.DYNAMIC_DIMS = dynamic_dims
        compile_model(model, settings, logging.getLogger('test'))
        batches = [ds.__getitems__(indices) for indices in ([0], [last], [0, last])]  # fresh tensors: no marks
        assert len({len(b['features']) for b in batches}) == 3
        for batch in batches:
            model(**batch)['loss'].backward()
        assert len(COMPILED_GRAPHS) == graphs, dynamic_dims
    torch._dynamo.reset()


def test_rmse_metric_pools_batches_by_sums():
    pred, target = torch.randn(7, 3), torch.randn(7, 3)
    metric = METRICS.build({'NAME': 'MeshRMSEMetric'})
    metric.update({'pred': pred[:2], 'target': target[:2]})
    metric.update({'pred': pred[2:], 'target': target[2:]})
    expected = (pred.double() - target.double()).pow(2).sum(1).mean().sqrt().item()
    assert metric.compute()['rmse'] == pytest.approx(expected, rel=1e-12)


def test_rmse_metric_reports_each_named_channel_and_save_best_by_can_pick_one(tiny_manifest, tmp_path):
    pred, target = torch.randn(7, 2), torch.randn(7, 2) * torch.tensor([1.0, 1000.0])  # K beside Pa
    metric = METRICS.build({'NAME': 'MeshRMSEMetric', 'CHANNELS': ['T', 'p']})
    metric.update({'pred': pred[:3], 'target': target[:3]})
    metric.update({'pred': pred[3:], 'target': target[3:]})
    values = metric.compute()
    per_channel = (pred.double() - target.double()).pow(2).mean(0).sqrt()
    assert list(values) == ['rmse', 'rmse_T', 'rmse_p'] and metric.lower_is_better == ('rmse', 'rmse_T', 'rmse_p')
    assert [values['rmse_T'], values['rmse_p']] == pytest.approx(per_channel.tolist(), rel=1e-12)
    assert values['rmse'] == pytest.approx(per_channel.pow(2).sum().sqrt().item(), rel=1e-12)
    with pytest.raises(ConfigError, match=r"CHANNELS: names 2 channels \['T', 'p'\]; the target has 3"):
        metric.update({'pred': torch.zeros(4, 3), 'target': torch.zeros(4, 3)})
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'SAVE_BEST_BY': '-rmse_y'}]
    cfg = mesh_config(tiny_manifest, tmp_path / 'run', TRAIN_HOOKS=hooks)
    cfg['SOLVER']['METRICS'] = [{'NAME': 'MeshRMSEMetric', 'CHANNELS': ['x', 'y', 'z']}]
    res = run_cli('run_train.py', '--cfg', write_config(tmp_path / 'cfg.yaml', cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    evaluated = [json.loads(line) for line in (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()]
    assert {'rmse', 'rmse_x', 'rmse_y', 'rmse_z'} <= set(next(e['values'] for e in evaluated if e['kind'] == 'eval'))
    assert 'new best rmse_y' in res.stdout, res.stdout[-3000:]


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
    assert_one_error_line(run_cli('run_train.py', '--cfg', cfg), name, 'missing file')


def test_test_samples_wider_than_the_statistics_are_one_error_line_before_training(tiny_manifest, tmp_path):
    """The test samples carry one PCA coefficient more than the training statistics know: refused before training
    (stats.json is written when it starts), not by the model after the last epoch."""
    folder = copy_dataset(tiny_manifest, tmp_path)
    for line in (folder / 'manifest.csv').read_text().splitlines()[1:]:
        *_, split, name = line.split(',')
        if split == 'test':
            with np.load(folder / name) as f:
                arrays = dict(f)
            arrays['coefficients'] = np.append(arrays['coefficients'], np.float32(0.5))
            np.savez(folder / name, **arrays)
    cfg = mesh_config(folder / 'manifest.csv', tmp_path / 'run')
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'], SPLIT='test')
    res = run_cli('run_train.py', '--cfg', write_config(tmp_path / 'cfg.yaml', cfg))
    assert_one_error_line(
        res, "SOLVER.TEST_DATA: its features have 7 value(s) per vertex, the training data's 6 (x, y, z, pca_c1"
    )
    assert not (tmp_path / 'run' / 'stats.json').exists()


def test_a_manifest_stage_other_than_the_files_is_one_data_error(tiny_manifest, tmp_path):
    """The model reads the file's stage (run_inference has no manifest): a manifest that says another is wrong
    somewhere, not a column to ignore; a value rounded to six decimals, as generate writes it, agrees."""
    folder = copy_dataset(tiny_manifest, tmp_path)
    lines = (folder / 'manifest.csv').read_text().splitlines()
    number, row = next((n, line.split(',')) for n, line in enumerate(lines) if ',val,' in line)
    with np.load(folder / row[4]) as f:
        held = float(f['stage'])
    data = {'NAME': 'MeshDataset', 'MANIFEST': str(folder / 'manifest.csv'), 'SPLIT': 'val'}
    for stage, agrees in ((f'{held:.6f}', True), (f'{held + 0.25:.6f}', False), ('', False)):
        lines[number] = ','.join([*row[:2], stage, *row[3:]])
        (folder / 'manifest.csv').write_text('\n'.join(lines) + '\n')
        if agrees:
            DATASETS.build(data)
            continue
        # the row's number in the manifest (its header line 0), not in the val split
        with pytest.raises(DataError, match=rf"row {number} \({row[0]}, phase {row[1]}\) has stage '{stage}', but"):
            DATASETS.build(data)


def test_eval_samples_that_training_reads_too_are_said_in_a_warning(tiny_manifest, tmp_path):
    """A val file listed as a training row too, or EVAL_DATA reading the train split: its rmse is no measure of
    unseen meshes (a fit check may want it: a warning)."""
    from tasks.mesh_regression.dataset import shared_samples

    folder = copy_dataset(tiny_manifest, tmp_path)
    lines = (folder / 'manifest.csv').read_text().splitlines()
    val = next(line for line in lines if line.split(',')[3] == 'val').split(',')
    leaked = ','.join(['subject999', *val[1:3], 'train', val[4]])
    (folder / 'manifest.csv').write_text('\n'.join([*lines, leaked]) + '\n')
    data = {'NAME': 'MeshDataset', 'MANIFEST': str(folder / 'manifest.csv')}
    train, other = DATASETS.build(data), DATASETS.build(dict(data, SPLIT='val'))
    assert shared_samples(train, other) == f'1 file(s) (the first: {os.path.realpath(folder / val[4])})'
    assert shared_samples(train, DATASETS.build(dict(data, SPLIT='test'))) == ''

    cfg = mesh_config(tiny_manifest, tmp_path / 'run')
    cfg['SOLVER']['EVAL_DATA']['SPLIT'] = 'train'
    res = run_cli('run_train.py', '--cfg', write_config(tmp_path / 'cfg.yaml', cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    warnings = [line for line in res.stdout.splitlines() if 'with TRAIN_DATA: its rmse measures the fit' in line]
    assert len(warnings) == 1 and 'SOLVER.EVAL_DATA shares 4 file(s) (the first: ' in warnings[0], res.stdout[-2000:]
    assert 'and 2 subject(s) (the first: subject' in warnings[0]


def test_eval_targets_of_another_width_are_one_error_line_and_a_refused_run_writes_no_statistics(
    tiny_manifest, tmp_path
):
    folder = copy_dataset(tiny_manifest, tmp_path)
    for line in (folder / 'manifest.csv').read_text().splitlines()[1:]:
        *_, split, name = line.split(',')
        if split == 'val':
            with np.load(folder / name) as f:
                arrays = dict(f)
            arrays['target'] = arrays['target'][:, :1]  # one channel of three
            np.savez(folder / name, **arrays)
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(folder / 'manifest.csv', tmp_path / 'run'))
    assert_one_error_line(run_cli('run_train.py', '--cfg', cfg), 'SOLVER.EVAL_DATA: its targets have 1 value(s)')
    assert not (tmp_path / 'run' / 'stats.json').exists()
    metric = METRICS.build({'NAME': 'MeshRMSEMetric'})
    with pytest.raises(DataError, match=r'the prediction is \[4, 3\] and the target \[4, 1\]'):
        metric.update({'pred': torch.zeros(4, 3), 'target': torch.zeros(4, 1)})


def test_evaluation_from_a_checkpoint_reproduces_the_training_rmse(tiny_manifest, tmp_path):
    """run_eval has no TRAIN_DATA: the model takes the run's stats.json, the checkpoint its weights."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1}]
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(tiny_manifest, tmp_path / 'run', TRAIN_HOOKS=hooks))
    res = run_cli('run_train.py', '--cfg', cfg)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()]
    trained = next(line['values']['rmse'] for line in lines if line['kind'] == 'eval')
    res = run_cli('run_eval.py', '--cfg', cfg, '--checkpoint', tmp_path / 'run')
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / 'run' / 'metrics.json').read_text())['eval']['rmse'] == trained


def test_make_mesh_dataset_writes_the_same_files_for_the_same_options(tmp_path):
    """The same bytes from a process of its own and from this one (another process's state)."""
    args = ['--subjects', 3, '--phases', 2, '--pca-modes', 2, '--levels', 1, '--val-subjects', 1, '--test-subjects', 1]
    for name, run in (('a', run_tool), ('b', run_cli)):
        res = run('make_mesh_dataset.py', '--out', tmp_path / name, *args)
        assert res.returncode == 0, res.stderr
    names = sorted(os.listdir(tmp_path / 'a'))
    assert len(names) == 3 * 2 + 2 and names == sorted(os.listdir(tmp_path / 'b'))
    for name in names:
        assert (tmp_path / 'a' / name).read_bytes() == (tmp_path / 'b' / name).read_bytes(), name
    splits = [line.split(',')[3] for line in (tmp_path / 'a' / 'manifest.csv').read_text().splitlines()[1:]]
    assert sorted(set(splits)) == ['test', 'train', 'val'] and splits.count('train') == 2
    assert_one_error_line(run_cli('make_mesh_dataset.py', '--out', tmp_path / 'a', *args), 'already there')


# -- self-describing checkpoints: inference and export from the file alone ------------------------


@pytest.fixture(scope='module')
def trained_mesh(tiny_manifest, tmp_path_factory):
    """(config path, work dir) of a one-epoch MeshGraphNet run with an epoch checkpoint.

    EVAL_DATA has batches of one graph, the batches run_inference feeds, so the same
    arithmetic runs in both (a batch of several graphs may sum in another order).
    """
    tmp = tmp_path_factory.mktemp('mesh_trained')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1}]
    cfg = mesh_config(tiny_manifest, tmp / 'run', TRAIN_HOOKS=hooks)
    cfg['SOLVER']['EVAL_DATA']['BATCH_SIZE'] = 1
    path = write_config(tmp / 'cfg.yaml', cfg)
    res = run_cli('run_train.py', '--cfg', path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert re.search(r'decoder +Sequential +[\d,]+ +\[\d+, 3\]', res.stdout)  # the summary's sample is a graph batch
    return path, tmp / 'run'


def split_files(manifest, split):
    rows = [line.split(',') for line in open(manifest).read().splitlines()[1:]]
    return [os.path.join(os.path.dirname(manifest), row[4]) for row in rows if row[3] == split]


def test_inference_from_the_checkpoint_alone_reproduces_the_evaluation_rmse(tiny_manifest, trained_mesh, tmp_path):
    """No --cfg: the model comes from the checkpoint's description; the val sample files go in as users write them.
    The first sample and the exported file infer in a process of their own, which has imported nothing of the task:
    the description's imports build the model."""
    _, work = trained_mesh
    lines = [json.loads(line) for line in (work / 'metrics.jsonl').read_text().splitlines()]
    evaluated = next(line['values']['rmse'] for line in lines if line['kind'] == 'eval')
    checkpoint = work / 'checkpoints' / 'checkpoint-epoch-1.pth'
    description = torch.load(checkpoint, weights_only=True)['model_description']
    assert description['architecture'] == 'MeshGraphNet' and description['imports'] == ['tasks.mesh_regression.models']
    assert 'STATS' not in description['config'] and len(description['stats']['feature_mean']) == 6

    metric = METRICS.build({'NAME': 'MeshRMSEMetric'})
    outputs = []
    for i, sample in enumerate(split_files(tiny_manifest, 'val')):  # the eval order: the manifest's
        out = tmp_path / f'y{i}.npz'
        run = run_tool if i == 0 else run_cli
        res = run('run_inference.py', '--checkpoint', work, '--input', sample, '--output', out, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        with np.load(out) as y:
            outputs.append(dict(y))
        assert outputs[-1]['pred'].shape == outputs[-1]['target'].shape == (len(np.load(sample)['points']), 3)
        metric.update({k: torch.from_numpy(v) for k, v in outputs[-1].items()})
    assert metric.compute()['rmse'] == evaluated  # exact

    # export without --cfg: the .safetensors carries the description too, and infers the same
    exported = tmp_path / 'export' / 'mgn.safetensors'
    res = run_cli('export.py', '--checkpoint', checkpoint, '--format', 'safetensors', '--output', exported)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not exported.with_suffix('.yaml').exists()  # no config to write beside it
    res = run_tool('run_inference.py', '--checkpoint', exported, '--input', split_files(tiny_manifest, 'val')[0],
                   '--output', tmp_path / 'z.npz')  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(tmp_path / 'z.npz') as z:
        np.testing.assert_array_equal(z['pred'], outputs[0]['pred'])


def test_evaluation_and_inference_with_a_config_take_the_checkpoints_statistics_without_a_stats_json(
    tiny_manifest, trained_mesh, tmp_path
):
    """A WORK_DIR without stats.json (another folder, a copied checkpoint): the checkpoint's normaliser buffers,
    which its description holds, serve, as they do without --cfg."""
    cfg, work = trained_mesh
    lines = [json.loads(line) for line in (work / 'metrics.jsonl').read_text().splitlines()]
    evaluated = next(line['values']['rmse'] for line in lines if line['kind'] == 'eval')
    elsewhere = f'SOLVER.WORK_DIR={tmp_path / "eval"}'
    res = run_cli('run_eval.py', '--cfg', cfg, '--checkpoint', work, elsewhere)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / 'eval' / 'metrics.json').read_text())['eval']['rmse'] == evaluated
    sample = split_files(tiny_manifest, 'val')[0]
    for args in ([], ['--cfg', cfg, elsewhere]):
        out = tmp_path / f'y{len(args)}.npz'
        res = run_cli('run_inference.py', '--checkpoint', work, '--input', sample, '--output', out, *args)
        assert res.returncode == 0, res.stderr[-3000:]
    with np.load(tmp_path / 'y0.npz') as alone, np.load(tmp_path / 'y3.npz') as configured:
        np.testing.assert_array_equal(alone['pred'], configured['pred'])


def test_checkpoint_of_another_architecture_is_one_error_line(trained_mesh, tmp_path):
    """AGGREGATION changes no weight shape: without the description check the weights would load silently."""
    cfg, work = trained_mesh
    res = run_cli('run_eval.py', '--cfg', cfg, '--checkpoint', work, 'SOLVER.MODEL.AGGREGATION=mean',
                   f'SOLVER.WORK_DIR={work}', 'SOLVER.MODEL.MLP_LAYERS=2')  # fmt: skip
    assert_one_error_line(
        res, 'another architecture', "MODEL.AGGREGATION: the file's 'sum', the config's 'mean'", 'MLP_LAYERS: the'
    )
    # other config keys may differ: a data key is no architecture
    res = run_cli('run_eval.py', '--cfg', cfg, '--checkpoint', work, f'SOLVER.WORK_DIR={work}',
                   'SOLVER.EVAL_DATA.BATCH_SIZE=2')  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]


def test_unknown_compile_key_is_one_error_line(tiny_manifest, tmp_path):
    cfg = write_config(tmp_path / 'cfg.yaml', mesh_config(tiny_manifest, tmp_path / 'run'))
    res = run_cli('run_train.py', '--cfg', cfg, 'SOLVER.COMPILE.ENABLED=true', 'SOLVER.COMPILE.FULL_GRAPH=true')
    assert_one_error_line(res, 'SOLVER.COMPILE.FULL_GRAPH: unknown key', 'did you mean FULLGRAPH')
    assert not (tmp_path / 'run' / 'checkpoints').exists()


# -- resume and distributed with variable-size graph batches --------------------------------------

RESUME_DATA = {
    'SEED': 5,
    'SUBJECTS': 6,
    'PHASES': 2,
    'PCA_MODES': 2,
    'LEVELS': [1, 2],
    'VAL_SUBJECTS': 1,
    'TEST_SUBJECTS': 1,
}  # fmt: skip  (8 training graphs of 42 and 162 vertices)


@pytest.fixture(scope='module')
def resume_manifest(tmp_path_factory):
    spec = GenerationSpec(**{k.lower(): v for k, v in RESUME_DATA.items()})
    return write_dataset(tmp_path_factory.mktemp('mesh_resume') / 'data', spec)


def test_kill_and_resume_with_graph_batches_is_bit_exact(resume_manifest, tmp_path):
    """Batches of 2 shuffled graphs (84, 204 or 324 vertices), 4 steps an epoch, 3 epochs; SIGKILLed after
    steps 7 and 11, each time resumed (RESUME_FROM=auto) from the mid-epoch step checkpoint before it."""
    support = os.path.join(REPO, 'tests', 'ckpt_support.py')
    hooks = [
        {'NAME': 'BackwardHook', 'GRADIENT_CLIP': 1.0},
        {'NAME': 'LrHook', 'SET_BY_EPOCH': False},
        {'NAME': 'CheckpointHook', 'INTERVAL': 1, 'STEP_INTERVAL': 3, 'KEEP_LAST': 2, 'SAVE_LAST': True},
        {'NAME': 'KillHook'},
    ]
    cfg = mesh_config(resume_manifest, tmp_path / 'unused', TRAIN_HOOKS=hooks, MAX_EPOCHS=3)
    cfg['SOLVER']['LR_SCHEDULER'] = {'NAME': 'CosineAnnealingLR', 'T_MAX': 12}
    cfg['ENV']['DETERMINISTIC'] = True
    path = write_config(tmp_path / 'cfg.yaml', cfg)

    def train(work, kill='', resume=False):
        args = ['--cfg', path, '--import', support, f'SOLVER.WORK_DIR={work}']
        return run_train_killed_at(kill, *args, *(['SOLVER.RESUME_FROM=auto'] if resume else []))

    assert train(tmp_path / 'alone').returncode == 0
    folder = tmp_path / 'chain' / 'checkpoints'
    resumed = {
        1: 'checkpoint-step-6.pth after step 6: goes on at epoch 2, iter 3',
        2: 'checkpoint-step-9.pth after step 9: goes on at epoch 3, iter 2',
    }
    for i, kill in enumerate(['train:7', 'train:11', '']):
        res = train(tmp_path / 'chain', kill, resume=i > 0)
        assert res.returncode == (-9 if kill else 0), res.stderr[-3000:]
        if i > 0:
            assert f'resumed from {folder}/{resumed[i]}\n' in res.stdout, res.stdout[-3000:]

    def final(work):
        ckpt = torch.load(work / 'checkpoints' / 'checkpoint-last.pth', weights_only=True)
        ckpt.pop('meta')
        return ckpt

    assert_same(final(tmp_path / 'alone'), final(tmp_path / 'chain'))


def test_nonfinite_loss_on_one_rank_skips_on_both_with_graphs_compiled(resume_manifest, tmp_path):
    """2-process torchrun, batches of one graph per rank (sizes differ between ranks), COMPILE (aot_eager) after
    the DDP wrap, accumulation of 2 under DDP's no_sync, bf16 autocast; rank 1's loss is NaN at step 3."""
    probe = os.path.join(REPO, 'tests', 'dist_probe.py')
    hooks = [
        {'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2, 'USE_AMP': True, 'NONFINITE_POLICY': 'skip'},
        {'NAME': 'DistProbeHook', 'OUT': str(tmp_path / 'probe'), 'NAN_STEPS': [3], 'NAN_RANK': 1},
    ]
    cfg = mesh_config(resume_manifest, tmp_path / 'run', TRAIN_HOOKS=hooks, MAX_EPOCHS=2, EVAL_DATA=None, METRICS=[])
    cfg['SOLVER']['TRAIN_DATA']['BATCH_SIZE'] = 1
    cfg['SOLVER']['COMPILE'] = {'ENABLED': True, 'BACKEND': 'aot_eager', 'DYNAMIC': True}  # one graph for all sizes
    path = write_config(tmp_path / 'cfg.yaml', cfg)
    options = ['--log-dir', tmp_path / 'logs', '--redirects', '3']
    run_train = os.path.join(REPO, 'tools', 'run_train.py')
    res = torchrun_pair(run_train, '--cfg', path, '--import', probe, options=options, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    logs = [open(f).read() for f in sorted(glob.glob(str(tmp_path / 'logs' / '*' / 'attempt_0' / '*' / 'stdout.log')))]
    assert len(logs) == 2
    for log in logs:
        assert 'non-finite loss at step 4: optimizer step skipped (1 in a row, 1 in all)' in log, log[-3000:]
    assert 'torch.compile: first forward of MeshGraphNet' in logs[0] and 'running eager' not in logs[0]
    ranks = [torch.load(tmp_path / 'probe' / f'rank{r}.pt', weights_only=False) for r in (0, 1)]
    for r in ranks:  # 8 graphs / 2 ranks = 4 micro-steps an epoch: 2 optimizer steps planned, each one all-reduce;
        # the group with the NaN was skipped, so 3 taken
        assert (r['total_iter'], r['optimizer_steps'], r['allreduces'], r['failed']) == (8, 3, 4, None)
    assert_same(ranks[0]['weights'], ranks[1]['weights'], 'weights')
    assert all(torch.isfinite(v).all() for v in ranks[0]['weights'].values())


@pytest.mark.parametrize(
    'change, message',
    [
        ({'stage': np.full(4, 0.5, np.float32)}, r'stage must be one number'),
        (
            {'edges': np.array([[0, 1, 1], [1, 2, 0]])},
            r'edges: 1 edge\(s\) are listed twice \(e\.g\. in both directions\)',
        ),
        ({'edges': np.array([[0.0, 1.0], [1.0, 2.0]])}, r'edges must be integer vertex indices; got float64'),
        (
            {'target': np.array([[0.0], [np.nan], [1.0], [2.0]])},
            r'target: NaN or inf in 1 row\(s\), the first at row 1 ',
        ),
        ({'coefficients': np.array([0.0, np.nan])}, r'coefficients: NaN or inf in 1 row\(s\), the first at row 1 '),
        ({'points': np.array([[0.0] * 3, [0.0, np.inf, 0.0], [0.0] * 3, [0.0] * 3])}, r'points: NaN or inf .* row 1 '),
        ({'stage': np.float64(np.nan)}, r'stage: NaN or inf in 1 row\(s\)'),
        ({'coefficients': np.array([1e39, 0.0])}, r'coefficients: NaN or inf .* row 0 '),  # beyond float32
        ({'edges': np.zeros((2, 0), np.int64)}, r'edges is \[2, 0\]: the mesh has no edges'),
        (  # per-vertex values, flattened, would be every vertex's features
            {'coefficients': np.zeros((4, 2))},
            r"coefficients must be \[N\], the sample's N numbers .*; got \(4, 2\)",
        ),
        (  # UTM metres at 5 cm spacing: float32 steps by 0.5 there
            {'points': np.array([[4.5e6 + 0.05 * i, 5.2e6, 0.0] for i in range(4)])},
            r'points: in float32, .* 3 of 3 edge\(s\) change length by more than 1 % \(3 become zero: .* subtract one',
        ),
        (
            {'edges': np.array([[0, 1, 2, 3], [1, 2, 3, 3]])},
            r'edges: 1 edge\(s\) join a vertex to itself, the first at column 3 ',
        ),
    ],
)
def test_a_malformed_sample_is_one_data_error_naming_it(change, message):
    from tasks.mesh_regression.dataset import sample_from_arrays

    arrays = {
        'points': np.zeros((4, 3), np.float32), 'coefficients': np.zeros(2, np.float32), 'stage': np.float32(0.5),
        'edges': np.array([[0, 1, 2], [1, 2, 3]]), 'target': np.zeros((4, 1), np.float32),
    }  # fmt: skip
    sample_from_arrays(arrays, 's.npz')  # as given: fine
    sample_from_arrays({**arrays, 'points': np.arange(12.0).reshape(4, 3) * 0.05 + 100.0}, 's.npz')  # float64: fine
    with pytest.raises(DataError, match=rf'^s\.npz: {message}'):
        sample_from_arrays({**arrays, **change}, 's.npz')


def test_inference_features_holding_nan_and_edge_indices_of_another_layout_are_one_data_error():
    """run_inference's other layout (features, edge_index named by batch key) is checked as a sample file is: an
    [E, 2] edge_index would be read as two edges, and an index past the vertices fail inside the model; an edge
    without its reverse, one listed twice or a self-loop give another prediction without a word."""
    from scepter_like.solver.predict import predict

    model = MODELS.build({'NAME': 'MeshGraphNet', 'HIDDEN': 4, 'PROCESSOR_BLOCKS': 1, 'STATS': identity_stats(5, 1)})
    features = np.zeros((3, 5), np.float32)
    edges = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])
    model.inputs_from_arrays({'features': features, 'edge_index': edges}, 'x.npz')  # as given: fine
    for bad, message in (
        (edges.T, r'edge_index must be \[2, E\] vertex indices below 3; got \[4, 2\]: transpose it$'),
        (np.array([[0, 1], [1, 3]]), r'edge_index must be \[2, E\] vertex indices below 3$'),
        (edges.astype(np.float32), r'edge_index must be integer vertex indices; got float32$'),
        (edges[:, ::2], r'edge_index: 2 edge\(s\) lack their reverse, the first at column 0 \(0-based: 0 -> 1 without'),
        (np.concatenate([edges, edges[:, :1]], 1), r'edge_index: 1 edge\(s\) are listed more than once .* column 4 '),
        (np.concatenate([edges, [[2], [2]]], 1), r'edge_index: 1 edge\(s\) join a vertex to itself'),
    ):
        with pytest.raises(DataError, match=rf'^x\.npz: {message}'):
            model.inputs_from_arrays({'features': features, 'edge_index': bad}, 'x.npz')
        with pytest.raises(DataError, match=rf'^predict input: {message}'):  # solver.predict's path
            predict(model, {'features': features, 'edge_index': torch.from_numpy(np.array(bad))}, 1, 'cpu')
    assert predict(model, {'features': features, 'edge_index': edges}, 1, 'cpu')['pred'].shape == (3, 1)
    features[2, 4] = np.nan
    with pytest.raises(DataError, match=r'^x\.npz: features: NaN or inf in 1 row\(s\), the first at row 2 '):
        model.inputs_from_arrays({'features': features, 'edge_index': edges}, 'x.npz')


def test_statistics_are_never_written_with_nonfinite_values(tiny_manifest, tmp_path):
    from tasks.mesh_regression.stats import save_stats

    stats = DATASETS.build({'NAME': 'MeshDataset', 'MANIFEST': tiny_manifest}).normalisation_stats()
    stats.target_mean[0] = float('nan')
    with pytest.raises(ValueError):
        save_stats(stats, str(tmp_path / 'stats.json'))
    assert not (tmp_path / 'stats.json').exists()


def test_resuming_on_data_of_other_statistics_keeps_the_checkpoints_in_stats_json_and_the_config(
    tiny_manifest, tmp_path
):
    """The model resumes with the checkpoint's normaliser buffers; stats.json and config.yaml must describe those."""
    shifted = copy_dataset(tiny_manifest, tmp_path)
    for name in split_files(str(shifted / 'manifest.csv'), 'train'):
        with np.load(name) as f:
            arrays = dict(f)
        arrays['target'] = arrays['target'] * 2.0 + 5.0  # the same widths, other statistics
        np.savez(name, **arrays)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 1}]
    cfg = mesh_config(tiny_manifest, tmp_path / 'run', TRAIN_HOOKS=hooks)
    assert run_cli('run_train.py', '--cfg', write_config(tmp_path / 'a.yaml', cfg)).returncode == 0
    first = json.loads((tmp_path / 'run' / 'stats.json').read_text())
    cfg['SOLVER'].update(MAX_EPOCHS=2, RESUME_FROM='auto')
    cfg['SOLVER']['TRAIN_DATA']['MANIFEST'] = str(shifted / 'manifest.csv')
    res = run_cli('run_train.py', '--cfg', write_config(tmp_path / 'b.yaml', cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    warnings = [line for line in res.stdout.splitlines() if "TRAIN_DATA's normalisation statistics differ" in line]
    assert len(warnings) == 1 and 'target_mean by up to' in warnings[0], res.stdout[-3000:]
    saved = json.loads((tmp_path / 'run' / 'stats.json').read_text())
    buffers = torch.load(tmp_path / 'run' / 'checkpoints' / 'checkpoint-epoch-2.pth', weights_only=True)['model']
    assert saved['target_mean'] == buffers['normaliser.target_mean'].tolist()
    np.testing.assert_allclose(saved['target_mean'], first['target_mean'], rtol=1e-6)
    recorded = yaml.safe_load((tmp_path / 'run' / 'config.yaml').read_text())['SOLVER']['MODEL']['STATS']
    assert recorded == saved


def test_a_manifest_that_generate_writes_is_said_in_a_warning(tmp_path, caplog):
    """A MANIFEST of one's own data, mistyped, under a config that keeps GENERATE (mgn.yaml as _BASE_), would
    train on synthetic meshes: the run says what it writes, once; a present manifest is read without a word."""
    manifest = tmp_path / 'mine' / 'manifest.csv'
    cfg = {'NAME': 'MeshDataset', 'MANIFEST': str(manifest), 'GENERATE': TINY}
    with caplog.at_level('WARNING'):
        DATASETS.build(cfg)
        DATASETS.build(cfg)
    said = [r.getMessage() for r in caplog.records if 'does not exist' in r.getMessage()]
    assert said == [
        f'MANIFEST: {manifest} does not exist: GENERATE writes the synthetic dataset there and the run trains on it;'
        ' for meshes of your own, point MANIFEST at their manifest.csv and drop GENERATE (GENERATE: {_delete_: true}'
        ' under a _BASE_ config that sets it)'
    ]
    assert manifest.is_file()
