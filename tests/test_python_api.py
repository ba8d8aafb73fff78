"""The Python API (``from scepter_like import build_solver``): fit, test, predict, close, as docs/python_api.md says.

The job is the blob classifier of tests/helpers.py with a best checkpoint and test data.
"""

import io
import logging
import os
import re

import numpy as np
import pytest
import torch
import yaml
from conftest import DIGITS_CFG
from helpers import blob_solver_cfg, write_blobs
from newcomer_support import tool_main

from scepter_like.cli import run
from scepter_like.errors import ConfigError, UserError
from scepter_like.utils.metrics_log import read_metrics

run_train = tool_main('run_train')


def api_cfg(root, work_dir, **solver_keys):
    npz = write_blobs(root / 'blobs.npz')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'SAVE_BEST_BY': '+accuracy'}]
    cfg = blob_solver_cfg(npz, work_dir, hooks=hooks, **solver_keys)
    cfg['SOLVER']['TEST_DATA'] = dict(cfg['SOLVER']['EVAL_DATA'])
    cfg['SOLVER']['MAX_EPOCHS'] = 3
    return cfg


def no_user_logging(monkeypatch):
    """Logging as in a program that configured none: pytest's capture handlers (added to the root logger
    for each test phase) taken off for the rest of the test."""
    monkeypatch.setattr(logging.getLogger(), 'handlers', [])
    ours = logging.getLogger('scepter_like')
    monkeypatch.setattr(ours, 'handlers', [])
    monkeypatch.setattr(ours, 'propagate', True)
    ours.setLevel(logging.NOTSET)  # (own_logger_restored sets it back)


def test_fit_test_predict_close(tmp_path):
    from scepter_like import build_solver

    cfg = api_cfg(tmp_path, tmp_path / 'run')
    with build_solver(cfg, overrides=['SOLVER.EVAL_INTERVAL=1']) as solver:
        history = solver.fit()
        assert [row['epoch'] for row in history] == [1, 2, 3]
        assert all(0.0 <= row['accuracy'] <= 1.0 and row['step'] > 0 for row in history)
        result = solver.test(weights='best')
        assert set(result) == {'accuracy'} and result['accuracy'] > 0.8
        x = np.load(tmp_path / 'blobs.npz')['x'].astype(np.float64)  # numpy's default dtype
        out = solver.predict({'img': x})
        assert isinstance(out['logits'], np.ndarray) and out['logits'].shape == (len(x), 3)
        assert out['logits'].dtype == np.float32
        with pytest.raises(UserError, match=r'fit\(\) trains once per build_solver\(\)'):
            solver.fit()
    evals = [r for r in read_metrics(os.path.join(tmp_path, 'run', 'metrics.jsonl')) if r['kind'] == 'eval']
    assert [r['values']['accuracy'] for r in evals] == [row['accuracy'] for row in history]  # closed: written out
    # the config given as a dict is the caller's still
    assert 'TEST_WITH' not in cfg['SOLVER']
    records = (tmp_path / 'run' / 'metrics.jsonl').read_text()
    for call in (solver.fit, solver.test):  # closed: test() wrote metrics.jsonl, not std_log.txt; fit() trained
        with pytest.raises(UserError, match=rf'^{call.__name__}\(\) after close\(\): the session is closed'):
            call()
    assert (tmp_path / 'run' / 'metrics.jsonl').read_text() == records


def test_a_test_before_fit_warns_it_scores_the_initial_weights_and_names_the_choices(tmp_path):
    """test() / test('best') of a session that neither trained nor loaded weights scored random weights with an INFO
    line; test(None) was a TypeError, test('Best') a missing file."""
    from scepter_like import build_solver

    logger = logging.getLogger('test_python_api.untrained')
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    untrained = "testing the model's initial (untrained) weights: this session has not trained (fit())"
    with build_solver(api_cfg(tmp_path, tmp_path / 'run'), logger=logger) as solver:
        for weights in ('best', None, 'last'):
            records.clear()
            assert set(solver.test(weights)) == {'accuracy'}
            (warning,) = [r for r in records if r.levelno == logging.WARNING]
            assert warning.getMessage().startswith(untrained)
        for word in ('Best', 'latest'):
            with pytest.raises(
                ConfigError, match=rf"^the test weights \('{word}': 'best', 'last' or a checkpoint path\)"
            ):
                solver.test(word)
        solver.fit()
        records.clear()
        solver.test('last')
        assert not [r for r in records if r.levelno >= logging.WARNING]


