"""What used to be silent or surprising in a training run, now said or done as a newcomer expects.

The job is the blob classifier of tests/helpers.py, in this process (``build_solver`` of the
helpers, or tools/run_train.py's ``main`` under ``scepter_like.cli.run``).
"""

import glob
import json
import logging
import os
import re
import signal
import sys
import textwrap

import pytest
import torch
import yaml
from conftest import REPO
from helpers import blob_solver_cfg, build_solver, write_blobs
from newcomer_support import one_error_line, tool_main

from scepter_like.cli import run
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.metrics_log import read_metrics

run_train = tool_main('run_train')
run_eval = tool_main('run_eval')


@pytest.fixture(scope='module')
def blobs(tmp_path_factory):
    return write_blobs(tmp_path_factory.mktemp('blobs') / 'blobs.npz')


def train(tmp_path, cfg, *words, name='job.yaml'):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return run(run_train, ['--cfg', str(path), *words])


def records(work_dir):
    return read_metrics(os.path.join(work_dir, 'metrics.jsonl'))


def test_a_train_run_without_optimizer_is_an_error(blobs, tmp_path, capsys):
    cfg = blob_solver_cfg(blobs, tmp_path / 'run', OPTIMIZER=None)
    assert train(tmp_path, cfg) == 2
    line = one_error_line(capsys)
    assert line.startswith('error: SOLVER.OPTIMIZER: a training run (TRAIN_DATA) needs an optimizer')
    assert ' step ' not in capsys.readouterr().out


def test_eval_data_without_metrics_warns_that_it_reports_nothing(blobs, tmp_path, caplog):
    build_solver(blob_solver_cfg(blobs, tmp_path / 'a', METRICS=[]))
    assert (
        'SOLVER.EVAL_DATA is evaluated, but with no METRICS (and no EVAL_HOOKS) the evaluation reports nothing; add'
        ' METRICS, e.g. [{NAME: AccuracyMetric}]\n' in caplog.text  # the Classifier's own suggestion
    )
    caplog.clear()
    cfg = blob_solver_cfg(blobs, tmp_path / 'r', METRICS=[])
    cfg['SOLVER']['MODEL']['LOSS'] = {'NAME': 'MSELoss'}  # a regression: no accuracy to report
    build_solver(cfg)
    assert 'reports nothing; add METRICS, e.g. [{NAME: MSEMetric, KEYS: [logits, label]}]\n' in caplog.text
    caplog.clear()
    build_solver(blob_solver_cfg(blobs, tmp_path / 'b'))
    assert 'reports nothing' not in caplog.text


def test_log_hook_is_added_by_default_and_a_key_turns_it_off(blobs, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'a', hooks=[{'NAME': 'BackwardHook'}]))
    assert [type(h).__name__ for h in solver.hooks_dict['train']] == ['BackwardHook', 'LogHook']
    assert 'has no LogHook: added one' in caplog.text
    solver.close()
    off = build_solver(blob_solver_cfg(blobs, tmp_path / 'b', DEFAULT_LOG_HOOK=False))
    assert [type(h).__name__ for h in off.hooks_dict['train']] == ['BackwardHook']
    off.close()


def test_a_run_without_a_checkpoint_hook_is_warned_that_it_keeps_no_weights(blobs, tmp_path, caplog):
    """A config dict without CheckpointHook trained, kept no weights and said nothing."""
    no_weights = 'SOLVER.TRAIN_HOOKS has no CheckpointHook: this run writes no weights; add {NAME: CheckpointHook}'
    build_solver(blob_solver_cfg(blobs, tmp_path / 'a', hooks=[{'NAME': 'BackwardHook'}])).close()
    (warning,) = [r for r in caplog.records if r.getMessage().startswith(no_weights)]
    assert warning.levelname == 'WARNING'
    for hook in ('CheckpointHook', 'SafetensorsHook'):
        caplog.clear()
        build_solver(blob_solver_cfg(blobs, tmp_path / hook, hooks=[{'NAME': 'BackwardHook'}, {'NAME': hook}])).close()
        assert 'has no CheckpointHook' not in caplog.text


