"""EMAHook: the closed-form average after every optimizer step, used by eval, swapped back, saved."""

import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.errors import ConfigError
from scepter_like.model.base import BaseModel
from scepter_like.model.registry import MODELS
from scepter_like.solver.hooks import HOOKS, Hook


@HOOKS.register_class()
class EvalLogitsRecorder(Hook):
    """Keeps the logits of every eval batch (to see which weights the eval ran with)."""

    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.logits = []

    def after_iter(self, solver):
        self.logits.append(solver.iter_outputs['logits'].clone())


@MODELS.register_class()
class IntParamModel(BaseModel):
    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.lin = torch.nn.Linear(8, 3)
        self.codebook = torch.nn.Parameter(torch.zeros(4, dtype=torch.long), requires_grad=False)

    def forward(self, img, label):
        return {'loss': torch.nn.functional.cross_entropy(self.lin(img), label)}


def _linear_cfg(tmp_path, ema, **keys):
    npz = write_blobs(tmp_path / 'd.npz', n=64)
    hooks = [{'NAME': 'BackwardHook'}, dict({'NAME': 'EMAHook'}, **ema)]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, **keys)
    cfg['SOLVER']['MODEL']['BACKBONE']['HIDDEN_DIMS'] = []  # one Linear layer
    return cfg


def _weights(solver):
    return {k: v.detach().clone() for k, v in solver.unwrapped_model.state_dict().items()}


def test_ema_is_the_closed_form_average_and_eval_uses_it(tmp_path):
    cfg = _linear_cfg(
        tmp_path,
        {'DECAY': 0.8, 'DECAY_WARMUP': True, 'EXPORT': True},
        EVAL_HOOKS=[{'NAME': 'EvalLogitsRecorder'}],
        MAX_EPOCHS=2,
        ACCU_STEP=2,  # 4 batches per epoch -> 2 optimizer steps per epoch
    )
    solver = build_solver(cfg)
    recorded = []  # weights after each optimizer step
    solver.register_callback_on_epoch_begin(lambda s: recorded.append(_weights(s)) if s.progress.epoch == 0 else None)
    seen = {'steps': 0}

    def after_step(s):
        if s.optimizer_steps != seen['steps']:
            seen['steps'] = s.optimizer_steps
            recorded.append(_weights(s))

    solver.register_callback_on_iter_end(after_step)
    ema_hook = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'EMAHook')
    eval_hook = solver.hooks_dict['eval'][0]
    solver.solve()

    assert solver.optimizer_steps == 4 and len(recorded) == 5
    expected = dict(recorded[0])
    for t, w in enumerate(recorded[1:]):
        d = min(0.8, (1 + t) / (10 + t))
        expected = {k: d * expected[k] + (1 - d) * w[k] for k in w}
    assert ema_hook.updates == 4
    for k, v in expected.items():
        torch.testing.assert_close(ema_hook.ema[k], v)
        assert not torch.allclose(v, recorded[-1][k])  # the average is not the raw weights

    # swapped back: the model holds the raw weights after eval
    for k, v in _weights(solver).items():
        torch.testing.assert_close(v, recorded[-1][k])

    # the last eval ran with the EMA weights: its logits and accuracy match a manual eval of them
    x, y = _eval_arrays(solver)
    model = solver.unwrapped_model
    with torch.no_grad():
        w, b = expected['backbone.0.weight'], expected['backbone.0.bias']
        ema_logits = x @ w.T + b
        raw_logits = model.backbone(x)
    last_eval = torch.cat(eval_hook.logits[-4:])
    torch.testing.assert_close(last_eval, ema_logits)
    assert not torch.allclose(last_eval, raw_logits)
    manual_acc = (ema_logits.argmax(1) == y).float().mean().item()
    assert solver.epoch_outputs['eval']['accuracy'] == pytest.approx(manual_acc)

    # exported safetensors hold the EMA
    from safetensors.torch import load_file

    exported = load_file(str(tmp_path / 'w' / 'ema' / 'model-ema.safetensors'))
    for k, v in expected.items():
        torch.testing.assert_close(exported[k], v)


