"""Train, test and predict from Python (a script or a notebook) as the command line does::

    from scepter_like import build_solver

    with build_solver('configs/cate_recognition/digits_mlp.yaml', overrides=['SOLVER.MAX_EPOCHS=5']) as solver:
        history = solver.fit()                  # [{'epoch': 5, 'step': ..., 'accuracy': ...}, ...]
        result = solver.test(weights='best')    # {'accuracy': ...}
        out = solver.predict({'img': images})   # {'logits': numpy array}

``build_solver`` does what ``tools/run_train.py`` does before training: it reads the config
as the CLI reads it (a YAML path, a dict or a Config, then the CLI's ``KEY.PATH=VALUE``
words and IMPORTS), builds the solver and sets it up (environment, WORK_DIR, log file,
hooks, data, model, optimizer, resume).  A mistake raises the ``UserError`` whose message is
the line the CLI prints after ``error:``.  The log goes where the CLI's goes (the console,
with a progress bar in a terminal or a Jupyter notebook, and WORK_DIR's log file) unless
the program configured logging itself (a handler on the root or the ``scepter_like``
logger, or a level set on the latter): then the records only propagate to its handlers.
The root logger is never touched, and when the last open session closes the ``scepter_like``
logger is as it was before.  See docs/python_api.md.
"""

import inspect
import logging
import os
from typing import NamedTuple

from scepter_like.cli import read_config
from scepter_like.errors import ConfigError, UserError
from scepter_like.utils.logger import (
    LOGGER_NAME,
    attach_file_handler,
    console_handler,
    get_logger,
    is_own_handler,
    release_console,
)
from scepter_like.utils.seed import get_rng_state, set_rng_state


def build_solver(cfg, overrides=(), imports=(), logger=None):
    """A ``SolverSession`` over the set-up solver of ``cfg`` (a YAML path, a dict or a Config).

    ``overrides``: the CLI's ``KEY.PATH=VALUE`` words; ``imports``: modules or ``.py`` files
    to import besides the config's IMPORTS (the CLI's ``--import``); ``logger``: the logger
    the run writes to (default: see the module docstring).
    """
    from scepter_like.solver import SOLVERS

    config = read_config(cfg, overrides, imports, given_as='the path given to build_solver')
    console = ConsoleHold(logger)
    try:
        return _set_up(SOLVERS.build(config.SOLVER, logger=console.logger), console)
    except BaseException:
        console.let_go()
        raise


def _set_up(solver, console):
    """The session of ``solver`` set up; a failed set-up closes the solver."""
    from scepter_like.solver.environment import ProcessSettings

    program = ProcessSettings()  # the process's: put back when set-up ends, as after each of the session's calls
    with solver.stop_signals:  # a stop signal during set-up ends it at once
        try:
            solver.set_up_pre()
            solver.set_up()
            own = ProcessSettings()  # ENV's, in force for each of the session's calls
            rng = get_rng_state()  # what fit() trains from, whatever the program draws before it
        except BaseException:
            solver.close()
            raise
        finally:
            program.apply()
    return SolverSession(solver, own, rng, console)


def run_logger():
    """The ``scepter_like`` logger, with the CLI's console handler unless the program configured logging itself."""
    from scepter_like.utils.launch_env import process_rank

    logger = logging.getLogger(LOGGER_NAME)
    ours = any(is_own_handler(h) for h in logger.handlers)
    theirs = any(not is_own_handler(h) for h in logger.handlers)
    if theirs or (not ours and (logging.getLogger().handlers or logger.level != logging.NOTSET)):
        return logger
    return get_logger(rank=process_rank())  # replaces its own console handler: never two


class BestCheckpoint(NamedTuple):
    """The best checkpoint a session's run saved (``SolverSession.best``): Lightning's ``best_model_path`` and
    ``best_model_score`` of its ModelCheckpoint, with what chose it."""

    path: str  # WORK_DIR/checkpoints/{prefix}-best.pth
    metric: str  # CheckpointHook's SAVE_BEST_BY metric, without its +/- sign
    value: float  # the metric's value at that evaluation
    epoch: int  # the (1-based) epoch whose evaluation it was
    step: int | None  # train steps done by then (None: resumed from a checkpoint that did not record it)


class ConsoleHold:
    """A session's hold on the console set-up ``run_logger`` gave the ``scepter_like`` logger (none where the
    program configured logging itself or gave a logger): when the last open session holding it lets go (closes),
    the logger is as the program had it (``release_console``), so logging the program sets up afterwards gets the
    records, and the next session decides afresh.  The holders are kept on the console handler (weakly: a session
    left open and dropped lets go)."""

    def __init__(self, logger=None):
        self.logger = logger or run_logger()
        console = None if logger else console_handler(self.logger)
        self._holders = console.holders if console is not None else None
        if self._holders is not None:
            self._holders.add(self)

    def let_go(self):
        if self._holders is not None and self in self._holders:
            self._holders.discard(self)
            if not self._holders:
                release_console(self.logger)


def _takes_test(solve):
    try:
        return 'test' in inspect.signature(solve).parameters
    except (TypeError, ValueError):
        return False