def test_a_stopped_fit_says_how_to_go_on_in_its_work_dir(tmp_path):
    """The Preempted message said only SOLVER.RESUME_FROM=auto: a notebook that time-stamps WORK_DIR started afresh."""
    import signal

    from scepter_like import build_solver
    from scepter_like.errors import Preempted

    cfg = api_cfg(tmp_path, tmp_path / 'run')
    with build_solver(cfg) as solver:
        stop_at_2 = lambda s: s.progress.total_iter == 2 and os.kill(os.getpid(), signal.SIGTERM)  # noqa: E731
        solver.solver.register_callback_on_iter_end(stop_at_2)
        with pytest.raises(Preempted) as stop:
            solver.fit()
    words = re.fullmatch(r'.* rerun with (SOLVER.WORK_DIR=\S+) (SOLVER.RESUME_FROM=auto) to continue', str(stop.value))
    assert words and words.group(1) == f'SOLVER.WORK_DIR={tmp_path / "run"}'
    cfg['SOLVER']['WORK_DIR'] = str(tmp_path / 'elsewhere')  # as a cell that makes a new WORK_DIR each run
    with build_solver(cfg, overrides=list(words.groups())) as solver:  # the words it gave
        assert solver.solver.resumed_from and solver.solver.progress.total_iter == 2


@pytest.mark.parametrize(
    'optimizer, message',
    [
        (  # a Python str in a dict: no YAML to blame
            {'LEARNING_RATE': '1e-3'},
            "SOLVER.OPTIMIZER.LEARNING_RATE: expected a number (like 0.001), got '1e-3'; that is a string, not a"
            ' number: give the number 1e-3',
        ),
        ({'lr': 0.1}, 'SOLVER.OPTIMIZER.lr: unknown key for OPTIMIZERS.SGD; did you mean LEARNING_RATE?'),
    ],
)
def test_a_config_dict_s_wrong_value_or_short_key_gets_advice_for_a_dict(tmp_path, optimizer, message):
    from scepter_like import build_solver

    cfg = api_cfg(tmp_path, tmp_path / 'run')
    cfg['SOLVER']['OPTIMIZER'] = {'NAME': 'SGD', **optimizer}
    with pytest.raises(ConfigError) as error:
        build_solver(cfg)
    assert str(error.value).startswith(message)


def test_a_config_error_is_the_cli_line(tmp_path, capsys):
    from scepter_like import build_solver

    path = tmp_path / 'job.yaml'
    path.write_text(yaml.safe_dump(api_cfg(tmp_path, tmp_path / 'run')))
    words = ['SOLVER.MAX_EPOHS=2']
    with pytest.raises(ConfigError) as error:
        build_solver(str(path), overrides=words)
    assert run(run_train, ['--cfg', str(path), *words]) == 2
    cli_line = capsys.readouterr().err.strip()
    assert cli_line == f'error: {error.value}'
    assert 'did you mean MAX_EPOCHS' in cli_line
    with pytest.raises(ConfigError, match=r'config file not found: .*nowhere\.yaml') as missing:
        build_solver(str(tmp_path / 'nowhere.yaml'))
    assert str(missing.value).endswith('; check the path given to build_solver')  # no CLI flag for a Python caller


def test_it_prints_what_the_cli_prints(tmp_path, capsys, monkeypatch):
    from scepter_like import build_solver

    no_user_logging(monkeypatch)

    with build_solver(api_cfg(tmp_path, tmp_path / 'run')) as solver:
        solver.fit()
    out = capsys.readouterr().out
    assert re.search(r'INFO epoch 3/3 iter \d+/\d+ step \d+ loss: ', out)  # the LogHook added by default
    assert 'INFO eval epoch 3/3 (96 samples): accuracy: ' in out
    with open(tmp_path / 'run' / 'std_log.txt', encoding='utf-8') as f:
        assert 'INFO eval epoch 3/3' in f.read()
    assert logging.getLogger().handlers == []  # the root logger is never configured


