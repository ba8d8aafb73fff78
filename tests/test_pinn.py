"""Physics-informed parts: derivatives, collocation sampling, loss aggregators, field metrics and plots."""

import json
import math
import os
import re

import numpy as np
import pytest
import torch
from conftest import REPO, run_cli, run_tool, torchrun_worker_values

from scepter_like.config import Config
from scepter_like.data import DATASETS
from scepter_like.errors import ConfigError, DataError, RegistryError
from scepter_like.model.derivatives import gradient, laplacian, partial
from scepter_like.model.loss_aggregators import LOSS_AGGREGATORS, aggregate_loss
from scepter_like.model.loss_aggregators.pcgrad import project_conflicting
from scepter_like.solver.hooks.field_plot import render_field

POISSON_CFG = os.path.join(REPO, 'configs', 'pinn', 'poisson2d.yaml')
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


# -- derivatives -----------------------------------------------------------------------------
def test_derivatives_match_analytic_function():
    x = torch.rand(50, 2, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    s, c, e = torch.sin(x[:, 0]), torch.cos(x[:, 0]), torch.exp(2 * x[:, 1])
    u = (a * s * e + x[:, 0] ** 3 * x[:, 1]).unsqueeze(1)  # [N, 1]
    x0, x1 = x[:, 0].detach(), x[:, 1].detach()
    lap = laplacian(u, x)
    torch.testing.assert_close(lap, 3 * a.detach() * s.detach() * e.detach() + 6 * x0 * x1)
    torch.testing.assert_close(
        gradient(u, x), torch.stack([a * c * e + 3 * x0**2 * x1, 2 * a * s * e + x0**3], 1).detach()
    )
    torch.testing.assert_close(partial(u, x, 0, 1), (2 * a * c * e + 3 * x0**2).detach())
    # create_graph: the Laplacian trains the parameters (d lap / d a = 3 sin(x) e^{2y})
    (da,) = torch.autograd.grad(lap.sum(), a)
    torch.testing.assert_close(da, (3 * s * e).sum().detach())


# -- the Poisson model --------------------------------------------------------------------------
def test_poisson_model_losses_and_outputs():
    import tasks.pinn  # noqa: F401  (registers PoissonPINN)
    from scepter_like.model import MODELS

    model = MODELS.build({'NAME': 'PoissonPINN', 'K': 2})
    data = DATASETS.build(
        {
            'NAME': 'PointSets',
            'GEOMETRY': {'NAME': 'Rectangle'},
            'SETS': {
                'pde': {'KIND': 'interior', 'COUNT': 6},
                'bc': {'KIND': 'boundary', 'COUNT': 4, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 0}]},
            },
        }
    )
    batch = data.take([0])
    out = model(**batch)
    assert set(out) == {'loss_pde', 'loss_bc'} and torch.isfinite(out['loss_pde'])
    x, u = batch['bc.x'], model.network(batch['bc.x'])
    torch.testing.assert_close(out['loss_bc'], u.pow(2).mean())
    model.eval()
    out = model(x=x)
    exact = torch.sin(2 * math.pi * x[:, 0]) * torch.sin(2 * math.pi * x[:, 1])
    torch.testing.assert_close(out['u_exact'][:, 0], exact)
    assert out['u'].shape == (4, 1) and out['x'] is x


# -- loss aggregators ------------------------------------------------------------------------
def aggregator(name, weights=None, seed=0, **keys):
    return LOSS_AGGREGATORS.build(Config({'NAME': name, **keys}), weights=weights, seed=seed)


def relobralo_reference(history, alpha, temperature, keeps):
    """The published weights for a sequence of loss vectors; ``keeps[t]`` is the draw of rho at step t."""

    def bal(now, ref):
        z = np.exp(now / (temperature * ref))
        return len(now) * z / z.sum()

    lam = np.ones(len(history[0]))
    out = [lam]
    for t in range(1, len(history)):
        rho = 1.0 if keeps[t] else 0.0
        hist = rho * lam + (1 - rho) * bal(history[t], history[0])
        lam = alpha * hist + (1 - alpha) * bal(history[t], history[t - 1])
        out.append(lam)
    return out