def _eval_arrays(solver):
    batches = list(solver.datas['eval'].iterate())
    return torch.cat([b['img'] for b in batches]), torch.cat([b['label'] for b in batches])


def test_ema_state_survives_a_checkpoint(tmp_path):
    cfg = _linear_cfg(tmp_path, {'DECAY': 0.5}, MAX_EPOCHS=1)
    solver = build_solver(cfg)
    solver.solve()
    ema = {k: v.clone() for k, v in solver.hooks_dict['train'][1].ema.items()}
    path = str(tmp_path / 'ck.pth')
    solver.save_checkpoint(path)

    cfg2 = _linear_cfg(tmp_path, {'DECAY': 0.5}, MAX_EPOCHS=1, RESUME_FROM=path)
    resumed = build_solver(cfg2)
    resumed.solve()  # training is already finished: only the hooks' before/after_solve run
    hook = resumed.hooks_dict['train'][1]
    assert hook.updates == 4
    for k, v in ema.items():
        torch.testing.assert_close(hook.ema[k], v)


def test_non_float_parameter_is_a_config_error_before_any_step(tmp_path):
    cfg = _linear_cfg(tmp_path, {})
    cfg['SOLVER']['MODEL'] = {'NAME': 'IntParamModel'}
    cfg['SOLVER']['EVAL_DATA'] = None
    solver = build_solver(cfg)
    with pytest.raises(ConfigError, match=r'codebook .*register_buffer'):
        solver.solve()
    assert solver.progress.total_iter == 0


def test_run_eval_path_uses_the_weights_training_evaluated_with(tmp_path):
    import logging

    from scepter_like.config import Config
    from scepter_like.solver.inference_solver import build_solver_with_weights, evaluate

    cfg = _linear_cfg(tmp_path, {'DECAY': 0.9}, MAX_EPOCHS=2)
    cfg['SOLVER']['TRAIN_HOOKS'].append({'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_LAST': True})
    solver = build_solver(cfg)
    solver.solve()
    trained = solver.epoch_outputs['eval']
    last = str(tmp_path / 'w' / 'checkpoints' / 'checkpoint-last.pth')
    ckpt = torch.load(last, weights_only=True)
    assert all(torch.equal(ckpt['eval_model'][k], ckpt['hooks']['train.1.EMAHook']['ema'][k]) for k in ckpt['model'])
    again = build_solver_with_weights(Config(cfg), last, logging.getLogger('scepter_like.test'))
    assert evaluate(again)['eval'] == trained  # exactly the numbers training logged (EMA weights)