@HOOKS.register_class()
class EpochGapHook(Hook):
    """Logs a scalar from after_epoch and one from before_epoch, outside any step."""

    para_dict = {}

    def before_epoch(self, solver):
        solver.log_scalar('epoch_start_marker', solver.progress.epoch + 10)

    def after_epoch(self, solver):
        solver.log_scalar('weight_norm', torch.linalg.vector_norm(next(solver.model.parameters()).detach()))


def test_log_scalar_outside_a_step_is_an_epoch_scalar(blobs, tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'EpochGapHook'}, {'NAME': 'TensorboardLogHook'}]
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'run', hooks=hooks, MAX_EPOCHS=2))
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        solver.solve()
    solver.close()
    assert re.search(r'train after_epoch of epoch 2/2: weight_norm: [0-9.]+', caplog.text)
    assert 'train before_epoch of epoch 1/2: epoch_start_marker: 10' in caplog.text
    lines = [r for r in records(tmp_path / 'run') if r['kind'] == 'epoch']
    assert [(r['epoch'], r['stage'], sorted(r['values'])) for r in lines] == [
        (1, 'before_epoch', ['epoch_start_marker']),
        (1, 'after_epoch', ['weight_norm']),
        (2, 'before_epoch', ['epoch_start_marker']),
        (2, 'after_epoch', ['weight_norm']),
    ]
    acc = EventAccumulator(str(tmp_path / 'run' / 'tensorboard'))
    acc.Reload()
    norms = acc.Scalars('train/weight_norm')
    assert [e.step for e in norms] == [6, 12] and norms[1].value == pytest.approx(lines[3]['values']['weight_norm'])


@HOOKS.register_class()
class StopAtStepHook(Hook):
    para_dict = {}

    def after_iter(self, solver):
        if solver.progress.total_iter == 3:
            solver.request_stop('enough of this for the test')


def test_request_stop_logs_the_reason_and_who_asked(blobs, tmp_path, caplog):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'StopAtStepHook'}]
    solver = build_solver(blob_solver_cfg(blobs, tmp_path / 'run', hooks=hooks))
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        solver.solve()
    solver.close()
    assert solver.progress.total_iter == 3
    assert (
        'training stops at the next step boundary: enough of this for the test'
        ' (asked by StopAtStepHook (SOLVER.TRAIN_HOOKS[1]))' in caplog.text
    )


def best_cfg(blobs, work_dir, TEST_WITH='best', **keys):  # noqa: N803  (the config key's name)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'SAVE_BEST_BY': '+accuracy', **keys}]
    cfg = blob_solver_cfg(blobs, work_dir, hooks=hooks, MAX_EPOCHS=4, TEST_WITH=TEST_WITH)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    return cfg


def test_run_eval_leaves_the_runs_metrics_jsonl_alone_and_takes_run_best(blobs, tmp_path, capsys):
    cfg = best_cfg(blobs, tmp_path / 'run')
    assert train(tmp_path, cfg) == 0
    capsys.readouterr()
    with open(tmp_path / 'run' / 'metrics.jsonl', 'rb') as f:
        before = f.read()
    words = ['--cfg', str(tmp_path / 'job.yaml'), '--checkpoint', f'{tmp_path / "run"}:best']
    assert run(run_eval, words) == 0, capsys.readouterr().err
    with open(tmp_path / 'run' / 'metrics.json') as f:
        assert json.load(f)['checkpoint'] == str(tmp_path / 'run' / 'checkpoints' / 'checkpoint-best.pth')
    with open(tmp_path / 'run' / 'metrics.jsonl', 'rb') as f:
        assert f.read() == before
    assert run(run_eval, ['--cfg', str(tmp_path / 'job.yaml'), '--checkpoint', f'{tmp_path}:best']) == 2
    assert 'is a folder without a best checkpoint' in one_error_line(capsys)


@HOOKS.register_class()
class SpoilLastEpochHook(Hook):
    """Zeroes the weights at the start of the last epoch: the last weights are bad, the best are not."""

    para_dict = {}

    def before_epoch(self, solver):
        if solver.progress.epoch == solver.max_epochs - 1:
            with torch.no_grad():
                for p in solver.model.parameters():
                    p.zero_()


