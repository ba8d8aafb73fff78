"""SOLVER.COMPILE: torch.compile after the wrap, plain checkpoints, eager fallback, STRICT, COMPILE_INCOMPATIBLE.

The runs are small in-process solvers on Gaussian blobs with the ``aot_eager`` backend,
which goes through dynamo and AOT autograd as inductor does but needs no C++ build (an
inductor compile of a tiny model takes ~20 s on a cold cache here, so no test uses it).
aot_eager runs the same aten kernels as eager, so compiled and eager runs agree bit for bit.
"""

import logging

import compile_support
import pytest
import torch
import torch._dynamo
import yaml
from conftest import run_tool
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.solver.compile import compile_settings

COMPILED = {'ENABLED': True, 'BACKEND': 'aot_eager'}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch (dynamo's cache is per code object, shared by every module)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope='module')
def blobs(tmp_path_factory):
    return write_blobs(tmp_path_factory.mktemp('blobs') / 'blobs.npz')


def blob_solver(blobs, work_dir, compile_cfg=None, hooks=None, model=None, **keys):
    """A set-up solver on the blobs: train data only, SGD, BackwardHook (by default), COMPILE as given."""
    cfg = blob_solver_cfg(blobs, work_dir, hooks=hooks, MAX_EPOCHS=1, EVAL_DATA=None, METRICS=[], **keys)
    cfg['SOLVER']['COMPILE'] = compile_cfg or {}
    if model is not None:
        cfg['SOLVER']['MODEL']['NAME'] = model
    return build_solver(cfg)


def outputs(solver, x):
    model = solver.unwrapped_model
    model.eval()
    with torch.no_grad():
        return model(img=x)['logits']


def train(solver, epochs):
    solver.solve(epoch=epochs)
    solver.close()
    return solver


def test_compile_is_off_by_default_and_leaves_the_call_untouched(blobs, tmp_path):
    solver = blob_solver(blobs, tmp_path / 'run')
    assert solver.cfg.COMPILE.to_dict() == {
        'ENABLED': False,
        'BACKEND': 'inductor',
        'MODE': None,
        'DYNAMIC': None,
        'FULLGRAPH': False,
        'STRICT': False,
    }
    assert solver.model._compiled_call_impl is None
    solver.close()


def test_compiled_and_eager_runs_resume_each_other_bit_exactly(blobs, tmp_path, caplog):
    """Epoch 1 compiled, epoch 2 eager from its checkpoint, epoch 3 compiled again: the weights of an all-eager run."""
    caplog.set_level(logging.INFO)
    x = torch.randn(5, 8)
    eager = train(blob_solver(blobs, tmp_path / 'eager'), 3)

    chain, path = [], None
    for epochs, compile_cfg in ((1, COMPILED), (2, None), (3, COMPILED)):
        keys = {'RESUME_FROM': str(path)} if path else {}
        solver = train(blob_solver(blobs, tmp_path / f'chain{epochs}', compile_cfg, **keys), epochs)
        path = tmp_path / f'chain{epochs}.pth'
        solver.save_checkpoint(path)
        chain.append(solver)
    assert 'torch.compile: first forward of Classifier' in caplog.text and 'running eager' not in caplog.text

    state = torch.load(path, weights_only=True)['model']
    assert list(state) == list(eager.unwrapped_model.state_dict())  # the plain module's keys, no _orig_mod.
    for key, value in eager.unwrapped_model.state_dict().items():
        assert torch.equal(state[key], value), key
    # the compiled model (compiled call) and the eager one give identical outputs from one checkpoint
    assert chain[2].unwrapped_model._compiled_call_impl is not None
    assert torch.equal(outputs(chain[2], x), outputs(eager, x))
    reloaded = blob_solver(blobs, tmp_path / 'reloaded', RESUME_FROM=str(path))
    assert torch.equal(outputs(reloaded, x), outputs(chain[2], x))
    reloaded.close()


def compile_warnings(caplog):
    """The WARNING lines about SOLVER.COMPILE (the blob runs keep no weights: that is warned too)."""
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [line for line in lines if 'SOLVER.COMPILE' in line]


def test_a_compile_failure_falls_back_to_eager_with_one_warning(blobs, tmp_path, caplog):
    caplog.set_level(logging.INFO)  # the solvers' logger at INFO, whatever an earlier test left: no level warning
    failing = {'ENABLED': True, 'BACKEND': compile_support.FAILING_BACKEND}
    eager = train(blob_solver(blobs, tmp_path / 'eager'), 1)
    solver = train(blob_solver(blobs, tmp_path / 'failing', failing), 1)
    warnings = compile_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert 'torch.compile of Classifier failed, running eager' in warnings[0]
    assert 'the test backend refuses every graph' in warnings[0]
    assert solver.model._compiled_call_impl is None and solver.total_iter == 6
    # the failed attempt changed nothing: the run is the eager run
    for key, value in eager.unwrapped_model.state_dict().items():
        assert torch.equal(solver.unwrapped_model.state_dict()[key], value), key


def test_strict_compile_failure_is_one_error_line(blobs, tmp_path):
    cfg = tmp_path / 'cfg.yaml'
    solver_cfg = blob_solver_cfg(blobs, tmp_path / 'run', MAX_EPOCHS=1, EVAL_DATA=None, METRICS=[])
    solver_cfg['SOLVER']['COMPILE'] = {'ENABLED': True, 'BACKEND': compile_support.FAILING_BACKEND, 'STRICT': True}
    cfg.write_text(yaml.safe_dump(solver_cfg))
    res = run_tool('run_train.py', '--cfg', cfg, '--import', compile_support.__file__)
    assert res.returncode == 2, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith('error: SOLVER.COMPILE: torch.compile of Classifier failed'), res.stderr[-3000:]
    assert 'the test backend refuses every graph' in lines[-1] and 'STRICT is set' in lines[-1]
    assert 'Traceback' not in res.stderr


def test_a_compile_incompatible_model_runs_eager_with_its_reason(blobs, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    solver = blob_solver(blobs, tmp_path / 'run', COMPILED, model='EagerOnlyClassifier')
    warnings = compile_warnings(caplog)
    reason = compile_support.INCOMPATIBLE_REASON
    assert warnings == [f'SOLVER.COMPILE: EagerOnlyClassifier runs eager: {reason} (its COMPILE_INCOMPATIBLE)']
    assert solver.model._compiled_call_impl is None
    solver.close()
    with pytest.raises(ConfigError, match='EagerOnlyClassifier cannot be compiled .*STRICT=false'):
        blob_solver(blobs, tmp_path / 'strict', dict(COMPILED, STRICT=True), model='EagerOnlyClassifier')


def test_compile_with_accumulation_and_bf16_trains_as_eager(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook', 'ACCUMULATE_STEP': 2, 'USE_AMP': True, 'AMP_DTYPE': 'bf16'}]
    eager = train(blob_solver(blobs, tmp_path / 'eager', hooks=hooks), 2)
    compiled = train(blob_solver(blobs, tmp_path / 'compiled', COMPILED, hooks=hooks), 2)
    assert compiled.model._compiled_call_impl is not None  # still compiled: no fallback happened
    assert (compiled.total_iter, compiled.optimizer_steps) == (12, 6)
    for key, value in eager.unwrapped_model.state_dict().items():
        assert torch.equal(compiled.unwrapped_model.state_dict()[key], value), key


@pytest.mark.parametrize(
    'compile_cfg, words',
    [
        ({'FULL_GRAPH': True}, ['SOLVER.COMPILE.FULL_GRAPH: unknown key', 'did you mean FULLGRAPH']),
        ({'ENABLED': True, 'MODE': 'fast'}, ["SOLVER.COMPILE.MODE: must be one of None, 'default'"]),
        ({'DYNAMIC': 'yes'}, ['SOLVER.COMPILE.DYNAMIC: expected a bool']),
        (
            {'BACKEND': 'inductr'},
            ["SOLVER.COMPILE.BACKEND: 'inductr' is not a torch.compile backend; did you mean inductor"],
        ),
    ],
)
def test_bad_compile_keys_are_config_errors(blobs, tmp_path, compile_cfg, words):
    cfg = blob_solver_cfg(blobs, tmp_path / 'run')
    cfg['SOLVER']['COMPILE'] = compile_cfg
    with pytest.raises(ConfigError) as info:
        build_solver(cfg, set_up=False)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_the_default_backend_is_taken_without_listing_the_backends(monkeypatch):
    """BACKEND is checked with COMPILE off too; the default (inductor) without importing torch._dynamo, which takes
    seconds, at every start."""
    monkeypatch.setattr(torch._dynamo, 'list_backends', lambda **kw: pytest.fail('listed the backends'))
    assert compile_settings(Config({'COMPILE': {}}, path='SOLVER')).BACKEND == 'inductor'


def test_an_unknown_backend_names_the_close_ones(blobs, tmp_path):
    with pytest.raises(ConfigError, match="BACKEND: 'aot_eagr' is not a torch.compile backend; did you mean aot_eager"):
        blob_solver(blobs, tmp_path / 'run', {'ENABLED': True, 'BACKEND': 'aot_eagr'})