def test_a_program_that_configured_logging_keeps_it(tmp_path, capsys, monkeypatch):
    from scepter_like import build_solver

    no_user_logging(monkeypatch)

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)  # the program's logging.basicConfig(level=logging.INFO, handlers=[handler])
    root.setLevel(logging.INFO)
    try:
        with build_solver(api_cfg(tmp_path, tmp_path / 'run')) as solver:
            solver.fit()
    finally:
        root.setLevel(level)
    assert any(r.getMessage().startswith('eval epoch 3/3') for r in records)
    assert 'eval epoch' not in capsys.readouterr().out  # no console handler of ours beside the program's
    assert logging.getLogger().handlers == [handler]
    assert logging.getLogger('scepter_like').handlers == []


def test_twice_in_one_process_each_run_with_its_work_dir_rule(tmp_path, capsys, monkeypatch):
    from scepter_like import build_solver

    no_user_logging(monkeypatch)

    cfg = api_cfg(tmp_path, tmp_path / 'unused')
    for name in ('first', 'second'):  # a notebook cell run again, with its own WORK_DIR
        with build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / name}']) as solver:
            solver.fit()
            consoles = [h for h in logging.getLogger('scepter_like').handlers if getattr(h, '_scepter_console', False)]
            assert len(consoles) == 1
    out = capsys.readouterr().out
    assert out.count('INFO eval epoch 3/3') == 2  # once per run: no second console handler
    with open(tmp_path / 'second' / 'std_log.txt', encoding='utf-8') as f:
        assert str(tmp_path / 'first') not in f.read()  # each run logs to its own file only
    # the same WORK_DIR again: refused as on the command line, with its line
    again = build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "first"}'])
    with pytest.raises(ConfigError, match=r'holds the checkpoints of an earlier run .*RESUME_FROM=auto'):
        again.fit()
    again.close()


def test_a_session_left_open_sets_its_log_file_aside_for_the_next_and_takes_it_back(tmp_path, capsys, monkeypatch):
    """A notebook cell run again without close(): the first run's std_log.txt took the second run's lines."""
    from scepter_like import build_solver

    no_user_logging(monkeypatch)
    cfg = api_cfg(tmp_path, tmp_path / 'unused')
    first = build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "first"}'])
    first.fit()  # and left open
    with build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "second"}']) as second:
        second.fit()
    first.test()  # the first session runs again: its own file takes its lines again
    first.close()
    with open(tmp_path / 'first' / 'std_log.txt', encoding='utf-8') as f:
        text = f.read()
    assert str(tmp_path / 'second') not in text and 'INFO test ' in text
    with open(tmp_path / 'second' / 'std_log.txt', encoding='utf-8') as f:
        text = f.read()
    assert 'INFO eval epoch 3/3' in text and 'INFO test ' not in text
    assert 'its session is open' in capsys.readouterr().out


def test_a_level_the_program_set_is_kept_and_a_quiet_logger_says_what_the_log_file_misses(
    tmp_path, capsys, monkeypatch
):
    from scepter_like import build_solver

    no_user_logging(monkeypatch)
    ours = logging.getLogger('scepter_like')
    with build_solver(api_cfg(tmp_path, tmp_path / 'first')):  # adds our console handler
        pass
    capsys.readouterr()
    ours.setLevel(logging.WARNING)  # the notebook quieted, between two sessions: logging the program configured
    with build_solver(api_cfg(tmp_path, tmp_path / 'quiet')) as solver:
        solver.fit()
    assert ours.level == logging.WARNING  # building the second session had reset it to INFO
    said = capsys.readouterr()  # no console of ours: warnings reach logging's last resort, stderr
    assert not re.search(r':\d\d INFO ', said.out + said.err) and 'gets no INFO lines' in said.err
    # the documented way: the logger at INFO, the level on a console handler of the program's own
    ours.handlers[:] = []
    ours.setLevel(logging.INFO)
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)
    ours.addHandler(console)
    with build_solver(api_cfg(tmp_path, tmp_path / 'recipe')) as solver:
        solver.fit()
    with open(tmp_path / 'recipe' / 'std_log.txt', encoding='utf-8') as f:
        assert 'INFO eval epoch 3/3' in f.read()
    assert not re.search(r':\d\d INFO ', capsys.readouterr().out)


