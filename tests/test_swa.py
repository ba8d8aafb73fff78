"""SWAHook: the average of the per-epoch weights, BatchNorm statistics recomputed, used by eval."""

import copy

import numpy as np
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.solver.hooks import HOOKS, Hook


@HOOKS.register_class()
class SwaEvalLogitsRecorder(Hook):
    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.logits = []

    def before_all_iter(self, solver):
        self.logits = []

    def after_iter(self, solver):
        self.logits.append(solver.iter_outputs['logits'].clone())


def _image_blobs(tmp_path):
    path = write_blobs(tmp_path / 'flat.npz', n=64, dim=16)
    data = np.load(path)
    out = str(tmp_path / 'img.npz')
    np.savez(out, x=data['x'].reshape(-1, 4, 4), y=data['y'])
    return out


def _params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_swa_averages_epochs_recomputes_bn_and_eval_uses_it(tmp_path):
    npz = _image_blobs(tmp_path)
    swa = {'NAME': 'SWAHook', 'START_EPOCH': 2, 'SWA_LR': 0.05, 'EXPORT': True}
    cfg = blob_solver_cfg(
        npz,
        tmp_path / 'w',
        hooks=[{'NAME': 'BackwardHook'}, swa],
        MAX_EPOCHS=3,
        EVAL_HOOKS=[{'NAME': 'SwaEvalLogitsRecorder'}],
        DEFAULT_LOG_HOOK=False,  # (the hooks are indexed below)
    )
    cfg['SOLVER']['MODEL']['BACKBONE'] = {'NAME': 'ConvNet', 'IN_CHANNELS': 1, 'CHANNELS': [4], 'OUT_DIM': 3}
    solver = build_solver(cfg)
    per_epoch, lrs = [], []
    solver.register_callback_on_epoch_end(lambda s: per_epoch.append(_params(s.unwrapped_model)))
    solver.register_callback_on_epoch_begin(lambda s: lrs.append(s.optimizer.param_groups[0]['lr']))
    raw = {}
    solver.register_callback_on_epoch_end(lambda s: raw.update(copy.deepcopy(s.unwrapped_model.state_dict())))
    hook = solver.hooks_dict['train'][1]
    solver.solve()

    assert hook.n_averaged == 2 and len(per_epoch) == 3
    assert lrs == [0.1, 0.1, 0.05]  # SWALR took over after the first averaged epoch
    model = solver.unwrapped_model
    for k, v in _params(model).items():
        torch.testing.assert_close(v, (per_epoch[1][k] + per_epoch[2][k]) / 2)

    # BN statistics: those of the averaged weights over the train data (cumulative average)
    manual = copy.deepcopy(model)
    bn = manual.backbone.features[1]
    bn.reset_running_stats()
    bn.momentum = None
    manual.train()
    with torch.no_grad():
        for batch in solver.datas['train'].iterate():
            manual(**batch)
    torch.testing.assert_close(model.backbone.features[1].running_mean, bn.running_mean)
    torch.testing.assert_close(model.backbone.features[1].running_var, bn.running_var)
    assert not torch.allclose(raw['backbone.features.1.running_mean'], bn.running_mean)

    # the last eval ran with the average (BN included), not with the raw weights
    manual.eval()
    batches = list(solver.datas['eval'].iterate())
    with torch.no_grad():
        expected = torch.cat([manual(img=b['img'])['logits'] for b in batches])
    logits = torch.cat(solver.hooks_dict['eval'][0].logits)
    torch.testing.assert_close(logits, expected)
    raw_model = copy.deepcopy(model)
    raw_model.load_state_dict(raw)
    raw_model.eval()
    with torch.no_grad():
        assert not torch.allclose(logits, torch.cat([raw_model(img=b['img'])['logits'] for b in batches]))

    from safetensors.torch import load_file

    exported = load_file(str(tmp_path / 'w' / 'swa' / 'model-swa.safetensors'))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(exported[k], v)

    # the average and SWALR state live in the checkpoint (weights_only-loadable)
    from scepter_like.solver.checkpoint_state import load_checkpoint_file

    solver.save_checkpoint(str(tmp_path / 'ck.pth'))
    state = load_checkpoint_file(str(tmp_path / 'ck.pth'))['hooks']['train.1.SWAHook']
    assert int(state['averaged']['n_averaged']) == 2 and state['scheduler']['_anneal_strategy'] == 'cos'