@pytest.mark.parametrize('test_with', ['best', 'last'])
def test_the_final_test_uses_the_best_weights_unless_told_last(test_with, blobs, tmp_path, caplog):
    cfg = best_cfg(blobs, tmp_path / 'run', TEST_WITH=test_with)
    cfg['SOLVER']['TRAIN_HOOKS'].append({'NAME': 'SpoilLastEpochHook'})
    solver = build_solver(cfg)
    trained = {}
    solver.register_callback_on_epoch_end(
        lambda s: trained.update({k: v.clone() for k, v in s.model.state_dict().items()})
    )
    with caplog.at_level(logging.INFO, logger='scepter_like'):
        solver.solve()
    solver.close()
    accuracy = solver.epoch_outputs['test']['accuracy']
    if test_with == 'best':
        assert 'testing with the weights of' in caplog.text and accuracy > 0.8
    else:
        assert 'testing with the weights of' not in caplog.text and accuracy < 0.6
    for k, v in solver.model.state_dict().items():
        assert torch.equal(v, trained[k]), k  # the weights training ended with are back after the test


def test_checkpoint_hook_keeps_the_top_k(blobs, tmp_path):
    cfg = best_cfg(blobs, tmp_path / 'run', SAVE_TOP_K=2, INTERVAL=0)
    cfg['SOLVER']['MAX_EPOCHS'] = 5
    solver = build_solver(cfg)
    seen = []
    solver.register_stage_callback('after_epoch', lambda s: seen.append(s.epoch_outputs['eval']['accuracy']), 'eval')
    solver.solve()
    solver.close()
    folder = tmp_path / 'run' / 'checkpoints'
    kept = sorted(os.path.basename(p) for p in glob.glob(str(folder / 'checkpoint-top-*.pth')))
    ranked = sorted(range(len(seen)), key=lambda i: (-seen[i], i))[:2]
    assert kept == sorted(f'checkpoint-top-epoch-{i + 1}.pth' for i in ranked)
    assert (folder / 'checkpoint-best.pth').is_file()