class SolverSession:
    """A built, set-up solver (``.solver``) and what a program does with it: fit, test, predict, close.

    A context manager: leaving the ``with`` block closes it.  torch's process-wide settings of its ENV
    (``process_settings``, taken when its set-up ended) hold during each of its calls only.
    """

    def __init__(self, solver, process_settings, rng_state, console):
        self.solver = solver
        self._console = console  # its hold on the logger's console set-up (ConsoleHold)
        self._process_settings = process_settings
        self._rng_state = rng_state  # every RNG as set-up left it (seeded after the model, or the resumed run's)
        self.history = []  # one dict per evaluation fit() ran
        self._fitted = False
        self._closed = False
        solver.register_stage_callback('after_epoch', self._record_evaluation, mode='eval')

    @property
    def work_dir(self):
        return self.solver.work_dir

    @property
    def model(self):
        """The model (inside any DDP / compile wrapper)."""
        return self.solver.unwrapped_model

    @property
    def best(self):
        """The ``BestCheckpoint`` of this session's run (the CheckpointHook keeping one, SAVE_BEST_BY), or None
        while it has saved none (no SAVE_BEST_BY, or no evaluation yet).  Read after ``fit()``: during training the
        newest evaluation is considered at the next epoch's start."""
        from scepter_like.solver.hooks.checkpoint import CheckpointHook
        from scepter_like.utils.checkpoint import CHECKPOINT_DIR

        hooks = self.solver.hooks_dict['train']
        hook = next((h for h in hooks if isinstance(h, CheckpointHook) and h.best_value is not None), None)
        if hook is None:
            return None
        path = os.path.join(self.solver.work_dir, CHECKPOINT_DIR, hook.best_name)
        return BestCheckpoint(path, hook.best_metric, hook.best_value, hook.best_epoch, hook.best_step)

    def _record_evaluation(self, solver):
        progress = solver.progress
        self.history.append({'epoch': progress.epoch + 1, 'step': progress.total_iter, **solver.epoch_outputs['eval']})

    def fit(self):
        """Train (with the evaluations EVAL_INTERVAL asks for) as ``tools/run_train.py`` does, without the final test.

        Returns the evaluations this call ran, one dict each: ``epoch`` (1-based, the epoch it
        followed), ``step`` (train steps done) and every eval metric.  Once per session: a
        second run needs a new ``build_solver`` (and its own WORK_DIR, as on the CLI).
        """
        solver = self._open_solver('fit')
        if self._fitted:
            raise UserError('fit() trains once per build_solver(); build a new solver to train again')
        self._fitted = True
        with solver.stop_signals, self._process_settings.in_force():
            set_rng_state(self._rng_state)
            solver.solve(**({'test': False} if _takes_test(solver.solve) else {}))
        return [dict(row) for row in self.history]

    def test(self, weights='best'):
        """Run TEST_DATA through METRICS with ``weights``; returns ``{metric: float}``.

        ``'best'`` (or None): the best checkpoint of the run in WORK_DIR (CheckpointHook SAVE_BEST_BY),
        else, saying so in the log, the model's own; ``'last'``: the model's own weights (as
        training left them, or as the resumed checkpoint held them); any other value is a
        checkpoint (``.pth``, ``.safetensors``, a run's folder, ``RUN:best``).  The model holds
        its own weights again afterwards.  The test hooks run around the pass, as at the end of
        training; after ``fit()`` the result joins the run's metrics.jsonl.
        """
        from scepter_like.solver.test_weights import weights_for_test

        solver = self._open_solver('test')
        if 'test' not in solver.datas:
            raise ConfigError(f'{solver.cfg.path_of("TEST_DATA")}: test() needs TEST_DATA; add a test data config')
        hooks = solver.hooks_dict['test']
        solver.failed = None
        with self._process_settings.in_force():
            solver.before_solve(hooks)
            try:
                with weights_for_test(solver, weights):
                    solver.solve_test()
            except BaseException as e:
                solver.failed = e
                raise
            finally:
                solver.after_solve(hooks)
        return dict(solver.epoch_outputs['test'])

    def predict(self, inputs, batch_size=256):
        """``{output key: numpy array}`` of the model on ``inputs`` (``{batch key: array}``), in eval mode.

        Floating arrays are cast to the model's dtype (numpy's float64 too); see ``BaseSolver.predict``.
        """
        with self._process_settings.in_force():
            return self.solver.predict(inputs, batch_size=batch_size)

    def _open_solver(self, call):
        """The solver, its run's log file attached again if a later session set it aside (rank 0 has one); ``call``
        (fit, test) on a closed session is a UserError: its records are written out and its log file detached."""
        if self._closed:
            raise UserError(
                f'{call}() after close(): the session is closed, its records written out; build_solver() again'
                ' (with SOLVER.RESUME_FROM to take its weights)'
            )
        handler = self.solver._file_handler  # (the session owns its solver's run)
        if handler is not None:
            attach_file_handler(self.solver.logger, handler)
        return self.solver

    def close(self):
        """Write out pending records, detach the log file and let go of the console set-up (again: nothing)."""
        if not self._closed:
            self._closed = True
            try:
                self.solver.close()
            finally:
                self._console.let_go()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False
