"""tools/run_train.py as users run it: the digits job, user modules via IMPORTS, bad input."""

import os
import re
import textwrap

import pytest
import yaml
from conftest import DIGITS_CFG, run_cli, run_tool

USER_MODULE = textwrap.dedent(
    """
    # The scepter "Basic Usage" snippets, with scepter.modules. replaced by scepter_like.
    from scepter_like.solver.registry import SOLVERS
    from scepter_like.solver import BaseSolver, TrainValSolver
    from scepter_like.solver.hooks.hook import Hook
    from scepter_like.solver.hooks.registry import HOOKS


    @SOLVERS.register_class()
    class XxxSolver(TrainValSolver):
        def __init__(self, cfg, logger=None):
            super().__init__(cfg, logger=logger)
            self.steps_seen = 0

        def run_step_train(self, batch_data, batch_idx=0, step=None, rank=None):
            self.steps_seen += 1
            return super().run_step_train(batch_data, batch_idx, step, rank)


    @HOOKS.register_class()
    class XxxHook(Hook):
        def __init__(self, cfg, logger=None):
            super(XxxHook, self).__init__(cfg, logger=logger)
            self.marker = cfg.get('MARKER', 'marker.txt')

        def after_solve(self, solver):
            with open(self.marker, 'w') as f:
                f.write(f"{type(solver).__name__} {solver.steps_seen} {solver.progress.total_iter} "
                        f"{solver.epoch_outputs['test']['accuracy']:.4f}")
    """
)


def test_digits_main_job_end_to_end(tmp_path, digits_args):
    res = run_tool('run_train.py', *digits_args)
    assert res.returncode == 0, res.stderr
    m = re.search(r'test final \(360 samples\): accuracy: ([0-9.]+)', res.stdout)
    assert m, res.stdout[-2000:]
    assert float(m.group(1)) > 0.85  # two epochs already learn digits well
    run = tmp_path / 'run'
    log = (run / 'std_log.txt').read_text()
    assert 'hook order per stage' in log and 'LogHook(100)' in log and 'update: AdamW, accumulate 1' in log
    summary = log.index('model Classifier: 85,002 trainable of 85,002 parameters')  # the run summary comes first
    assert summary < log.index('hook order per stage')
    assert 'train data: 1,293 samples, batch 32 per rank, 41 batches per epoch' in log
    assert 'device cpu (1 intra-op thread per process), world size 1' in log
    assert 'test final' in log
    assert os.path.isfile(run / 'checkpoints' / 'latest')


def test_user_solver_and_hook_from_imports(tmp_path, digits_args):
    (tmp_path / 'my_ext.py').write_text(USER_MODULE)
    marker = tmp_path / 'marker.txt'
    res = run_cli(
        'run_train.py',
        *digits_args,
        'SOLVER.NAME=XxxSolver',
        'SOLVER.MAX_EPOCHS=1',
        f'SOLVER.EVAL_HOOKS=[{{NAME: XxxHook, MARKER: "{marker}"}}]',
        'IMPORTS=[tasks.cate_recognition, my_ext]',
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    name, steps, total, acc = marker.read_text().split()
    assert name == 'XxxSolver' and int(steps) == int(total) == 41 and 0 < float(acc) <= 1


def test_import_flag_with_py_path(tmp_path, digits_args):
    (tmp_path / 'ext_file.py').write_text(USER_MODULE)
    marker = tmp_path / 'm2.txt'
    res = run_cli(
        'run_train.py',
        *digits_args,
        '--import',
        str(tmp_path / 'ext_file.py'),
        'SOLVER.NAME=XxxSolver',
        'SOLVER.MAX_EPOCHS=1',
        f'SOLVER.TEST_HOOKS=[{{NAME: XxxHook, MARKER: "{marker}"}}]',
    )
    assert res.returncode == 0, res.stderr
    assert marker.read_text().startswith('XxxSolver')
    # the run's own code is in its records: the --import file (untracked, outside the repo) is saved
    saved = tmp_path / 'run' / 'code_snapshot' / 'imports' / 'external' / 'ext_file.py'
    assert saved.read_text() == USER_MODULE


def test_print_config_shows_overrides_and_loads_back(tmp_path):
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, '--print-config', 'SOLVER.MAX_EPOCHS=3')
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(res.stdout)
    assert data['SOLVER']['MAX_EPOCHS'] == 3 and data['SOLVER']['NAME'] == 'TrainValSolver'
    # resolved and completed: the T_MAX reference follows MAX_EPOCHS, every default is shown
    assert data['SOLVER']['LR_SCHEDULER']['T_MAX'] == 3 and data['SOLVER']['LR_SCHEDULER']['ETA_MIN'] == 0.0
    assert data['SOLVER']['MODEL']['LOSS']['LABEL_SMOOTHING'] == 0.0 and data['SOLVER']['MAX_STEPS'] == 0
    assert data['SOLVER']['TRAIN_HOOKS'][0]['GRADIENT_CLIP'] == -1.0
    # as the run's config.yaml records it: evaluation keeps the data's order
    assert data['SOLVER']['TRAIN_DATA']['SHUFFLE'] is True
    assert data['SOLVER']['EVAL_DATA']['SHUFFLE'] is False and data['SOLVER']['TEST_DATA']['SHUFFLE'] is False
    typo = run_cli('run_train.py', '--cfg', DIGITS_CFG, '--print-config', 'SOLVER.MAX_EPOCH=3')
    assert typo.returncode == 2 and typo.stdout == ''
    assert typo.stderr.startswith('error: SOLVER.MAX_EPOCH: unknown key') and 'did you mean MAX_EPOCHS' in typo.stderr