def bad_metric_cfg(blobs, work_dir, **hook_keys):
    cfg = blob_solver_cfg(blobs, work_dir, hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', **hook_keys}])
    cfg['SOLVER']['METRICS'] = [{'NAME': 'AccuracyMetric', 'KEYS': ['logit', 'label']}]  # the model gives logits
    return cfg


def test_a_broken_eval_fails_before_the_first_train_step(blobs, tmp_path, capsys):
    cfg = bad_metric_cfg(blobs, tmp_path / 'run', STEP_INTERVAL=1)
    assert train(tmp_path, cfg) == 2
    line = one_error_line(capsys)
    assert "AccuracyMetric needs keys ['logit'] in the model outputs; " in line and 'SOLVER.EXTRA_KEYS lists it' in line
    assert not glob.glob(str(tmp_path / 'run' / 'checkpoints' / '*.pth'))  # not one step trained
    cfg['SOLVER']['METRICS'][0]['KEYS'] = ['logits', 'label']  # fixed: the same command in the same WORK_DIR
    assert train(tmp_path, cfg) == 0, capsys.readouterr().err


def test_a_run_that_failed_before_its_first_evaluation_does_not_block_the_fixed_rerun(blobs, tmp_path, capsys):
    cfg = bad_metric_cfg(blobs, tmp_path / 'run', STEP_INTERVAL=1)
    cfg['SOLVER']['SANITY_EVAL_BATCHES'] = 0  # the broken eval is met after a trained epoch and its checkpoints
    assert train(tmp_path, cfg) == 2
    capsys.readouterr()
    assert glob.glob(str(tmp_path / 'run' / 'checkpoints' / '*.pth'))
    cfg['SOLVER']['METRICS'][0]['KEYS'] = ['logits', 'label']
    assert train(tmp_path, cfg) == 0, capsys.readouterr().err
    moved = glob.glob(str(tmp_path / 'run' / 'records_history' / '*' / 'checkpoints' / '*.pth'))
    assert moved  # set aside, not deleted
    assert [r['kind'] for r in records(tmp_path / 'run')][0] == 'start'
    # a run that evaluated stays protected
    assert train(tmp_path, cfg) == 2
    assert 'holds the checkpoints of an earlier run' in one_error_line(capsys)


@pytest.mark.slow
def test_a_smoke_test_of_every_shipped_config_phase_after_the_end_is_a_warning(tmp_path, capsys):
    cfg = os.path.join(REPO, 'configs', 'pinn', 'poisson2d.yaml')
    words = [
        '--cfg',
        cfg,
        f'SOLVER.WORK_DIR={tmp_path / "run"}',
        'SOLVER.MAX_STEPS=2',
        'SOLVER.EVAL_DATA.RESOLUTION=[11, 11]',
    ]
    assert run(run_train, words) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert 'WARNING SOLVER.OPTIMIZER_PHASES[0].AT_STEP: phase 1 would start at step 2000' in out
    assert 'so it does not run' in out


@HOOKS.register_class()
class SignalAtStepHook(Hook):
    """Sends this process SIGUSR1 (a stop signal) in step 6, the last of epoch 1."""

    para_dict = {}

    def after_iter(self, solver):
        if solver.progress.total_iter == 6:
            os.kill(os.getpid(), signal.SIGUSR1)


@pytest.mark.parametrize('eval_interval', [1, 2])
def test_the_resume_line_promises_the_cut_off_evaluation_only_when_one_is_due(eval_interval, blobs, tmp_path, capsys):
    """A stop signal at an epoch's end: the evaluation after it runs first on resume only when it is due."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'SignalAtStepHook'}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'run', hooks=hooks, MAX_EPOCHS=3, EVAL_INTERVAL=eval_interval)
    assert train(tmp_path, cfg) == 128 + signal.SIGUSR1
    capsys.readouterr()
    hooks[1] = {'NAME': 'LogHook'}  # no signal this time
    assert train(tmp_path, cfg, 'SOLVER.RESUME_FROM=auto') == 0, capsys.readouterr().err
    goes_on = 'the evaluation of epoch 1 first' if eval_interval == 1 else 'goes on at epoch 2, iter 1'
    assert re.search(rf'resumed from \S+preempted-step-6.pth after step 6: {goes_on}\n', capsys.readouterr().out)
    evaluated = [r['epoch'] for r in records(tmp_path / 'run') if r['kind'] == 'eval']
    assert evaluated == ([1, 2, 3] if eval_interval == 1 else [2, 3])


@pytest.mark.parametrize('eval_interval', [1, 2])
def test_a_step_checkpoint_at_an_epochs_last_step_resumes_at_the_next_epoch(eval_interval, blobs, tmp_path, capsys):
    """STEP_INTERVAL 6 saves after step 6, the last of epoch 1, before the epoch is marked finished: the run goes on
    at epoch 2, iter 1 (or epoch 1's evaluation first), not at 'epoch 1, iter 7' of an epoch of 6."""
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': 6}]
    cfg = blob_solver_cfg(blobs, tmp_path / 'run', hooks=hooks, MAX_EPOCHS=1, EVAL_INTERVAL=eval_interval)
    assert train(tmp_path, cfg) == 0, capsys.readouterr().err
    capsys.readouterr()
    step_6 = tmp_path / 'run' / 'checkpoints' / 'checkpoint-step-6.pth'
    words = [f'SOLVER.RESUME_FROM={step_6}', f'SOLVER.WORK_DIR={tmp_path / "more"}', 'SOLVER.MAX_EPOCHS=2']
    assert train(tmp_path, cfg, *words) == 0, capsys.readouterr().err
    goes_on = 'the evaluation of epoch 1 first' if eval_interval == 1 else 'goes on at epoch 2, iter 1'
    assert re.search(rf'resumed from \S+checkpoint-step-6.pth after step 6: {goes_on}\n', capsys.readouterr().out)


def test_resume_from_a_run_folder_and_a_longer_schedule_says_what_happens(blobs, tmp_path, capsys):
    cfg = blob_solver_cfg(
        blobs, tmp_path / 'first', hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}], MAX_EPOCHS=2,
        LR_SCHEDULER={'NAME': 'CosineAnnealingLR', 'T_MAX': '${SOLVER.MAX_EPOCHS}'},
    )  # fmt: skip
    assert train(tmp_path, cfg) == 0
    capsys.readouterr()
    words = [
        f'SOLVER.RESUME_FROM={tmp_path / "first"}',
        f'SOLVER.WORK_DIR={tmp_path / "second"}',
        'SOLVER.MAX_EPOCHS=4',
    ]
    assert train(tmp_path, cfg, *words) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    latest = tmp_path / 'first' / 'checkpoints' / 'checkpoint-epoch-2.pth'
    assert f'resumed from {latest} after step ' in out
    warning = re.search(r'WARNING (.*comes from a run of another length.*)', out).group(1)
    assert 'MAX_EPOCHS 2 -> 4' in warning and 'CosineAnnealingLR' in warning
    assert 'T_max=2 (this config: 4)' in warning and 'rises' in warning
    assert 'other settings' not in out  # the same rate (T_max is named above): nothing more to say
    # another learning rate on resume: the checkpoint's optimizer keeps its own, and the resume says so
    words = [f'SOLVER.RESUME_FROM={tmp_path / "first"}', f'SOLVER.WORK_DIR={tmp_path / "third"}', 'SOLVER.MAX_EPOCHS=3']
    assert train(tmp_path, cfg, *words, 'SOLVER.OPTIMIZER.LEARNING_RATE=0.01') == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "made with other settings than this config's: learning rate 0.1 (this config: 0.01). A resume goes on" in out