def test_logging_basicconfig_without_a_level_leaves_the_log_file_empty_and_the_warning_says_where_from(
    tmp_path, monkeypatch
):
    from scepter_like import build_solver

    no_user_logging(monkeypatch)
    console = io.StringIO()
    monkeypatch.setattr(logging.getLogger(), 'level', logging.WARNING)  # the root's default, whatever pytest set
    logging.getLogger().addHandler(logging.StreamHandler(console))  # logging.basicConfig(stream=console)
    with build_solver(api_cfg(tmp_path, tmp_path / 'run')) as solver:
        solver.fit()
    said = console.getvalue()
    assert "'scepter_like' logger is at level WARNING (from the root logger: give logging.basicConfig level" in said
    assert (tmp_path / 'run' / 'std_log.txt').read_text() == ''  # what the warning is about


def test_test_weights_best_last_and_a_path_and_the_model_keeps_its_own(tmp_path):
    from scepter_like import build_solver

    with build_solver(api_cfg(tmp_path, tmp_path / 'run')) as solver:
        solver.fit()
        model = solver.model
        with torch.no_grad():  # weights unlike any checkpoint's: 'last' tests them, 'best' not
            for p in model.parameters():
                p.zero_()
        own = {k: v.clone() for k, v in model.state_dict().items()}
        last = solver.test(weights='last')
        best = solver.test(weights='best')
        best_path = os.path.join(solver.work_dir, 'checkpoints', 'checkpoint-best.pth')
        by_path = solver.test(weights=best_path)
        by_run = solver.test(weights=f'{solver.work_dir}:best')
        assert last['accuracy'] < 0.6 < best['accuracy']
        assert by_path == best == by_run
        for k, v in model.state_dict().items():
            assert torch.equal(v, own[k]), k  # the model holds its own weights again
    # after fit() each test joins the run's metrics.jsonl
    tests = [r for r in read_metrics(os.path.join(tmp_path, 'run', 'metrics.jsonl')) if r['kind'] == 'test']
    assert tests and tests[-1]['values']['accuracy'] == by_run['accuracy']


def test_a_test_line_names_its_weights_and_another_runs_weights_write_none(tmp_path):
    """test() and test('last') at one step are two lines, each naming its weights; a test of another run's
    checkpoint is no result of this run: it writes no line."""
    from scepter_like import build_solver

    with build_solver(api_cfg(tmp_path, tmp_path / 'other')) as other:
        other.fit()
    with build_solver(api_cfg(tmp_path, tmp_path / 'run')) as solver:
        solver.fit()
        best, last = solver.test(), solver.test('last')
        solver.test(str(tmp_path / 'other'))
    tests = [r for r in read_metrics(os.path.join(tmp_path, 'run', 'metrics.jsonl')) if r['kind'] == 'test']
    assert [(r['weights'], r['values']) for r in tests] == [
        (os.path.join('checkpoints', 'checkpoint-best.pth'), best),
        ('last', last),
    ]


def test_test_in_a_new_session_reads_the_best_checkpoint_and_writes_no_metrics_line(tmp_path):
    from scepter_like import build_solver

    cfg = api_cfg(tmp_path, tmp_path / 'run')
    with build_solver(cfg) as solver:
        solver.fit()
        best = solver.test(weights='best')
    metrics = os.path.join(tmp_path, 'run', 'metrics.jsonl')
    with open(metrics, 'rb') as f:
        before = f.read()
    with build_solver(cfg) as fresh:  # fresh weights; the run's best checkpoint on disk
        assert fresh.test(weights='best') == best
        assert fresh.test(weights='last')['accuracy'] < best['accuracy']
    with open(metrics, 'rb') as f:
        assert f.read() == before  # an evaluation is no training run: metrics.jsonl unchanged