def test_testing_a_file_tests_exactly_its_weights(tmp_path):
    """``solver.test(weights=FILE)`` after fit() runs FILE's weights: the EMA swap pauses for a file without
    ``eval_model`` too (a safetensors export), where the final EMA was tested while the log named the file."""
    from scepter_like import build_solver as session

    cfg = _linear_cfg(tmp_path, {'DECAY': 0.5}, MAX_EPOCHS=2, TEST_HOOKS=[{'NAME': 'EvalLogitsRecorder'}])
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    cfg['SOLVER']['TRAIN_HOOKS'].append({'NAME': 'SafetensorsHook', 'INTERVAL': 2})
    path = str(tmp_path / 'w' / 'safetensors' / 'weights-step-2.safetensors')
    with session(cfg) as run:
        run.fit()
        logits = run.solver.hooks_dict['test'][0].logits
        logits.clear()
        run.test(weights=path)
        got = list(logits)
        logits.clear()
        run.test(weights='last')  # the model's own weights: the final EMA swapped in
        final_ema = list(logits)
    plain = dict(cfg, SOLVER=dict(cfg['SOLVER'], TRAIN_HOOKS=[{'NAME': 'BackwardHook'}], TEST_WITH='last'))
    plain['SOLVER']['WORK_DIR'] = str(tmp_path / 'plain')
    with session(plain) as fresh:  # no EMA: the file's weights, nothing else
        fresh.test(weights=path)
        want = fresh.solver.hooks_dict['test'][0].logits
    assert not all(torch.equal(a, b) for a, b in zip(final_ema, want))  # (the file is not the final EMA)
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize('average', [{'NAME': 'EMAHook', 'DECAY': 0.5}, {'NAME': 'SWAHook'}])
def test_predict_and_test_answer_with_the_checkpoint_eval_model_in_training_and_resumed_sessions(tmp_path, average):
    """One checkpoint, one model: predict() and test('last') use the weights evaluation used (the EMA / SWA average,
    the checkpoint's ``eval_model`` that run_inference loads) in the training session and in a session resumed from
    a mid-run checkpoint to test or predict (which runs no train hook's before_solve)."""
    import copy

    import numpy as np

    from scepter_like import build_solver as session
    from scepter_like.solver.predict import predict

    npz = write_blobs(tmp_path / 'd.npz', n=64)
    hooks = [{'NAME': 'BackwardHook'}, average, {'NAME': 'CheckpointHook', 'INTERVAL': 1}]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=3)
    cfg['SOLVER']['MODEL']['BACKBONE']['HIDDEN_DIMS'] = []
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    x = np.load(npz)['x']

    def answers_with_eval_model(run, path):
        model = copy.deepcopy(run.model)
        model.load_state_dict(torch.load(path, weights_only=True)['eval_model'])
        want = predict(model, {'img': x}, 256, torch.device('cpu'))['logits']
        np.testing.assert_array_equal(run.predict({'img': x})['logits'], want)
        assert run.test('last') == run.test(weights=path)

    checkpoints = tmp_path / 'w' / 'checkpoints'
    with session(cfg) as run:
        run.fit()
        answers_with_eval_model(run, str(checkpoints / 'checkpoint-epoch-3.pth'))
    mid_run = str(checkpoints / 'checkpoint-epoch-2.pth')
    with session(dict(cfg, SOLVER=dict(cfg['SOLVER'], RESUME_FROM=mid_run))) as run:
        raw = run.model.state_dict()
        assert not all(torch.equal(raw[k], v) for k, v in torch.load(mid_run, weights_only=True)['eval_model'].items())
        answers_with_eval_model(run, mid_run)


@pytest.mark.parametrize(
    'averages',
    [
        [{'NAME': 'EMAHook', 'DECAY': 0.8}, {'NAME': 'SWAHook', 'START_EPOCH': 2}],
        [{'NAME': 'EMAHook', 'DECAY': 0.8}, {'NAME': 'EMAHook', 'DECAY': 0.5}],
    ],
)
def test_two_averages_leave_the_training_weights_exactly_as_they_were(tmp_path, averages):
    """Each eval with two averaging hooks restores the training weights bit for bit (two swaps restoring in the
    order they swapped in left the first average in the model, and training went on from it); the eval runs
    with the average of the hook added last that has one."""
    cfg = _linear_cfg(tmp_path, {}, MAX_EPOCHS=4)
    cfg['SOLVER']['TRAIN_HOOKS'] = [{'NAME': 'BackwardHook'}] + averages
    solver = build_solver(cfg)
    hooks = [h for h in solver.hooks_dict['train'] if type(h).__name__ in ('EMAHook', 'SWAHook')]
    ends, starts, evaluated, expected = [], [], [], []
    solver.register_callback_on_epoch_end(lambda s: ends.append(_weights(s)))
    solver.register_callback_on_epoch_begin(lambda s: starts.append(_weights(s)) if s.progress.epoch else None)

    def at_eval(s):
        if len(evaluated) == s.progress.epoch:  # the pass's first batch
            evaluated.append(_weights(s))
            later = hooks[1].averaged_weights(s) if hasattr(hooks[1], 'averaged') else hooks[1].ema
            expected.append({k: v.clone() for k, v in (later or hooks[0].ema).items()})

    solver.register_stage_callback('before_iter', at_eval, mode='eval')
    solver.solve()

    assert len(starts) == 3 and len(evaluated) == 4
    for end, start in zip(ends, starts):
        assert all(torch.equal(end[k], start[k]) for k in end)
    for seen, want in zip(evaluated, expected):
        assert all(torch.equal(seen[k], want[k]) for k in want)