def test_relobralo_follows_its_definition_and_resumes():
    history = np.array([[1.0, 4.0], [0.8, 3.9], [0.3, 3.5], [0.35, 1.0], [0.2, 0.9], [0.1, 0.95]])
    agg = aggregator('Relobralo', seed=11, ALPHA=0.9, RHO=0.5, TEMPERATURE=0.5)
    keeps = [agg.keeps_history(t) for t in range(len(history))]
    assert True in keeps[1:] and False in keeps[1:]  # both branches of the lookback are exercised
    expected = relobralo_reference(history, 0.9, 0.5, keeps)
    params = torch.ones(2, dtype=torch.float64, requires_grad=True)
    for t, values in enumerate(history):
        terms = {'loss_pde': params[0] * values[0], 'loss_bc': params[1] * values[1]}
        loss = agg(terms, t)
        w = agg.weights()
        np.testing.assert_allclose([w['loss_pde'].item(), w['loss_bc'].item()], expected[t], rtol=1e-12)
        np.testing.assert_allclose(loss.item(), (expected[t] * values).sum(), rtol=1e-12)
        if t == 2:
            # the weights are constants: d loss / d params = lambda * L
            (grad,) = torch.autograd.grad(loss, params)
            np.testing.assert_allclose(grad.numpy(), expected[t] * values, rtol=1e-12)
            # another call at the same step (an L-BFGS closure) keeps this step's weights
            agg({'loss_pde': params[0] * 9.0, 'loss_bc': params[1] * 0.1}, t)
            np.testing.assert_allclose(agg.weights()['loss_pde'].item(), expected[t][0], rtol=1e-12)
            resumed = aggregator('Relobralo', seed=11, ALPHA=0.9, RHO=0.5, TEMPERATURE=0.5)
            resumed.load_state_dict(agg.state_dict())
    for t in range(3, len(history)):
        resumed({'loss_pde': torch.tensor(history[t][0]), 'loss_bc': torch.tensor(history[t][1])}, t)
    assert torch.equal(resumed.lambdas, agg.lambdas)


def test_sum_uses_loss_weights_and_checks_them():
    agg = aggregator('Sum', weights={'loss_bc': 10.0})
    loss = agg({'loss_pde': torch.tensor(2.0), 'loss_bc': torch.tensor(0.5)}, 0)
    assert loss.item() == 7.0 and agg.weights()['loss_bc'].item() == 10.0
    with pytest.raises(ConfigError, match='loss_ic'):
        aggregator('Sum', weights={'loss_ic': 1.0})({'loss_pde': torch.tensor(1.0)}, 0)
    with pytest.raises(RegistryError, match='Relobralo'):
        aggregator('Relobrallo')


def test_aggregate_loss_from_model_outputs():
    agg = aggregator('Relobralo', weights={'loss_bc': 2.0})
    results = {'loss_pde': torch.tensor(3.0), 'loss_bc': torch.tensor(0.5), 'u': torch.zeros(4)}
    loss = aggregate_loss(agg, results, 0)
    assert loss.item() == 4.0 and results['loss'] is loss  # step 0: lambda = 1
    assert results['weight_pde'].item() == 1.0 and results['weight_bc'].item() == 2.0
    given = {'loss': torch.tensor(7.0), 'loss_aux': torch.tensor(1.0)}
    assert aggregate_loss(agg, given, 1) is given['loss']  # a model's own loss wins
    with pytest.raises(DataError, match="no 'loss'"):
        aggregate_loss(agg, {'u': torch.zeros(1)}, 2)