def test_the_readme_example_is_the_notebooks(tmp_path):
    """The README's Python example is the code of the notebook's cells (tests/test_python_api_notebook.py runs it)."""
    import json

    from conftest import REPO

    with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
        (example,) = re.findall(r'```python\n(.*?)```', f.read(), flags=re.S)
    with open(os.path.join(REPO, 'examples', 'python_api.ipynb'), encoding='utf-8') as f:
        cells = json.load(f)['cells']
    code = '\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'code')
    for line in example.strip().splitlines():
        assert line in code, line
    assert 'configs/cate_recognition/digits_mlp.yaml' in example and os.path.isfile(DIGITS_CFG)


def torch_settings():
    return torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()


def test_each_session_call_runs_with_its_env_settings_and_the_program_keeps_its_own_whatever_the_close_order(tmp_path):
    """ENV.DETERMINISTIC and NUM_THREADS hold in each of a session's calls (build, fit, test, predict), true or
    false, and end with the call: the program's code between calls and another open session never see them, and
    closing sessions in any order leaves the process's own (two sessions open once gave fit the last-built one's
    and, closed first-opened-first, left the first one's on the process)."""
    from scepter_like import build_solver

    cfg = api_cfg(tmp_path, tmp_path / 'unused')
    cfg['ENV'] = {'SEED': 0}
    x = np.load(tmp_path / 'blobs.npz')['x']
    before = (*torch_settings(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.use_deterministic_algorithms(False)  # the program's own, whatever an earlier test left
        torch.set_num_threads(3)
        program = torch_settings()
        sessions, seen = {}, {}

        def record(key):
            return lambda *_: seen.update({key: torch_settings()})

        for name, deterministic, threads in (('a', True, 2), ('b', False, 1)):
            overrides = [f'SOLVER.WORK_DIR={tmp_path / name}', f'ENV.NUM_THREADS={threads}']
            sessions[name] = build_solver(cfg, overrides=[*overrides, f'ENV.DETERMINISTIC={deterministic}'])
            assert torch_settings() == program
            for mode in ('eval', 'test'):
                sessions[name].solver.register_stage_callback('after_epoch', record((name, mode)), mode=mode)
        for name in ('a', 'b'):  # the first-opened first
            session = sessions[name]
            session.fit()
            session.test()
            session.model.register_forward_hook(record((name, 'predict')))
            session.predict({'img': x})
            assert torch_settings() == program
            session.close()
            assert torch_settings() == program
        for mode in ('eval', 'test', 'predict'):
            assert seen['a', mode] == (True, 2) and seen['b', mode] == (False, 1), mode
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True)  # the program's own choice: a session with false runs with false
        with build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "own"}']) as solver:
            solver.model.register_forward_hook(record('own'))
            solver.predict({'img': x})
        assert seen['own'][0] is False and torch.are_deterministic_algorithms_enabled()  # the program keeps its own
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[2])
        torch.set_num_threads(before[1])


