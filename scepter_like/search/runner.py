"""A search worker: open the study, then run trials until the study has its N trials.

Each trial is an ordinary run built the way ``run_train.py`` builds one, in this process,
with the sampled values as overrides and ``WORK_DIR=<study dir>/trial_NNNN``, plus a
:class:`~scepter_like.solver.hooks.pruning.PruningHook` in EVAL_HOOKS that reports to the
trial. Optuna does the rest: the sampler, the pruner, the heartbeat that lets another
worker fail and retry a trial whose process died.

What counts towards N: complete and pruned trials, and failed trials that recorded their
own error. A trial whose worker died (heartbeat stale) or was interrupted is failed and
queued again with the same values, and does not count. Local workers take trials under
one file lock, so a study on this machine gets exactly N.
"""

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import time
import warnings

from scepter_like.errors import ConfigError, Preempted, TrainingError, UserError
from scepter_like.utils.launch_env import STOP_SIGNALS
from scepter_like.utils.signal_relay import SignalRelay

LOCK_NAME = '.trial.lock'
TRACKING_ATTR = 'tracking_groups'  # study user attr: the parent run / group id of each tracker hook
POLL_SECONDS = 1.0


def require_optuna():
    """Import optuna, or tell the user how to install it."""
    try:
        import optuna  # noqa: F401
        from optuna.storages import RetryHeartbeatStaleTrialCallback  # noqa: F401  (optuna >= 4.9)
    except ImportError:
        raise ConfigError(
            "hyperparameter search needs optuna >= 5; install it with pip install 'scepter_like[search]'"
        ) from None


def trial_dir(study_dir, number):
    return os.path.join(study_dir, f'trial_{number:04d}')


def worker_name():
    return f'{socket.gethostname()}:{os.getpid()}'


def counts(trials):
    """(trials that count towards N, trials running now)."""
    from optuna.trial import TrialState

    done = sum(
        t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (t.state == TrialState.FAIL and 'error' in t.user_attrs)
        for t in trials
    )
    return done, sum(t.state == TrialState.RUNNING for t in trials)


SEED_STRIDE = 1009  # a continued search's seed: SEED + worker + SEED_STRIDE x the trials before it


class SignalledStop(KeyboardInterrupt):
    """A stop signal during a trial (the run's ``Preempted``) raised as an interrupt: optuna takes an Exception for
    the trial's own failure and goes on with the next trial; an interrupt fails the trial and ends the search."""

    def __init__(self, preempted):
        super().__init__(str(preempted))
        self.preempted = preempted


@contextlib.contextmanager
def _signals_stop_the_search():
    """A stop signal outside a trial's training (a trial's solver installs its own handlers) ends the search at once,
    as one in training does: the running trial, if any, is failed and queued again, and the command ends with 128 +
    the signal rather than dying of it."""

    def stop(signum, frame):
        raise SignalledStop(Preempted(signum))

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        yield
    except SignalledStop as e:  # outside a trial: no trial to queue again
        raise e.preempted from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class SearchSettingsError(ConfigError):
    """The search's own settings do not fit the runs (METRIC no eval metric of theirs, DIRECTION against it): every
    trial would meet the same mistake, so the first trial that does ends the search with it."""


