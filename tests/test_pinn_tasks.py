"""The shipped PINN problems as a user runs them: Burgers and its exact solution, the inverse heat problem, a new
problem of one's own, residual-based refinement, full-batch logging and checkpoints, field plots, inference, ONNX.

Runs go through tools/run_train.py's entry point in this process (``run(main, argv)``), with
few points and steps.
"""

import importlib.util
import math
import os
import re

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO, TOOLS
from helpers import blob_solver_cfg, build_solver, write_blobs

import tasks.pinn  # noqa: F401  (registers the PINN tasks)
from scepter_like.cli import run
from scepter_like.errors import ConfigError
from scepter_like.model.pinn import PhysicsInformedModel
from scepter_like.model.registry import MODELS
from scepter_like.utils.log_values import LINE_KEYS
from scepter_like.utils.metrics_log import METRICS_FILE, read_metrics
from tasks.pinn.burgers import NU, cole_hopf
from tasks.pinn.heat import heat_solution

CONFIGS = os.path.join(REPO, 'configs', 'pinn')
BURGERS = os.path.join(CONFIGS, 'burgers1d.yaml')
HEAT = os.path.join(CONFIGS, 'heat_inverse.yaml')
POISSON = os.path.join(CONFIGS, 'poisson2d.yaml')


def tool(name):
    spec = importlib.util.spec_from_file_location(f'{name}_tool', os.path.join(TOOLS, f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def train(capsys, *argv):
    status = run(tool('run_train'), [str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


SMALL_BURGERS = [
    'SOLVER.TRAIN_DATA.SETS.pde.COUNT=64',
    'SOLVER.TRAIN_DATA.SETS.boundary.COUNT=8',
    'SOLVER.TRAIN_DATA.SETS.initial.COUNT=16',
    'SOLVER.EVAL_DATA.RESOLUTION=[21,11]',
    'SOLVER.EVAL_DATA.BATCH_SIZE=231',
]


# -- Burgers --------------------------------------------------------------------------------------
def test_cole_hopf_solution_is_burgers():
    # Basdevant et al. (1986): the steepest slope, at x = 0 and t = 1.6037 / pi, is -152.00516
    h, t = 1e-7, 1.6037 / math.pi
    assert (cole_hopf(h, t) - cole_hopf(-h, t)) / (2 * h) == pytest.approx(-152.00516, abs=1e-3)
    x = np.linspace(-1, 1, 9)
    np.testing.assert_allclose(cole_hopf(x, 0.0), -np.sin(np.pi * x))
    np.testing.assert_allclose(cole_hopf(np.array([-1.0, 1.0]), 0.7), 0.0, atol=1e-12)
    xs, ts, e = np.array([-0.5, 0.3, 0.7]), np.array([0.2, 0.5, 0.9]), 1e-4  # the PDE, by finite differences
    u = cole_hopf(xs, ts)
    u_t = (cole_hopf(xs, ts + e) - cole_hopf(xs, ts - e)) / (2 * e)
    u_x = (cole_hopf(xs + e, ts) - cole_hopf(xs - e, ts)) / (2 * e)
    u_xx = (cole_hopf(xs + e, ts) - 2 * u + cole_hopf(xs - e, ts)) / e**2
    np.testing.assert_allclose(u_t + u * u_x - NU * u_xx, 0.0, atol=1e-5)


def test_burgers_run_evaluates_against_the_reference_logs_every_interval_and_plots_x_t(tmp_path, capsys):
    work = tmp_path / 'run'
    status, out, err = train(
        capsys,
        '--cfg',
        BURGERS,
        f'SOLVER.WORK_DIR={work}',
        *SMALL_BURGERS,
        'SOLVER.MAX_EPOCHS=7',
        'SOLVER.EVAL_INTERVAL=7',
        'SOLVER.OPTIMIZER_PHASES.0.AT_STEP=5',
        'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=3',
        'SOLVER.TRAIN_HOOKS.2.INTERVAL=1',  # one-step epochs: every 1,000, so none in 7 steps
    )
    assert status == 0, err
    records = read_metrics(work / METRICS_FILE)
    assert [r['step'] for r in records if r['kind'] == 'train'] == [3, 6, 7]  # counted across one-step epochs
    log = (work / 'std_log.txt').read_text()
    assert 'trained in' not in log and log.count(' loss_pde: ') == 3
    assert 'INTERVAL 1 saves every 1000 epochs' in log and not os.listdir(work / 'checkpoints')
    evaluation = [r for r in records if r['kind'] == 'eval'][-1]['values']
    assert 0 < evaluation['relative_l2'] < 2  # against u_exact, read from the data through EXTRA_KEYS
    assert os.listdir(work / 'plots') == ['field-eval-step7.png']


def test_field_figure_names_its_axes():
    from scepter_like.solver.hooks.field_plot import field_figure

    x, t = np.meshgrid(np.linspace(-1, 1, 5), np.linspace(0, 1, 4), indexing='ij')
    coords = np.stack([x.ravel(), t.ravel()], 1)
    fig = field_figure(coords, coords[:, 0], coords[:, 0] + 0.1, axes=('x', 't'))
    assert [(a.get_xlabel(), a.get_ylabel()) for a in fig.axes if a.get_title()] == [('x', 't')] * 3


# -- the field plot checks what it needs before training ---------------------------------------------
def test_field_plot_needs_are_checked_before_the_first_step(tmp_path, capsys, monkeypatch):
    base = ['--cfg', BURGERS, *SMALL_BURGERS, 'SOLVER.MAX_EPOCHS=3', 'SOLVER.OPTIMIZER_PHASES=[]']
    status, _, err = train(
        capsys, *base, f'SOLVER.WORK_DIR={tmp_path / "a"}', 'SOLVER.EXTRA_KEYS=[]', 'SOLVER.METRICS=[]'
    )
    assert status == 2 and err.count('\n') == 1
    assert err.startswith("error: SOLVER.EVAL_HOOKS[0].KEYS: ['u_exact'] are neither model outputs nor") and (
        'EXTRA_KEYS: [u_exact]' in err
    )
    monkeypatch.setitem(__import__('sys').modules, 'matplotlib', None)  # the plot extra not installed
    status, _, err = train(capsys, *base, f'SOLVER.WORK_DIR={tmp_path / "b"}')
    assert status == 2 and err.count('\n') == 1 and "pip install 'scepter_like[plot]'" in err
    assert not (tmp_path / 'b' / METRICS_FILE).exists() or not [
        r for r in read_metrics(tmp_path / 'b' / METRICS_FILE) if r['kind'] == 'train'
    ]


def test_field_plot_refuses_3d_points_before_training(tmp_path, capsys):
    cfg = yaml.safe_load(open(POISSON))
    box = {'NAME': 'Box', 'LOW': [0, 0, 0], 'HIGH': [1, 1, 1]}
    cfg['SOLVER']['TRAIN_DATA']['GEOMETRY'] = cfg['SOLVER']['EVAL_DATA']['GEOMETRY'] = box
    cfg['SOLVER']['EVAL_DATA']['RESOLUTION'] = [3, 3, 3]
    cfg['SOLVER']['MODEL']['NETWORK']['IN_DIM'] = 3
    path = tmp_path / 'box.yaml'
    path.write_text(yaml.safe_dump(cfg))
    status, _, err = train(capsys, '--cfg', path, f'SOLVER.WORK_DIR={tmp_path / "run"}')
    assert status == 2 and err.count('\n') == 1
    assert err.startswith('error: SOLVER.EVAL_HOOKS[0].KEYS: FieldPlotHook plots fields over 1-D or 2-D coordinates;')


# -- the inverse heat problem ----------------------------------------------------------------------
def test_heat_observations_are_the_solution_with_d_0_1():
    table = np.loadtxt(os.path.join(CONFIGS, 'heat_observations.csv'), delimiter=',', skiprows=1)
    assert table.shape == (20, 3) and (table[:, :2] > 0).all() and (table[:, :2] <= 1).all()
    np.testing.assert_allclose(table[:, 2], heat_solution(table[:, 0], table[:, 1], 0.1), rtol=1e-15)


def test_heat_inverse_logs_and_checkpoints_the_learned_d(tmp_path, capsys):
    work = tmp_path / 'run'
    status, _, err = train(
        capsys,
        '--cfg',
        HEAT,
        f'SOLVER.WORK_DIR={work}',
        'SOLVER.MAX_EPOCHS=6',
        'SOLVER.EVAL_INTERVAL=6',
        'SOLVER.OPTIMIZER_PHASES=[]',
        'SOLVER.OPTIMIZER.LEARNING_RATE=0.01',
        'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=2',
        'SOLVER.TRAIN_HOOKS.2.INTERVAL=3',
        'SOLVER.TRAIN_DATA.SETS.pde.COUNT=50',
        'SOLVER.EVAL_DATA.RESOLUTION=[11,11]',
        'SOLVER.EVAL_DATA.BATCH_SIZE=121',
    )
    assert status == 0, err
    values = [r['values']['D'] for r in read_metrics(work / METRICS_FILE) if r['kind'] == 'train']
    assert len(values) == 3 and values[0] != values[-1] and all(abs(v - 0.5) < 0.1 for v in values)
    lines = [line for line in (work / 'std_log.txt').read_text().splitlines() if ' D: ' in line]
    assert len(lines) == 3
    # every key of the line is the model's (loss terms, D) or one the line writes itself, which PARAMETERS may not
    # take (PhysicsInformedModel refuses them: a parameter lr would be hidden in metrics.jsonl)
    written = set(re.findall(r' ([^ :]+): ', lines[-1].split(' step ', 1)[1])) - {'D'}
    assert not {k for k in written if not k.startswith('loss')} - set(LINE_KEYS), lines[-1]
    ckpt = torch.load(work / 'checkpoints' / 'heat_inverse-epoch-6.pth', weights_only=True)
    # the last line's D is the value the weights hold at its step (the epoch-6 checkpoint), not a mean over its interval
    assert ckpt['model']['D'].shape == () and ckpt['model']['D'].item() == pytest.approx(values[-1], rel=1e-6)


# -- a new problem of one's own ----------------------------------------------------------------------
WAVE_MODULE = """
import math

import torch

from scepter_like.errors import ConfigError
from scepter_like.model.pinn import PhysicsInformedModel
from scepter_like.model.registry import MODELS


@MODELS.register_class()
class WavePINN(PhysicsInformedModel):
    para_dict = {'C': {'value': 1.0, 'description': 'wave speed'}}

    def pde_residual(self, x, u, d):
        return d('t', 't') - self.cfg.C**2 * d('x', 'x')

    def exact_solution(self, x):
        return torch.sin(math.pi * x[:, :1]) * torch.cos(self.cfg.C * math.pi * x[:, 1:])
"""

WAVE_CONFIG = """
IMPORTS: [wave_pinn]
SOLVER:
  NAME: TrainValSolver
  MAX_EPOCHS: 4
  MODEL: {NAME: WavePINN, NETWORK: {NAME: MLP, IN_DIM: 2, HIDDEN_DIMS: [16, 16], OUT_DIM: 1, ACTIVATION: tanh}}
  OPTIMIZER: {NAME: Adam, LEARNING_RATE: 0.001}
  TRAIN_DATA:
    NAME: PointSets
    GEOMETRY: &geometry {NAME: Interval, LOW: 0, HIGH: 1}
    TIME: &time [0, 1]
    SETS:
      pde: {KIND: interior, COUNT: 200, SAMPLING: sobol}
      ends: {KIND: boundary, COUNT: 20, CONDITIONS: [{NAME: Dirichlet, VALUE: 0}]}
      start:
        KIND: initial
        COUNT: 40
        CONDITIONS: [{NAME: InitialValue, VALUE: sin(pi * x)}, {NAME: InitialDerivative, VALUE: 0}]
  EVAL_DATA: {NAME: GridPoints, GEOMETRY: *geometry, TIME: *time, RESOLUTION: [11, 11], BATCH_SIZE: 121}
  METRICS: [{NAME: RelativeL2Error, KEYS: [u, u_exact]}]
  TRAIN_HOOKS: [{NAME: BackwardHook}, {NAME: LogHook, LOG_INTERVAL: 2}]
"""


def code_lines(text):
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith('#'))


def test_a_new_time_dependent_problem_is_a_short_module_and_config(tmp_path, capsys, monkeypatch):
    (tmp_path / 'wave_pinn.py').write_text(WAVE_MODULE)
    (tmp_path / 'wave.yaml').write_text(WAVE_CONFIG)
    assert code_lines(WAVE_MODULE) <= 20
    assert code_lines(WAVE_CONFIG) <= code_lines(open(BURGERS).read())
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    status, _, err = train(capsys, '--cfg', tmp_path / 'wave.yaml', f'SOLVER.WORK_DIR={tmp_path / "run"}')
    assert status == 0, err
    records = read_metrics(tmp_path / 'run' / METRICS_FILE)
    losses = [r['values'] for r in records if r['kind'] == 'train']
    assert set(losses[0]) >= {'loss_pde', 'loss_ends', 'loss_start_0', 'loss_start_1'}
    assert 0 < [r for r in records if r['kind'] == 'eval'][-1]['values']['relative_l2'] < 10


# -- an ODE: the initial derivative -----------------------------------------------------------------------
@MODELS.register_class()
class OscillatorPINN(PhysicsInformedModel):
    """u'' + u = 0 on [0, 2 pi]: with u(0) = 0 and u'(0) = 1, u = sin x (-sin x if the derivative's sign flips)."""

    def pde_residual(self, x, u, d):
        return d('x', 'x') + u

    def exact_solution(self, x):
        return torch.sin(x)


ODE_CONFIG = {
    'ENV': {'SEED': 0},
    'SOLVER': {
        'NAME': 'TrainValSolver',
        'MAX_EPOCHS': 700,
        'EVAL_INTERVAL': 700,
        'MODEL': {
            'NAME': 'OscillatorPINN',
            'NETWORK': {'NAME': 'MLP', 'IN_DIM': 1, 'HIDDEN_DIMS': [20, 20], 'OUT_DIM': 1, 'ACTIVATION': 'tanh'},
        },
        'OPTIMIZER': {'NAME': 'Adam', 'LEARNING_RATE': 0.005},
        'OPTIMIZER_PHASES': [{'AT_STEP': 400, 'OPTIMIZER': {'NAME': 'LBFGS', 'MAX_ITER': 1, 'HISTORY_SIZE': 100}}],
        'TRAIN_DATA': {
            'NAME': 'PointSets',
            'GEOMETRY': {'NAME': 'Interval', 'LOW': 0, 'HIGH': 2 * math.pi},
            'SETS': {
                'ode': {'KIND': 'interior', 'COUNT': 60},
                'start': {
                    'KIND': 'boundary',
                    'COUNT': 1,
                    'FACES': ['x_low'],
                    'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 0}, {'NAME': 'InitialDerivative', 'VALUE': 1}],
                },
            },
        },
        'EVAL_DATA': {
            'NAME': 'GridPoints',
            'GEOMETRY': {'NAME': 'Interval', 'LOW': 0, 'HIGH': 2 * math.pi},
            'RESOLUTION': [100],
            'BATCH_SIZE': 100,
        },
        'METRICS': [{'NAME': 'RelativeL2Error', 'KEYS': ['u', 'u_exact']}],
        'TRAIN_HOOKS': [{'NAME': 'BackwardHook'}],
    },
}


@pytest.mark.slow
def test_an_ode_with_an_initial_derivative_trains_to_its_solution(tmp_path):
    """DeepXDE's OperatorBC u'(0) = 1 is InitialDerivative on the x_low face: sin x, not -sin x (relative L2 2)."""
    cfg = yaml.safe_load(yaml.safe_dump(ODE_CONFIG))
    cfg['SOLVER']['WORK_DIR'] = str(tmp_path / 'run')
    solver = build_solver(cfg)
    solver.solve()
    solver.close()
    evals = [r['values'] for r in read_metrics(tmp_path / 'run' / METRICS_FILE) if r['kind'] == 'eval']
    assert evals[-1]['relative_l2'] < 0.05, evals


# -- residual-based refinement -------------------------------------------------------------------------
@MODELS.register_class()
class SlopedResidualPINN(PhysicsInformedModel):
    """A residual that grows with x (and a trainable field): refinement must pick the largest x."""

    def pde_residual(self, x, u, d):
        return x[:, :1] + 0 * u


def rar_cfg(work, steps, **rar):
    cfg = yaml.safe_load(open(POISSON))
    solver = cfg['SOLVER']
    solver.update(WORK_DIR=str(work), MAX_EPOCHS=steps, EVAL_DATA=None, EVAL_HOOKS=[], METRICS=[], OPTIMIZER_PHASES=[])
    solver['MODEL'] = {'NAME': 'SlopedResidualPINN', 'NETWORK': {**solver['MODEL']['NETWORK'], 'HIDDEN_DIMS': [8]}}
    solver['TRAIN_DATA']['SETS'] = {
        'pde': {'KIND': 'interior', 'COUNT': 40, 'SAMPLING': 'uniform', 'RESAMPLE_EVERY': 3},
        'bc': {'KIND': 'boundary', 'COUNT': 8, 'CONDITIONS': [{'NAME': 'Dirichlet', 'VALUE': 0}]},
    }
    solver['TRAIN_HOOKS'] = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 3},
        {'NAME': 'RARHook', 'EVERY': 2, 'CANDIDATES': 200, 'ADD': 3, **rar},
    ]
    return cfg


def test_eval_data_without_metrics_suggests_the_field_error_for_a_pinn(tmp_path, caplog):
    """Not AccuracyMetric (a classifier's): the relative L2 error against u_exact."""
    cfg = rar_cfg(tmp_path / 'run', 1)
    cfg['SOLVER'].update(MODEL=yaml.safe_load(open(POISSON))['SOLVER']['MODEL'], EVAL_DATA={'NAME': 'GridPoints',
                         'GEOMETRY': {'NAME': 'Rectangle'}, 'RESOLUTION': [3, 3], 'BATCH_SIZE': 9})  # fmt: skip
    build_solver(cfg)
    assert (
        'SOLVER.EVAL_DATA is evaluated, but with no METRICS (and no EVAL_HOOKS) the evaluation reports nothing; add'
        ' METRICS, e.g. [{NAME: RelativeL2Error, KEYS: [u, u_exact]}]\n'  # u_exact: PoissonPINN's exact solution
    ) in caplog.text
    caplog.clear()
    cfg['SOLVER']['MODEL']['NAME'] = 'SlopedResidualPINN'  # no exact_solution: a reference file gives u_exact
    build_solver(cfg)
    assert (
        'add METRICS, e.g. [{NAME: RelativeL2Error, KEYS: [u, u_exact]}] with a reference u_exact, as'
        ' SlopedResidualPINN has no exact_solution: EVAL_DATA: {NAME: NpzDataset, PATH: ref.npz} holding x and'
        ' u_exact, and EXTRA_KEYS: [u_exact]\n'
    ) in caplog.text


def test_eval_points_of_other_coordinates_than_the_train_points_name_the_data_key_not_in_dim(tmp_path):
    """Not the network's first layer failing on them with 'set SOLVER.MODEL.NETWORK.IN_DIM'."""
    cfg = rar_cfg(tmp_path / 'run', 1)
    grid = {'NAME': 'GridPoints', 'GEOMETRY': {'NAME': 'Rectangle'}, 'RESOLUTION': [3, 3], 'BATCH_SIZE': 9}
    cfg['SOLVER'].update(EVAL_DATA=grid, METRICS=[{'NAME': 'RelativeL2Error', 'KEYS': ['u', 'u']}])
    cfg['SOLVER']['TRAIN_DATA']['TIME'] = [0, 1]  # train points (x, y, t); the grid's (x, y)
    with pytest.raises(
        ConfigError,
        match=r"^SOLVER\.EVAL_DATA: its points have the coordinates \(x, y\), and the train data's, which the model is"
        r' built for, \(x, y, t\); give it the time of the train data: SOLVER\.EVAL_DATA\.TIME as'
        r' SOLVER\.TRAIN_DATA\.TIME$',
    ):
        build_solver(cfg)
    del cfg['SOLVER']['TRAIN_DATA']['TIME']
    grid.update(TIME=[0, 1], RESOLUTION=[3, 3, 3], BATCH_SIZE=27)
    with pytest.raises(
        ConfigError, match=r'\(x, y, t\), .*\(x, y\); leave out SOLVER\.EVAL_DATA\.TIME: the train data'
    ):
        build_solver(cfg)
    grid.update(TIME=None, GEOMETRY={'NAME': 'Interval'}, RESOLUTION=[3], BATCH_SIZE=3)
    with pytest.raises(
        ConfigError, match=r'give SOLVER\.EVAL_DATA\.GEOMETRY the dimension of SOLVER\.TRAIN_DATA\.GEOMETRY$'
    ):
        build_solver(cfg)


def sizes_seen(solver, steps):
    seen = []
    solver.register_callback_on_iter_end(lambda s: seen.append(len(s.step.batch['pde.x'])))
    solver.solve()
    solver.close()
    return seen


def test_rar_adds_the_points_of_largest_residual_from_the_next_pass_and_resumes_exactly(tmp_path):
    solver = build_solver(rar_cfg(tmp_path / 'run', 7, ROUNDS=3))
    seen = sizes_seen(solver, 7)
    assert seen == [40, 40, 43, 43, 46, 46, 49]  # after steps 2, 4, 6; no fourth round
    hook = solver.hooks_dict['train'][-1]
    (first_pass, points), *_ = hook.added
    assert first_pass == 2 and points.shape == (3, 2)
    candidates = solver.datas['train'].dataset.set_named('pde').candidates(200, 'uniform', 0)
    assert torch.equal(points, candidates[candidates[:, 0].argsort(descending=True)[:3]])
    # resumed from the step-3 checkpoint (one round done): the same batches and the same weights at the end
    resumed_cfg = rar_cfg(tmp_path / 'resumed', 7, ROUNDS=3)
    resumed_cfg['SOLVER']['RESUME_FROM'] = str(tmp_path / 'run' / 'checkpoints' / 'checkpoint-step-3.pth')
    resumed = build_solver(resumed_cfg)
    assert sizes_seen(resumed, 7) == seen[3:]
    for a, b in zip(solver.unwrapped_model.parameters(), resumed.unwrapped_model.parameters()):
        assert torch.equal(a, b)


def test_rar_runs_no_round_at_the_last_step_whose_points_would_never_train(tmp_path):
    solver = build_solver(rar_cfg(tmp_path / 'run', 6))
    assert sizes_seen(solver, 6) == [40, 40, 43, 43, 46, 46]  # after steps 2 and 4; not after 6, the last
    assert len(solver.hooks_dict['train'][-1].added) == 2


def test_rar_rounds_inside_an_lbfgs_phase_are_a_warning_at_set_up(tmp_path, caplog):
    cfg = rar_cfg(tmp_path / 'run', 9)
    lbfgs = {'NAME': 'LBFGS', 'MAX_ITER': 1, 'HISTORY_SIZE': 10}
    cfg['SOLVER']['TRAIN_DATA']['SETS']['pde']['RESAMPLE_EVERY'] = 0  # (its own warning under L-BFGS)
    cfg['SOLVER']['OPTIMIZER_PHASES'] = [{'AT_STEP': 4, 'OPTIMIZER': lbfgs}]
    solver = build_solver(cfg)
    solver.hooks_dict['train'][-1].before_solve(solver)
    assert [r.getMessage() for r in caplog.records if 'curvature' in r.getMessage()] == [
        'SOLVER.TRAIN_HOOKS[2]: 2 refinement round(s), the first after step 6, fall in the LBFGS phase (steps 4 to 9,'
        ' SOLVER.OPTIMIZER_PHASES[0].OPTIMIZER); LBFGS keeps curvature pairs from step to step, and each round adds'
        ' points, a different loss: the pairs mix them and the steps can diverge; end refinement by step 4'
        ' (ROUNDS: 2)'
    ]  # rounds after steps 2 and 4 (the phase's first: its pairs start there) are fine; 8 is the last in it
    caplog.clear()
    cfg['SOLVER']['TRAIN_HOOKS'][-1]['ROUNDS'] = 2
    solver = build_solver(cfg)
    solver.hooks_dict['train'][-1].before_solve(solver)
    assert 'curvature' not in caplog.text


def test_rar_on_a_model_without_residuals_is_one_error_line(tmp_path, capsys):
    cfg = blob_solver_cfg(write_blobs(tmp_path / 'blobs.npz'), tmp_path / 'run', MAX_STEPS=1)
    cfg['SOLVER']['TRAIN_HOOKS'] = [{'NAME': 'BackwardHook'}, {'NAME': 'RARHook'}]
    path = tmp_path / 'job.yaml'
    path.write_text(yaml.safe_dump(cfg))
    status, _, err = train(capsys, '--cfg', path)
    assert status == 2 and err.count('\n') == 1
    assert err.startswith('error: SOLVER.TRAIN_HOOKS[1]: RARHook refines by the PDE residual, and SOLVER.MODEL')


# -- bad input through run_train ----------------------------------------------------------------------
BAD_RUNS = {
    'normals': (
        'SOLVER.TRAIN_DATA.SETS.initial.CONDITIONS=[{NAME: Neumann}]',
        'SOLVER.TRAIN_DATA.SETS.initial.CONDITIONS[0].NAME: a Neumann condition belongs on a boundary set',
    ),
    'time': ('SOLVER.TRAIN_DATA.TIME=[1,0]', 'SOLVER.TRAIN_DATA.TIME: the time domain [t0, t1] = [1, 0] needs t1 > t0'),
    'no points': ('SOLVER.TRAIN_DATA.SETS.boundary.COUNT=0', 'SOLVER.TRAIN_DATA.SETS.boundary.COUNT: a point set'),
}


@pytest.mark.parametrize('case', sorted(BAD_RUNS))
def test_bad_problems_are_one_error_line(tmp_path, capsys, case):
    override, message = BAD_RUNS[case]
    status, _, err = train(capsys, '--cfg', BURGERS, f'SOLVER.WORK_DIR={tmp_path}', override)
    assert status == 2 and err.count('\n') == 1 and err.startswith(f'error: {message}'), err


def test_observations_with_the_wrong_columns_are_one_error_line(tmp_path, capsys):
    bad = tmp_path / 'obs.csv'
    bad.write_text('x,u\n0.5,1.0\n')
    status, _, err = train(
        capsys, '--cfg', HEAT, f'SOLVER.WORK_DIR={tmp_path / "run"}', f'SOLVER.TRAIN_DATA.SETS.data.FILE={bad}'
    )
    assert status == 2 and err.count('\n') == 1
    assert err.startswith('error: SOLVER.TRAIN_DATA.SETS.data.FILE: ') and 'has 2 columns' in err


# -- inference and ONNX export of a trained PINN -------------------------------------------------------
@pytest.fixture(scope='module')
def trained_heat(tmp_path_factory):
    work = tmp_path_factory.mktemp('heat') / 'run'
    cfg = yaml.safe_load(open(HEAT))
    solver_cfg = cfg['SOLVER']
    solver_cfg.update(WORK_DIR=str(work), MAX_EPOCHS=2, OPTIMIZER_PHASES=[], EVAL_HOOKS=[])
    solver_cfg['EVAL_DATA'].update(RESOLUTION=[5, 5], BATCH_SIZE=25)
    solver_cfg['TRAIN_HOOKS'][2]['INTERVAL'] = 2
    solver = build_solver(cfg)
    solver.solve()
    solver.close()
    return work, solver.unwrapped_model


def test_run_inference_from_the_run_folder_alone(trained_heat, tmp_path, capsys):
    work, model = trained_heat
    points = np.array([[0.25, 0.0], [0.5, 0.5], [0.75, 1.0]], dtype=np.float32)
    np.savez(tmp_path / 'points.npz', x=points)
    argv = ['--checkpoint', str(work), '--input', str(tmp_path / 'points.npz'), '--output', str(tmp_path / 'u.npz')]
    assert run(tool('run_inference'), argv) == 0, capsys.readouterr().err
    with np.load(tmp_path / 'u.npz') as out:
        u = out['u']
    model.eval()
    with torch.no_grad():
        np.testing.assert_allclose(u, model(x=torch.from_numpy(points))['u'].numpy(), rtol=1e-6)
    assert u.shape == (3, 1)


@pytest.mark.slow
def test_onnx_export_of_a_pinn_matches_onnxruntime(trained_heat, tmp_path, capsys):
    import onnxruntime

    work, model = trained_heat
    out = tmp_path / 'heat.onnx'
    argv = ['--cfg', HEAT, '--checkpoint', str(work), '--format', 'onnx', '--output', str(out)]
    assert run(tool('export'), argv) == 0, capsys.readouterr().err
    session = onnxruntime.InferenceSession(str(out), providers=['CPUExecutionProvider'])
    assert [i.name for i in session.get_inputs()] == ['x'] and 'u' in [o.name for o in session.get_outputs()]
    points = np.random.default_rng(0).random((7, 2)).astype(np.float32)
    (u,) = session.run(['u'], {'x': points})
    model.eval()
    with torch.no_grad():
        np.testing.assert_allclose(u, model(x=torch.from_numpy(points))['u'].numpy(), rtol=1e-5, atol=1e-6)


# -- L-BFGS: one iteration per step is one step(closure) call of many iterations -----------------------
def test_lbfgs_steps_without_line_search_equal_one_call_of_many_iterations_in_float64(tmp_path):
    cfg = yaml.safe_load(open(POISSON))
    solver_cfg = cfg['SOLVER']
    lbfgs = solver_cfg['OPTIMIZER_PHASES'][0]['OPTIMIZER']  # the shipped settings: DeepXDE's, no line search
    solver_cfg.update(
        WORK_DIR=str(tmp_path / 'run'),
        MAX_EPOCHS=6,
        OPTIMIZER=lbfgs,
        OPTIMIZER_PHASES=[],
        DTYPE='float64',
        EVAL_DATA=None,
        EVAL_HOOKS=[],
        METRICS=[],
        TRAIN_HOOKS=[{'NAME': 'BackwardHook'}],
    )
    solver_cfg['TRAIN_DATA']['SETS']['pde']['COUNT'] = 60
    solver_cfg['TRAIN_DATA']['SETS']['bc']['COUNT'] = 20
    solver = build_solver(cfg)
    hand = __import__('copy').deepcopy(solver.unwrapped_model)
    batch = solver.datas['train'].dataset.take([0])
    solver.solve()
    solver.close()

    opt = torch.optim.LBFGS(
        hand.parameters(),
        lr=1,
        max_iter=6,
        max_eval=100,
        tolerance_grad=1e-8,
        tolerance_change=0,
        history_size=100,
        line_search_fn=None,
    )

    def closure():
        opt.zero_grad()
        out = hand(**batch)
        loss = out['loss_pde'] + out['loss_bc']
        loss.backward()
        return loss

    opt.step(closure)  # DeepXDE's way: one call
    assert opt.state_dict()['state'][0]['n_iter'] == 6
    for mine, theirs in zip(solver.unwrapped_model.parameters(), hand.parameters()):
        assert torch.equal(mine, theirs)
    assert solver.optimizer.state_dict()['state'][0]['func_evals'] == 6  # one evaluation per iteration


# -- DDP: two ranks, each with its share of every set, refining together -----------------------------
@pytest.mark.slow
def test_burgers_under_two_process_torchrun_with_refinement(tmp_path):
    import subprocess
    import sys

    from conftest import free_port, tool_env

    work = tmp_path / 'run'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}']
    cmd += [os.path.join(TOOLS, 'run_train.py'), '--cfg', BURGERS, f'SOLVER.WORK_DIR={work}', *SMALL_BURGERS]
    cmd += ['SOLVER.MAX_EPOCHS=4', 'SOLVER.OPTIMIZER_PHASES.0.AT_STEP=2', 'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=1']
    cmd += ['SOLVER.TRAIN_HOOKS+={NAME: RARHook, EVERY: 1, CANDIDATES: 50, ADD: 2}']
    res = subprocess.run(cmd, env=tool_env(), capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    log = (work / 'std_log.txt').read_text()
    assert log.count('RAR round') == 3 and 'world size 2' in log  # after steps 1, 2, 3: none at the last step
    records = read_metrics(work / METRICS_FILE)
    assert [r['step'] for r in records if r['kind'] == 'train'] == [1, 2, 3, 4]
    assert [r for r in records if r['kind'] == 'eval'][-1]['values']['relative_l2'] > 0