def test_an_open_session_refuses_a_best_checkpoint_a_later_session_wrote_over(tmp_path):
    """An open session's test('best') tested the best checkpoint a later session (RESUME_FROM=auto in the same
    WORK_DIR) wrote, and metrics.jsonl recorded those weights under the open session's epoch and step."""
    from scepter_like import build_solver
    from scepter_like.errors import CheckpointError

    cfg = api_cfg(tmp_path, tmp_path / 'run')
    cfg['SOLVER']['OPTIMIZER']['LEARNING_RATE'] = 0.01  # slow: the later session's evaluations are better
    first = build_solver(cfg, overrides=['SOLVER.MAX_EPOCHS=1'])
    first.fit()  # never closed, as in a notebook
    own = first.test()
    with build_solver(cfg, overrides=['SOLVER.RESUME_FROM=auto']) as later:
        later.fit()
        assert later.test() != own  # its own best: tested
    best = os.path.join(tmp_path, 'run', 'checkpoints', 'checkpoint-best.pth')
    assert torch.load(best, weights_only=True)['solver']['total_iter'] == 18  # the later session's (steps 7-18)
    with pytest.raises(CheckpointError) as refused:
        first.test()
    assert str(refused.value).startswith(
        f"the test weights (best): {best} holds step 18, but this session's best checkpoint holds step 6:"
    )
    assert 'SOLVER.RESUME_FROM=auto' in str(refused.value)
    assert first.test('last')  # its own weights still test
    first.close()
    tests = [r for r in read_metrics(os.path.join(tmp_path, 'run', 'metrics.jsonl')) if r['kind'] == 'test']
    assert [(r['step'], r['weights']) for r in tests] == [
        (6, os.path.join('checkpoints', 'checkpoint-best.pth')),
        (18, os.path.join('checkpoints', 'checkpoint-best.pth')),
        (6, 'last'),
    ]


def test_the_documented_callback_of_a_session_runs(tmp_path):
    """docs/training_loop.md wrote solver.register_callback_on_iter_end(fn) and python_api.md names the session
    solver, which has no such method (AttributeError): python_api.md shows the way from a session, and it runs."""
    from conftest import REPO

    from scepter_like import build_solver

    with open(os.path.join(REPO, 'docs', 'python_api.md'), encoding='utf-8') as f:
        section = f.read().split('### Callbacks\n', 1)[1]
    (example,) = re.findall(r'```python\n(.*?)```', section.split('\n## ', 1)[0], flags=re.S)
    with build_solver(api_cfg(tmp_path, tmp_path / 'run'), overrides=['SOLVER.MAX_EPOCHS=1']) as solver:
        names = {'solver': solver}
        exec(example, names)
        assert [step for step, _ in names['losses']] == list(range(1, solver.solver.progress.total_iter + 1))
    assert not hasattr(solver, 'register_callback_on_iter_end')  # the doc's AttributeError: the session's .solver


def test_predict_says_once_that_it_skips_a_solver_s_own_test_step(tmp_path):
    """predict feeds the model: a solver's own run_step_test (here doubling the logits, as an un-normalising step
    would) is not in its outputs, which python_api.md promised were test's; it said nothing."""
    from scepter_like import build_solver
    from scepter_like.solver import SOLVERS, TrainValSolver

    @SOLVERS.register_class('OwnTestStepSolver')
    class OwnTestStepSolver(TrainValSolver):
        def run_step_test(self, batch_data, batch_idx=0, step=None, rank=None):
            outputs = super().run_step_test(batch_data, batch_idx, step, rank)
            return dict(outputs, logits=outputs['logits'] * 2)

    logger = logging.getLogger('test_python_api.own_step')
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    x = np.load(write_blobs(tmp_path / 'blobs.npz'))['x']
    for name, warned in (('TrainValSolver', []), ('OwnTestStepSolver', ['run_step_test'])):
        cfg = api_cfg(tmp_path, tmp_path / name)
        cfg['SOLVER']['NAME'] = name
        with build_solver(cfg, logger=logger) as solver:
            records.clear()
            solver.predict({'img': x})
            solver.predict({'img': x})  # once
        said = [r.getMessage() for r in records if r.levelno == logging.WARNING]
        assert [m.split("'s own ")[1].split(':')[0] for m in said] == warned
    assert said[0].startswith("predict runs the model's forward, not OwnTestStepSolver's own run_step_test:")