class Search:
    """One search command: the base config, the space, the study (created or continued)."""

    def __init__(self, args, cfg, space, worker_index=0):
        import optuna
        import sqlalchemy.exc

        from scepter_like.solver.base_solver import BaseSolver

        self.args, self.cfg, self.space = args, cfg, space
        self.signal_after_training = 0  # a stop signal the last trial's solver got after its training (_run_one)
        self.base_overrides = list(args.overrides)
        self.work_dir = os.path.abspath(cfg.SOLVER.get('WORK_DIR') or BaseSolver.para_dict['WORK_DIR']['value'])
        self.study_name = args.study or os.path.splitext(os.path.basename(args.space))[0]
        if not re.fullmatch(r'[A-Za-z0-9._-]+', self.study_name) or self.study_name.startswith('.'):
            raise ConfigError(f'--study {self.study_name!r}: use letters, digits and ._- only (it names a folder)')
        self.study_dir = os.path.join(self.work_dir, self.study_name)
        url = args.storage or 'sqlite:///' + os.path.join(self.work_dir, 'search.db')
        if not args.storage:
            os.makedirs(self.work_dir, exist_ok=True)
        self.trials_wanted = args.trials
        settings = space.settings
        if settings['SAMPLER'] == 'grid':
            grid = space.grid()
            size = math.prod(len(v) for v in grid.values())
            if size < self.trials_wanted:
                if worker_index == 0:
                    print(
                        f'[search] the grid has {size} point(s): running {size} trial(s), not {args.trials}', flush=True
                    )
                self.trials_wanted = size
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        warnings.filterwarnings('ignore', category=optuna.exceptions.ExperimentalWarning)
        try:
            storage = optuna.storages.RDBStorage(
                url,
                engine_kwargs={'connect_args': {'timeout': 60}} if url.startswith('sqlite') else {},
                heartbeat_interval=args.heartbeat,
                heartbeat_stale_trial_callback=self._stale_trial,
            )
            self.study = optuna.create_study(
                storage=storage,
                study_name=self.study_name,
                direction=settings['DIRECTION'],
                sampler=self._sampler(worker_index),
                pruner=self._pruner(),
                load_if_exists=True,
            )
        except (ImportError, ValueError, optuna.exceptions.OptunaError, sqlalchemy.exc.SQLAlchemyError) as e:
            raise ConfigError(
                f'--storage {url}: optuna cannot open it ({e}); give a URL like sqlite:///path.db'
            ) from None
        earlier = len(self.study.get_trials(deepcopy=False))
        if earlier:  # a continued search: a sampler seeded as before would draw the points it drew then again
            self.study.sampler = self._sampler(worker_index, earlier)
        self.storage_url = url
        self._check_same_search()
        os.makedirs(self.study_dir, exist_ok=True)
        self.tracking = self._open_tracking()

    def _sampler(self, worker_index, trials_before=0):
        """The space's sampler, seeded by SEED, the worker (workers draw different startup points) and the trials
        the study held when this command started (a continued search draws new ones)."""
        import optuna

        settings = self.space.settings
        seed = settings['SEED'] + worker_index + SEED_STRIDE * trials_before
        if settings['SAMPLER'] == 'grid':
            return optuna.samplers.GridSampler(self.space.grid(), seed=seed)
        if settings['SAMPLER'] == 'random':
            return optuna.samplers.RandomSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=settings['TPE_STARTUP_TRIALS'])

    def _pruner(self):
        import optuna

        settings = self.space.settings
        if settings['PRUNER'] == 'none':
            return optuna.pruners.NopPruner()
        return optuna.pruners.MedianPruner(
            n_startup_trials=settings['PRUNE_STARTUP_TRIALS'], n_warmup_steps=settings['PRUNE_WARMUP_EPOCHS']
        )

    def _check_same_search(self):
        """A study continues only with the space, overrides and base config it began with: trials trained from
        another config (an edited ``--cfg`` or ``_BASE_`` file, another file) would join a study they do not
        belong to, and its best trial would mislead."""
        overrides = sorted(o for o in self.base_overrides if not o.upper().startswith('SOLVER.WORK_DIR='))
        mine = {'space': self.space.fingerprint(), 'overrides': overrides, 'config': self._config_fingerprint()}
        for key, value in mine.items():
            found = self.study.user_attrs.get(key)
            if found is None:
                self.study.set_user_attr(key, value)
            elif key == 'config' and found != value:
                raise ConfigError(
                    f'study {self.study_name!r} in {self.storage_url} was started from another config: --cfg'
                    f' {self.args.cfg} (with its _BASE_ files and the overrides) differs from the one its trials'
                    ' trained from; restore that config, or start a new study with --study NAME'
                )
            elif found != value:
                raise ConfigError(
                    f'study {self.study_name!r} in {self.storage_url} was started with other {key}'
                    f' ({found}); continue it with those, or start a new study with --study NAME'
                )

    def _config_fingerprint(self):
        """sha256 of the resolved base config (``--cfg``, its _BASE_ files, the overrides; WORK_DIR aside): what
        every trial trains from before its sampled values."""
        data = self.cfg.to_dict()
        data.get('SOLVER', {}).pop('WORK_DIR', None)
        text = json.dumps(data, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()

    def _open_tracking(self):
        """The study's parent in each tracker hook of the config; its ids live in the study, so every worker
        and a continued search use the same parent."""
        from scepter_like.solver.hooks.tracking.sweep import SweepTracking

        params = {**self.space.settings, **{p.path: p.describe() for p in self.space.params}}
        known = self.study.user_attrs.get(TRACKING_ATTR)
        tracking = SweepTracking(self.cfg, self.study_name, params, known)
        if tracking.group_ids and tracking.group_ids != known:
            self.study.set_user_attr(TRACKING_ATTR, tracking.group_ids)
        return tracking

    def close_tracking(self, best):
        """End the study's parents with the best objective and the study's summary files."""
        from scepter_like.search.summary import BEST_CONFIG, PLOTS, SUMMARY_NAME

        names = [SUMMARY_NAME + '.md', SUMMARY_NAME + '.csv', BEST_CONFIG, *PLOTS]
        values = {'best_objective': best.value} if best is not None else {}
        status = 'FINISHED' if best is not None else 'FAILED'
        self.tracking.close(status, values, [os.path.join(self.study_dir, name) for name in names])

    def _stale_trial(self, study, trial):
        """A trial whose worker died, failed by optuna: queued again (up to 3 times), and its tracked runs, left
        RUNNING by the dead process, ended as KILLED."""
        import optuna

        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)(study, trial)
        self.tracking.end_child(os.path.basename(trial_dir(self.study_dir, trial.number)), 'KILLED')

    # -- the worker loop -------------------------------------------------------------------
    def run_worker(self, on_trial_end=None):
        """Run trials until N count; waits for trials of other workers (they may die and come back)."""
        import optuna

        with _signals_stop_the_search():
            while True:
                with self._trial_lock() as lock:
                    optuna.storages.fail_stale_trials(self.study)
                    done, running = counts(self.study.get_trials(deepcopy=False))
                    if done >= self.trials_wanted:
                        return
                    if done + running >= self.trials_wanted:
                        lock.release()
                        time.sleep(POLL_SECONDS)
                        continue
                    self._run_one(lock)
                if on_trial_end is not None:
                    on_trial_end()
                if self.signal_after_training:  # the trial stands as it ended, in the summary; the search stops here
                    print(
                        '[search] a stop signal came after its trial trained: that trial is recorded, and the'
                        ' search stops here',
                        flush=True,
                    )
                    raise Preempted(self.signal_after_training)

    @contextlib.contextmanager
    def _trial_lock(self):
        """Held from counting until the trial exists; ``release()`` may come early and twice."""
        import fcntl

        f = open(os.path.join(self.study_dir, LOCK_NAME), 'a+')
        fcntl.flock(f, fcntl.LOCK_EX)
        lock = _Lock(f)
        try:
            yield lock
        finally:
            lock.release()

    def _run_one(self, lock):
        import optuna

        def objective(trial):
            lock.release()  # the trial exists (RUNNING): the next worker may count it
            return self.run_trial(trial)

        self.settings_error = None
        self.signal_after_training = 0
        try:
            self.study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=True)
            if self.settings_error is not None:  # the search's settings are wrong: no trial can go well
                raise self.settings_error
        except KeyboardInterrupt as e:  # the trial was failed (Ctrl-C, a stop signal); queue it again, as a dead one's
            last = [t for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get('worker') == worker_name()]
            if last and last[-1].state == optuna.trial.TrialState.FAIL and 'error' not in last[-1].user_attrs:
                optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)(self.study, last[-1])
            if isinstance(e, SignalledStop):  # the command ends as a signalled run does (128 + signal)
                raise e.preempted from None
            raise

    # -- one trial -------------------------------------------------------------------------
    def trial_config(self, values, work_dir, extra_words=()):
        """The run's config: the base config and overrides, the sampled values, ``extra_words``, its WORK_DIR."""
        from scepter_like.cli import load_config

        words = [*self.base_overrides, *self.space.override_words(values), *extra_words]
        words.append(f'SOLVER.WORK_DIR={work_dir}')
        return load_config(argparse.Namespace(cfg=self.args.cfg, imports=self.args.imports, overrides=words))

    def run_trial(self, trial):
        """Run one trial's training; returns its objective (raises optuna.TrialPruned when pruned)."""
        import optuna

        from scepter_like.solver import SOLVERS
        from scepter_like.solver.hooks.pruning import PruningHook, RunPruned
        from scepter_like.solver.hooks.tracking import TrackerHook

        start = time.time()
        work_dir = trial_dir(self.study_dir, trial.number)
        trial.set_user_attr('work_dir', work_dir)
        trial.set_user_attr('worker', worker_name())
        print(f'[search] trial {trial.number} started -> {work_dir}', flush=True)
        logger = _trial_logger(trial.number)
        solver = None
        try:
            values = self.space.suggest(trial)
            cfg = self.trial_config(values, work_dir, self.tracking.child_overrides(os.path.basename(work_dir)))
            solver_cfg = cfg.SOLVER
            solver_cfg['EVAL_HOOKS'] = [
                *(solver_cfg.get('EVAL_HOOKS') or []),
                {'NAME': 'PruningHook', 'METRIC': self.space.settings['METRIC']},
            ]
            for hook in solver_cfg.get('TRAIN_HOOKS') or []:
                if hook.get('NAME') == 'LogHook':  # one line per trial on the console, no progress bars
                    hook['PROGRESS'] = 'off'
            solver = SOLVERS.build(cfg.SOLVER, logger=logger)
            with solver.stop_signals:  # as run_train: a signal in set-up stops at once, in training at a step
                solver.set_up_pre()
                reporter = next(h for h in solver.hooks_dict['eval'] if isinstance(h, PruningHook))
                reporter.attach(trial)
                for hook in solver.hooks_dict['train']:
                    if isinstance(hook, TrackerHook):  # the objective on the trial's tracked run
                        hook.add_final_values(lambda solver: self._objective_values(solver, reporter))
                solver.set_up()
                self._check_metric(solver)
                solver.solve()
            # a signal after the training loop (in the final evaluation or test) stopped no training: the trial ends
            # as it would have, and then the search stops (run_worker)
            self.signal_after_training = solver.stop_signals.received
            value = self._objective(solver, reporter)
            if not math.isfinite(value):
                raise TrainingError(f'the objective {self.space.settings["METRIC"]} is {value}')
        except Preempted as e:  # a stop signal ends the search, not this trial alone (optuna catches Exceptions)
            print(f'[search] trial {trial.number} stopped by a signal: the search stops here', flush=True)
            raise SignalledStop(e) from None
        except RunPruned as e:  # its log and metrics.jsonl say so as the solver closes
            print(f'[search] trial {trial.number} {e} ({time.time() - start:.1f} s)', flush=True)
            raise optuna.TrialPruned(str(e)) from None
        except Exception as e:
            message = ' '.join(str(e).split()) if isinstance(e, UserError) else f'{type(e).__name__}: {e}'
            logger.error(f'trial {trial.number} failed', exc_info=not isinstance(e, UserError))
            trial.set_user_attr('error', message[:500])
            print(f'[search] trial {trial.number} failed: {message}', flush=True)
            if isinstance(e, SearchSettingsError):  # optuna catches it as the trial's failure; _run_one raises it
                self.settings_error = e
            raise
        finally:
            if solver is not None:
                with SignalRelay() as closing:  # (no child) a signal while it closes waits, as one after training
                    solver.close()
                self.signal_after_training = self.signal_after_training or closing.signum
        metric = self.space.settings['METRIC']
        print(f'[search] trial {trial.number} {metric} {value:.6g} ({time.time() - start:.1f} s)', flush=True)
        return value

    def _check_metric(self, solver):
        """METRIC is an eval metric of the run, and DIRECTION goes the way its metric says is better (when the metric
        says: scepter's metrics name theirs only after a pass); raises SearchSettingsError."""
        from scepter_like.solver.hooks.hook import greater_is_better, unknown_eval_metric

        settings, where = self.space.settings, os.path.basename(self.args.space)
        metric, direction = settings['METRIC'], settings['DIRECTION']
        if why := unknown_eval_metric(solver, metric):
            raise SearchSettingsError(f'{where}: METRIC: {why}; fix it and start a new study with --study NAME')
        lower = not greater_is_better(solver, metric)
        if (lower or metric in (solver.metric_names('eval') or ())) and lower != (direction == 'minimize'):
            right = 'minimize' if lower else 'maximize'
            raise SearchSettingsError(
                f'{where}: DIRECTION: {direction}, but its metric says {"less" if lower else "more"} {metric} is'
                f' better; set DIRECTION: {right} and start a new study with --study NAME'
            )

    def _objective_values(self, solver, reporter):
        """``{'objective': value}``, or nothing when the run gave none (run_trial then says why)."""
        try:
            return {'objective': self._objective(solver, reporter)}
        except ConfigError:
            return {}

    def _objective(self, solver, reporter):
        settings = self.space.settings
        metric, source = settings['METRIC'], settings['FROM']
        if source == 'test':
            value = solver.epoch_outputs.get('test', {}).get(metric)
            if value is None:
                raise ConfigError(f'FROM test: the run has no test metric {metric!r}; give it TEST_DATA or FROM last')
            return float(value)
        if not reporter.values:
            raise ConfigError(f'the run made no evaluation, so no {metric!r}; give it EVAL_DATA')
        if source == 'last':
            return float(reporter.values[max(reporter.values)])
        pick = max if settings['DIRECTION'] == 'maximize' else min
        return float(pick(reporter.values.values()))


class _Lock:
    def __init__(self, f):
        self.f = f

    def release(self):
        if not self.f.closed:
            self.f.close()  # closing drops the flock


def _trial_logger(number):
    """The trials' logger: INFO goes to each run's log file only (the solver adds it); a WARNING also to the console,
    as one ``[search] trial N warning:`` line (a trial's errors the runner prints itself)."""
    logger = logging.getLogger('scepter_like.search.trial')
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in [h for h in logger.handlers if getattr(h, '_trial_warnings', False)]:  # the worker's last trial's
        logger.removeHandler(handler)
    console = logging.StreamHandler(sys.stdout)
    console._trial_warnings = True
    console.addFilter(lambda record: record.levelno == logging.WARNING)
    console.setFormatter(logging.Formatter(f'[search] trial {number} warning: %(message)s'))
    logger.addHandler(console)
    return logger