@pytest.mark.parametrize('importer_first', [True, False])
def test_a_user_file_imported_by_another_registers_once(importer_first, tmp_path, caplog, monkeypatch):
    from scepter_like.cli import import_modules

    monkeypatch.chdir(tmp_path)
    tag = 'a' if importer_first else 'b'  # names of their own: each case registers anew
    (tmp_path / f'shared_{tag}.py').write_text(
        textwrap.dedent(f"""
        from scepter_like.solver.hooks.hook import Hook
        from scepter_like.solver.hooks.registry import HOOKS


        @HOOKS.register_class()
        class SharedHook{tag.upper()}(Hook):
            para_dict = {{}}
        """)
    )
    (tmp_path / f'main_{tag}.py').write_text(f'import shared_{tag}  # noqa: F401\n')
    files = [f'main_{tag}.py', f'shared_{tag}.py']
    with caplog.at_level(logging.WARNING):
        import_modules(files if importer_first else files[::-1])
    assert 'replacing' not in caplog.text, caplog.text
    hook = HOOKS.get(f'SharedHook{tag.upper()}')
    modules = [m for m in list(sys.modules.values()) if getattr(m, f'SharedHook{tag.upper()}', None) is hook]
    assert len({id(m) for m in modules}) == 1  # one module object, whatever names it is entered under


@HOOKS.register_class()
class OutputsSeenHook(Hook):
    """Records the step outputs a hook sees at the start of each train epoch."""

    para_dict = {}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.seen = []

    def before_epoch(self, solver):
        self.seen.append(sorted(solver.iter_outputs))

    def before_iter(self, solver):
        if solver.mode == 'eval' and solver.progress.iters['eval'] == 0:
            self.seen.append(('eval', sorted(solver.iter_outputs)))


def test_train_hooks_see_no_outputs_of_an_eval_pass_as_in_scepter_where_they_are_kept_per_mode(blobs, tmp_path):
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'OutputsSeenHook'}]
    cfg = blob_solver_cfg(
        blobs, tmp_path / 'run', hooks=hooks, SANITY_EVAL_BATCHES=2, EVAL_HOOKS=[{'NAME': 'OutputsSeenHook'}]
    )
    solver = build_solver(cfg)
    solver.solve()
    solver.close()
    seen = next(h for h in solver.hooks_dict['train'] if isinstance(h, OutputsSeenHook)).seen
    assert seen == [[], ['loss']]  # none of the sanity pass; then the last train step's, not the evaluation's
    seen = next(h for h in solver.hooks_dict['eval'] if isinstance(h, OutputsSeenHook)).seen
    assert [s for s in seen if isinstance(s, tuple)] == [('eval', [])] * 2  # each evaluation's first step: none