def test_pcgrad_projects_conflicting_gradients():
    a, b = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([-1.0, 1.0], dtype=torch.float64)
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    agg = aggregator('PCGrad', weights={'loss_bc': 2.0})
    assert agg.performs_backward
    terms = {'loss_pde': w @ a, 'loss_bc': w @ b}
    loss = agg(terms, 0)
    assert loss.item() == 0.0 and w.grad is None
    agg.backward(terms, 0, [w])
    g1, g2 = a, 2.0 * b  # the gradients of the weighted terms; g1 . g2 < 0
    expected = (g1 - (g1 @ g2) / (g2 @ g2) * g2) + (g2 - (g2 @ g1) / (g1 @ g1) * g1)
    torch.testing.assert_close(w.grad, expected)
    assert torch.dot(w.grad, g1) >= 0 and torch.dot(w.grad, g2) >= 0  # conflicts removed
    agg.backward(terms, 1, [w])  # adds to .grad as a backward does
    torch.testing.assert_close(w.grad, 2 * expected)
    # no conflict: the plain sum
    same = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    torch.testing.assert_close(project_conflicting(same, [[1], [0]]).sum(0), same.sum(0))
    # three terms: each row is projected against the others in the drawn order
    agg3 = aggregator('PCGrad', seed=4)
    agg3.check_terms({'a': 0, 'b': 0, 'c': 0})
    orders = agg3.orders(5)
    assert sorted(map(sorted, orders)) == [[0, 1], [0, 2], [1, 2]] and orders == agg3.orders(5)


def test_pcgrad_zero_gradient_term_projects_nothing():
    # a term with a zero gradient (a hard-constrained boundary term, a LOSS_WEIGHTS 0 term) conflicts with
    # nothing: the others stay as they are, and no 0 / 0 makes the step NaN
    grads = torch.tensor([[1.0, -2.0], [0.0, 0.0], [-1.0, 0.5]])
    got = project_conflicting(grads, [[1, 2], [0, 2], [1, 0]])
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[1], torch.zeros(2))
    g0, g2 = grads[0], grads[2]  # the two real terms conflict: projected as without the zero row
    torch.testing.assert_close(got[0], g0 - (g0 @ g2) / (g2 @ g2) * g2)
    torch.testing.assert_close(got[2], g2 - (g2 @ g0) / (g0 @ g0) * g0)
    w = torch.zeros(2, requires_grad=True)
    for weights, terms in (
        (None, lambda: {'loss_pde': w @ torch.tensor([1.0, 1.0]), 'loss_bc': (w * 0).sum() + 3.0}),
        ({'loss_bc': 0.0}, lambda: {'loss_pde': w @ torch.tensor([1.0, 1.0]), 'loss_bc': -(w @ w) - w[0]}),
    ):
        w.grad = None
        agg = aggregator('PCGrad', weights=weights)
        agg.backward(terms(), 0, [w])
        torch.testing.assert_close(w.grad, torch.tensor([1.0, 1.0]))


# -- field metrics per output -------------------------------------------------------------------
def test_field_metrics_of_one_output_of_a_system_are_named_by_it():
    from scepter_like.metric import METRICS
    from scepter_like.solver.train_val_solver import check_distinct_names

    pred, ref = torch.rand(6, 2), torch.rand(6, 2)
    entries = [
        Config({'NAME': name, 'COMPONENT': k}, path=f'SOLVER.METRICS[{i}]')
        for i, (name, k) in enumerate([('RelativeL2Error', 0), ('RelativeL2Error', 1), ('MaxAbsError', 1)])
    ]
    metrics = [METRICS.build(entry) for entry in entries]
    check_distinct_names(metrics, entries)  # two RelativeL2Error used to collide on relative_l2
    got = {}
    for metric in metrics:
        metric.update({'u': pred, 'u_exact': ref})
        got.update(metric.compute())
    p, r = pred.double(), ref.double()
    assert got == pytest.approx(
        {
            'relative_l2_u0': ((p[:, 0] - r[:, 0]).norm() / r[:, 0].norm()).item(),
            'relative_l2_u1': ((p[:, 1] - r[:, 1]).norm() / r[:, 1].norm()).item(),
            'max_abs_error_u1': (p[:, 1] - r[:, 1]).abs().max().item(),
        }
    )
    assert metrics[1].lower_is_better == ('relative_l2_u1',)  # SAVE_BEST_BY relative_l2_u1 keeps the least
    assert METRICS.build({'NAME': 'RelativeL2Error'}).output_names() == ['relative_l2']  # null: every output
    with pytest.raises(DataError, match=r"^SOLVER\.METRICS\[2\]\.COMPONENT: 'u' has 2 output\(s\).*COMPONENT 2"):
        METRICS.build(Config({'NAME': 'MaxAbsError', 'COMPONENT': 2}, path='SOLVER.METRICS[2]')).update(
            {'u': pred, 'u_exact': ref}
        )