def test_session_best_names_the_best_checkpoint_its_metric_value_epoch_and_step(tmp_path):
    """The best checkpoint's path and score (Lightning's best_model_path / best_model_score) had no documented
    way from Python: users read CheckpointHook's attributes."""
    from scepter_like import build_solver
    from scepter_like.api import BestCheckpoint

    cfg = api_cfg(tmp_path, tmp_path / 'run')
    cfg['SOLVER']['OPTIMIZER']['LEARNING_RATE'] = 0.01  # slow: the best is not the first evaluation
    with build_solver(cfg, overrides=['SOLVER.EVAL_INTERVAL=1']) as solver:
        assert solver.best is None  # nothing saved yet
        history = solver.fit()
        top = max(history, key=lambda row: row['accuracy'])
        path = os.path.join(solver.work_dir, 'checkpoints', 'checkpoint-best.pth')
        assert solver.best == BestCheckpoint(path, 'accuracy', top['accuracy'], top['epoch'], top['step'])
        assert top['epoch'] > 1 and torch.load(path, weights_only=True)['solver']['total_iter'] == top['step']
        assert solver.test(solver.best.path) == solver.test('best')
        best = solver.best
    with build_solver(cfg, overrides=['SOLVER.RESUME_FROM=auto']) as resumed:
        assert resumed.best == best  # from the checkpoint's state


def test_fit_trains_from_the_rng_state_set_up_left_whatever_the_program_draws_before_it(tmp_path):
    """Dropout draws from torch's global RNG: a draw of the program's (or a second session's seeding) between
    build_solver and fit() once changed the training, and broke the bit-exact resume of RESUME_FROM=auto."""
    import shutil

    from helpers import assert_same

    from scepter_like import build_solver

    cfg = api_cfg(tmp_path, tmp_path / 'unused')

    def weights(name, between=lambda: None, overrides=()):
        session = build_solver(
            cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / name}', 'SOLVER.MODEL.BACKBONE.DROPOUT=0.5', *overrides]
        )
        between()
        with session:
            session.fit()
        return session.model.state_dict()

    plain = weights('plain')
    assert_same(weights('drawn', lambda: torch.rand(3)), plain, 'weights')
    assert_same(weights('built', lambda: build_solver(cfg, overrides=['ENV.SEED=7']).close()), plain, 'weights')
    weights('part', overrides=['SOLVER.MAX_EPOCHS=1'])
    shutil.copytree(tmp_path / 'part', tmp_path / 'resumed')
    assert_same(weights('resumed', lambda: torch.rand(1), ['SOLVER.RESUME_FROM=auto']), plain, 'weights')


def test_the_last_session_to_close_gives_the_program_its_logger_back(tmp_path, capsys, monkeypatch):
    """A closed session left its console handler, propagate False and INFO on the ``scepter_like`` logger: the
    logging the program set up afterwards (logging.basicConfig) never got the toolkit's records."""
    from scepter_like import build_solver

    no_user_logging(monkeypatch)
    ours = logging.getLogger('scepter_like')
    cfg = api_cfg(tmp_path, tmp_path / 'unused')
    first = build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "first"}'])
    second = build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "second"}'])
    (console,) = [h for h in ours.handlers if getattr(h, '_scepter_console', False)]
    first.close()  # the first-opened first: the second still logs to the console
    second.fit()
    assert 'INFO eval epoch 3/3' in capsys.readouterr().out
    second.close()
    assert (ours.handlers, ours.propagate, ours.level) == ([], True, logging.NOTSET)
    assert console._closed  # logging's own mark of a closed handler
    with pytest.raises(UserError):  # a failed build gives it back too
        build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "bad"}', 'SOLVER.TRAIN_DATA.PATH=missing.npz'])
    assert (ours.handlers, ours.propagate, ours.level) == ([], True, logging.NOTSET)
    records = []  # the program's logging.basicConfig(level=logging.INFO, handlers=[handler]), set up now
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    monkeypatch.setattr(logging.getLogger(), 'level', logging.INFO)
    second.predict({'img': np.zeros((1, 8))})
    ours.info('a line of the toolkit')
    with build_solver(cfg, overrides=[f'SOLVER.WORK_DIR={tmp_path / "third"}']) as third:
        third.fit()
    assert 'a line of the toolkit' in [r.getMessage() for r in records]
    assert any(r.getMessage().startswith('eval epoch 3/3') for r in records)
    assert 'eval epoch' not in capsys.readouterr().out  # the third session decided afresh: no console of ours