def _written(path, text):
    path.write_text(text)
    return str(path)


def _bad_yaml(tmp_path):
    p = tmp_path / 'bad.yaml'
    p.write_text('SOLVER:\n  NAME: [unclosed\n')
    return ['--cfg', str(p)]


BAD_INPUTS = {
    'missing cfg file': (lambda t: ['--cfg', str(t / 'nope.yaml')], r'config file not found: .*nope\.yaml'),
    'no cfg': (lambda t: [], r'--cfg FILE is required'),
    'cfg is a folder': (
        lambda t: ['--cfg', os.path.dirname(DIGITS_CFG)],
        r'^error: \S*configs/cate_recognition is a folder, not a config file; give a YAML file \(it holds digits_',
    ),
    'empty cfg': (  # with an override (WORK_DIR) the error was a missing SOLVER NAME
        lambda t: ['--cfg', _written(t / 'empty.yaml', '')],
        r'^error: \S*empty\.yaml is empty \(no keys: blank, or comments only\); write the config there$',
    ),
    'comments-only cfg': (
        lambda t: ['--cfg', _written(t / 'notes.yaml', '# only a comment\n\n')],
        r'^error: \S*notes\.yaml is empty \(no keys',
    ),
    'invalid yaml': (_bad_yaml, r'invalid YAML in .*bad\.yaml at line'),
    'misspelled NAME': (
        lambda t: ['--cfg', DIGITS_CFG, 'SOLVER.TRAIN_HOOKS.1.NAME=LogHok'],
        r'SOLVER\.TRAIN_HOOKS\[1\]\.NAME: .LogHok. is not in registry HOOKS; did you mean LogHook',
    ),
    'misspelled key': (
        lambda t: ['--cfg', DIGITS_CFG, 'SOLVER.TRAIN_HOOKS.1.LOG_INTERVL=5'],
        r'SOLVER\.TRAIN_HOOKS\[1\]\.LOG_INTERVL: unknown key for HOOKS\.LogHook; did you mean LOG_INTERVAL',
    ),
    'override of missing key': (
        lambda t: ['--cfg', DIGITS_CFG, 'SOLVER.MAX_EPOCH=3'],
        r'SOLVER\.MAX_EPOCH: unknown key .*did you mean MAX_EPOCHS',
    ),
    'wrong type': (
        lambda t: ['--cfg', DIGITS_CFG, 'SOLVER.MAX_EPOCHS=abc'],
        r'SOLVER\.MAX_EPOCHS: expected an int .*abc',
    ),
    'negative batch size': (
        lambda t: ['--cfg', DIGITS_CFG, 'SOLVER.TRAIN_DATA.BATCH_SIZE=-4'],
        r'SOLVER\.TRAIN_DATA\.BATCH_SIZE: must be at least 1, got -4',
    ),
    'unknown optimizer': (
        lambda t: ['--cfg', DIGITS_CFG, 'SOLVER.OPTIMIZER.NAME=SDG'],
        r'SOLVER\.OPTIMIZER\.NAME: .SDG. is not in registry OPTIMIZERS; did you mean SGD',
    ),
    'missing IMPORTS module': (
        lambda t: ['--cfg', DIGITS_CFG, 'IMPORTS=[tasks.cate_recognition, no_such_module_xyz]'],
        r"IMPORTS: module 'no_such_module_xyz' not found",
    ),
}


@pytest.mark.parametrize('case', sorted(BAD_INPUTS))
def test_bad_input_gives_one_error_line_and_exit_2(case, tmp_path):
    make_args, pattern = BAD_INPUTS[case]
    work = tmp_path / 'work'
    res = run_cli('run_train.py', *make_args(tmp_path), f'SOLVER.WORK_DIR={work}')
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith('error: ')
    assert re.search(pattern, lines[0]), lines[0]
    assert 'Traceback' not in res.stderr + res.stdout


def test_debug_shows_the_traceback(tmp_path):
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, '--debug', 'SOLVER.MAX_EPOCHS=abc')
    assert res.returncode == 2 and 'Traceback' in res.stderr