# -- field metrics under torchrun ------------------------------------------------------------
def test_field_metrics_exact_under_two_process_torchrun(tmp_path):
    got = torchrun_worker_values('field_metric_worker', tmp_path)
    from field_metric_worker import field

    pred, ref = (t.double() for t in field())
    assert got['relative_l2'] == pytest.approx(((pred - ref).norm() / ref.norm()).item(), rel=1e-12)
    assert got['max_abs_error'] == pytest.approx((pred - ref).abs().max().item(), rel=1e-12)


# -- the Poisson task through run_train ------------------------------------------------------
def poisson_run(run, work, *overrides):
    """A 4-step run of the Poisson config (2 Adam, 2 L-BFGS) on 80 points and an 11x11 grid, evaluated and
    checkpointed every 2; ``run``: ``run_cli`` (in this process) or ``run_tool`` (in a process of its own)."""
    res = run(
        'run_train.py',
        '--cfg',
        POISSON_CFG,
        f'SOLVER.WORK_DIR={work}',
        'SOLVER.MAX_EPOCHS=4',
        'SOLVER.EVAL_INTERVAL=2',
        'SOLVER.TRAIN_DATA.SETS.pde.COUNT=64',
        'SOLVER.TRAIN_DATA.SETS.bc.COUNT=16',
        'SOLVER.EVAL_DATA.RESOLUTION=[11,11]',
        'SOLVER.EVAL_DATA.BATCH_SIZE=50',
        'SOLVER.TRAIN_HOOKS.2.INTERVAL=2',
        'SOLVER.TRAIN_HOOKS.2.KEEP_LAST=0',
        'SOLVER.OPTIMIZER_PHASES.0.AT_STEP=2',  # 2 Adam steps, then 2 L-BFGS
        *overrides,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    records = [json.loads(line) for line in open(work / 'metrics.jsonl')]
    return [r for r in records if r['kind'] == 'eval']


def test_poisson_run_writes_field_plot_and_metrics_and_resumes_exactly(tmp_path):
    work = tmp_path / 'run'
    evals = poisson_run(run_cli, work)
    plots = sorted(os.listdir(work / 'plots'))
    assert plots == ['field-eval-step2.png', 'field-eval-step4.png']
    assert (work / 'plots' / plots[-1]).read_bytes().startswith(PNG_MAGIC)
    assert [r['step'] for r in evals] == [2, 4]
    assert math.isfinite(evals[-1]['values']['relative_l2']) and evals[-1]['values']['max_abs_error'] > 0
    # a run resumed from the step-2 checkpoint, in a process of its own, ends with exactly the same field
    checkpoint = work / 'checkpoints' / 'poisson2d-epoch-2.pth'
    resumed = poisson_run(run_tool, tmp_path / 'resumed', f'SOLVER.RESUME_FROM={checkpoint}')
    assert resumed[-1]['step'] == 4 and resumed[-1]['values'] == evals[-1]['values']


def test_render_field_one_dimensional():
    x = np.linspace(0, 1, 30)[::-1].reshape(-1, 1)  # unsorted points are drawn in order
    png = render_field(x, np.sin(math.pi * x) + 0.01, np.sin(math.pi * x), title='1-D', axes=('t',))
    assert png.startswith(PNG_MAGIC)
    scattered = np.random.default_rng(0).random((40, 2))  # not a grid: a scatter
    assert render_field(scattered, scattered[:, 0]).startswith(PNG_MAGIC)


# -- bad input: one error line, exit 2 -------------------------------------------------------
def test_bad_geometry_and_unknown_aggregator_are_one_line_errors(tmp_path):
    res = run_cli(
        'run_train.py',
        '--cfg',
        POISSON_CFG,
        f'SOLVER.WORK_DIR={tmp_path}',
        'SOLVER.TRAIN_DATA.GEOMETRY.HIGH=[1.0,-1.0]',
    )
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: SOLVER.TRAIN_DATA.GEOMETRY') and 'HIGH' in lines[0]
    res = run_cli('config_template.py', 'Relobrallo', '--registry', 'LOSS_AGGREGATORS')
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error:') and 'did you mean Relobralo' in lines[0]


def test_an_unsigned_error_metric_keeps_the_least_as_best_and_early_stopping_watches_it_the_same_way(tmp_path):
    """relative_l2 is less-is-better (its metric says so): SAVE_BEST_BY relative_l2 and MONITOR relative_l2 follow."""
    work = tmp_path / 'run'
    res = run_cli(
        'run_train.py', '--cfg', POISSON_CFG, f'SOLVER.WORK_DIR={work}', 'SOLVER.MAX_EPOCHS=6',
        'SOLVER.EVAL_INTERVAL=1', 'SOLVER.OPTIMIZER_PHASES=[]', 'SOLVER.TRAIN_DATA.SETS.pde.COUNT=64',
        'SOLVER.TRAIN_DATA.SETS.bc.COUNT=16', 'SOLVER.EVAL_DATA.RESOLUTION=[11,11]', 'SOLVER.EVAL_DATA.BATCH_SIZE=121',
        'SOLVER.TRAIN_HOOKS.2.SAVE_BEST_BY=relative_l2', 'SOLVER.TRAIN_HOOKS.2.INTERVAL=0',
        'SOLVER.EVAL_HOOKS=[{NAME: EarlyStoppingHook, MONITOR: relative_l2, PATIENCE: 1}]',
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    records = [json.loads(line) for line in open(work / 'metrics.jsonl')]
    errors = [r['values']['relative_l2'] for r in records if r['kind'] == 'eval']
    # MODE auto is min here: the run went on while the error fell, and stopped at its first rise (PATIENCE 1)
    assert len(errors) >= 3 and errors[:-1] == sorted(errors[:-1], reverse=True) and errors[-1] > errors[-2]
    best = torch.load(work / 'checkpoints' / 'poisson2d-best.pth', weights_only=True)
    assert best['solver']['epoch_outputs']['eval']['relative_l2'] == min(errors)
    assert 'CheckpointHook keeps the least relative_l2 as best' in res.stdout


def test_lbfgs_on_mini_batched_or_resampled_point_sets_warns_before_the_first_step(tmp_path):
    common = [
        '--cfg', POISSON_CFG, 'SOLVER.MAX_STEPS=1', 'SOLVER.TRAIN_DATA.SETS.pde.COUNT=64',
        'SOLVER.TRAIN_DATA.SETS.bc.COUNT=16', 'SOLVER.EVAL_DATA.RESOLUTION=[5,5]', 'SOLVER.EVAL_HOOKS=[]',
    ]  # fmt: skip
    res = run_cli(
        'run_train.py', *common, f'SOLVER.WORK_DIR={tmp_path / "a"}', 'SOLVER.TRAIN_DATA.SETS.pde.BATCH_SIZE=16'
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'OPTIMIZER_PHASES[0].OPTIMIZER: LBFGS keeps curvature pairs from step to step, and an epoch here is 4' in (
        res.stdout
    )
    res = run_cli(  # a fresh draw every 10 passes: each a different loss, as the mini-batches are
        'run_train.py', *common, f'SOLVER.WORK_DIR={tmp_path / "c"}', 'SOLVER.TRAIN_DATA.SETS.bc.RESAMPLE_EVERY=10'
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (
        'OPTIMIZER_PHASES[0].OPTIMIZER: LBFGS keeps curvature pairs from step to step, and the points are drawn anew'
        ' every 10 pass(es), each a different loss: the pairs mix them and the steps can diverge; train it on the'
        ' full batch of one draw (no RESAMPLE_EVERY on the point sets)'
    ) in res.stdout
    res = run_cli('run_train.py', *common, f'SOLVER.WORK_DIR={tmp_path / "b"}')  # full batch: nothing to say
    assert res.returncode == 0 and 'curvature pairs' not in res.stdout
    assert re.search(r'network +MLP +[\d,]+ +\[1, 1\]', res.stdout)  # the summary's sample forward takes eval points


def test_field_plot_draws_one_output_of_a_field_with_several(tmp_path, monkeypatch):
    """u [N, 2] of a system: the COMPONENT's column is drawn (its values were interleaved with the other's)."""
    import logging
    import types

    from scepter_like.solver.hooks import field_plot
    from scepter_like.solver.hooks.registry import HOOKS

    drawn = []
    monkeypatch.setattr(
        field_plot, 'render_field', lambda coords, pred, exact, **kw: drawn.append((pred, exact)) or b''
    )
    x = np.linspace(0, 1, 5)[:, None]
    u = np.concatenate([np.sin(x), np.cos(x)], axis=1)
    hook = HOOKS.build({'NAME': 'FieldPlotHook', 'COMPONENT': 1})
    hook.parts = [[x, u, u + 1]]
    solver = types.SimpleNamespace(
        is_main=True, mode='eval', work_dir=str(tmp_path), progress=types.SimpleNamespace(total_iter=3),
        logger=logging.getLogger('scepter_like.test'),
    )  # fmt: skip
    hook.after_all_iter(solver)
    np.testing.assert_array_equal(drawn[0][0], np.cos(x[:, 0]))
    np.testing.assert_array_equal(drawn[0][1], np.cos(x[:, 0]) + 1)


# -- export ------------------------------------------------------------------------------------
def test_onnx_export_of_a_float64_model_takes_a_float32_input_file_as_run_inference_does(tmp_path, capsys):
    """The input is cast to the model's dtype (solver/predict.cast_inputs); it was refused with a hint about a
    data config's DTYPES, which an export from a checkpoint has none of."""
    pytest.importorskip('onnxruntime')
    from argparse import Namespace

    import tasks.pinn  # noqa: F401  (registers PoissonPINN)
    from scepter_like.model import MODELS
    from scepter_like.tools.export import export_onnx_file

    model = MODELS.build({'NAME': 'PoissonPINN', 'K': 2}).double()
    np.savez(tmp_path / 'pts.npz', x=np.random.default_rng(0).random((5, 2), dtype=np.float32))
    out = tmp_path / 'm.onnx'
    export_onnx_file(model, Namespace(input=str(tmp_path / 'pts.npz'), output=str(out), atol=1e-6, rtol=1e-5))
    assert out.exists() and 'onnxruntime vs torch' in capsys.readouterr().out


def test_an_input_file_that_is_no_npz_says_which_format_is_read(tmp_path):
    from scepter_like.solver.inference_solver import read_npz

    path = tmp_path / 'grid.txt'
    path.write_text('x,t\n0.1,0.2\n')
    with pytest.raises(
        DataError, match=r'grid\.txt is not a readable \.npz file \(.*\); inputs are an \.npz of arrays'
    ):
        read_npz(str(path))