def test_an_epoch_a_stop_cuts_short_is_averaged_once_when_the_resumed_run_finishes_it(tmp_path):
    """A stop mid-epoch (a signal, request_stop) ends the epoch early: it is not averaged then, or the resumed run
    that finishes it would average it a second time."""
    npz = _image_blobs(tmp_path)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'SWAHook', 'START_EPOCH': 2, 'SWA_LR': 0.05}]

    def config(work_dir, **solver):
        cfg = blob_solver_cfg(npz, work_dir, hooks=hooks, MAX_EPOCHS=3, DEFAULT_LOG_HOOK=False, **solver)
        cfg['SOLVER']['MODEL']['BACKBONE'] = {'NAME': 'ConvNet', 'IN_CHANNELS': 1, 'CHANNELS': [4], 'OUT_DIM': 3}
        return cfg

    whole = build_solver(config(tmp_path / 'whole'))
    whole.solve()
    cut = build_solver(config(tmp_path / 'cut'))
    steps = cut.progress.epoch_iters['train']
    cut.register_callback_on_iter_end(lambda s: s.progress.total_iter == steps + 2 and s.request_stop('test'))
    cut.solve()
    assert not cut.progress.epoch_finished and cut.hooks_dict['train'][1].n_averaged == 0
    cut.save_checkpoint(str(tmp_path / 'stopped.pth'))
    resumed = build_solver(config(tmp_path / 'resumed', RESUME_FROM=str(tmp_path / 'stopped.pth')))
    resumed.solve()
    assert resumed.hooks_dict['train'][1].n_averaged == whole.hooks_dict['train'][1].n_averaged == 2
    for k, v in whole.unwrapped_model.state_dict().items():
        torch.testing.assert_close(resumed.unwrapped_model.state_dict()[k], v, rtol=0, atol=0)


def test_a_best_checkpoint_chosen_by_the_average_holds_it_and_the_final_test_uses_it(tmp_path):
    """The best checkpoint carries the SWA average its evaluation used (``eval_model``), and the final test runs
    exactly those weights: it held the raw weights, and the test ran the end-of-run average instead while the
    log named the best file."""
    import logging

    from scepter_like.config import Config
    from scepter_like.solver.inference_solver import build_solver_with_weights, evaluate

    rng = np.random.default_rng(0)  # noise labels: the accuracy goes up and down, so the best is not the end
    npz = str(tmp_path / 'noise.npz')
    np.savez(npz, x=rng.normal(size=(64, 8)).astype(np.float32), y=rng.integers(0, 3, 64).astype(np.int64))
    checkpoints = {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'SAVE_BEST_BY': '+accuracy', 'SAVE_LAST': True}
    hooks = [{'NAME': 'BackwardHook'}, checkpoints, {'NAME': 'SWAHook', 'START_EPOCH': 1}]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=4, EVAL_INTERVAL=1)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])  # the test repeats an evaluation exactly
    solver = build_solver(cfg)
    solver.solve()
    best_value = next(h for h in solver.hooks_dict['train'] if type(h).__name__ == 'CheckpointHook').best_value
    assert solver.epoch_outputs['eval']['accuracy'] != best_value  # (the end's average is not the best)
    assert solver.epoch_outputs['test']['accuracy'] == best_value
    best = str(tmp_path / 'w' / 'checkpoints' / 'checkpoint-best.pth')
    ckpt = torch.load(best, weights_only=True)
    assert not all(torch.equal(ckpt['eval_model'][k], v) for k, v in ckpt['model'].items())  # the average
    again = build_solver_with_weights(Config(cfg), best, logging.getLogger('scepter_like.test'))
    assert evaluate(again)['eval']['accuracy'] == best_value  # run_eval reproduces the evaluation that chose it
