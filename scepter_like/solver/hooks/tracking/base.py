"""TrackerHook: what an experiment tracker records of a run, and when; MLflowLogHook and WandbLogHook say how.

On rank 0 only (other ranks hold no run), a tracker

- at ``before_solve`` opens its run, or reopens the one a resumed checkpoint names (the
  run's id is this hook's state), and records the resolved config (what ``config.yaml``
  holds) flattened to dotted parameters (``SOLVER.OPTIMIZER.LEARNING_RATE``), the WORK_DIR
  and the git commit;
- mirrors ``metrics.jsonl``: it listens to the run's MetricsLog, so every train line
  (``train/<name>``, ``train/step_time``, ``train/data_time``) and every eval / test result
  (``eval/<metric>``, ``test/<metric>``) reaches it at its step, in the batches the file
  gets them, never recomputed;
- at ``after_solve`` (its PRIORITY puts it after CheckpointHook) records the best and last
  checkpoint paths and the final values a caller added (a search trial's objective),
  uploads ``config.yaml``, the log file and the PNGs of ``WORK_DIR/plots/`` (with
  LOG_MODEL the checkpoints too), and closes the run as finished, failed or killed.

A store that cannot be used when the run starts is a ConfigError on every rank: one
line, before any train step.  A failure later (the store removed, a full disk) is one
warning; the tracker stops and training goes on, since the checkpoints and metrics.jsonl
are the record.  A sweep (``run_train.py -m``, ``tools/run_search.py``) groups its runs
through ``open_group`` / ``child_settings`` / ``close_group`` (``tracking/sweep.py``).
"""

import importlib.util
import json
import os

from scepter_like.config import flatten_config
from scepter_like.errors import CheckpointError, ConfigError, Preempted, UserError
from scepter_like.solver.hooks.checkpoint import CheckpointHook
from scepter_like.solver.hooks.field_plot import PLOTS_DIR
from scepter_like.solver.hooks.hook import PRIORITY_CHECKPOINT, Hook
from scepter_like.solver.hooks.pruning import RunPruned
from scepter_like.solver.run_records import CONFIG_FILE, ENV_FILE, resolved_config
from scepter_like.utils.checkpoint import CHECKPOINT_DIR, latest_checkpoint
from scepter_like.utils.distributed import broadcast_object

PRIORITY_TRACKER = PRIORITY_CHECKPOINT + 50  # after_solve after CheckpointHook's: the last checkpoint exists
METRIC_KINDS = ('train', 'eval', 'test')
STEP_TIMES = ('step_time', 'data_time')  # a train line's seconds per step, beside its values


def require_package(cfg, module, extra):
    """ConfigError naming the extra to install when ``module`` cannot be imported (it is not imported here)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ValueError:  # sys.modules holds None for it: its import is blocked
        found = False
    if not found:
        raise ConfigError(
            f'{cfg.path or cfg.NAME}: {cfg.NAME} needs the {module} package; install it with'
            f" pip install 'scepter_like[{extra}]' (or remove the hook)"
        )


def run_tags(solver):
    """The run's WORK_DIR and, from env.json (run_records), its git commit and whether the tree was dirty."""
    tags = {'work_dir': os.path.abspath(solver.work_dir)}
    try:
        with open(os.path.join(solver.work_dir, ENV_FILE), encoding='utf-8') as f:
            git = json.load(f).get('git') or {}
    except (OSError, ValueError):
        git = {}
    if git.get('commit'):
        tags['git_commit'] = git['commit']
        tags['git_dirty'] = str(bool(git.get('dirty'))).lower()
    return tags


def checkpoint_paths(solver):
    """``{'best': path, 'last': path}`` of the checkpoints that exist (last: the one ``latest`` names)."""
    paths = {}
    best = [h.best_path for h in solver.hooks_dict['train'] if isinstance(h, CheckpointHook) and h.best_path]
    if best and os.path.isfile(best[0]):
        paths['best'] = os.path.abspath(best[0])
    try:
        last = latest_checkpoint(os.path.join(solver.work_dir, CHECKPOINT_DIR))
    except CheckpointError:  # a pointer naming a missing file: nothing to record
        last = None
    if last:
        paths['last'] = os.path.abspath(last)
    return paths


def run_files(solver, checkpoints):
    """``[(path, folder in the run)]``: config.yaml and the log file, the PNGs of plots/, ``checkpoints``' files."""
    work_dir = solver.work_dir
    files = [(os.path.join(work_dir, CONFIG_FILE), '')] + ([(solver.log_file, '')] if solver.log_file else [])
    plots = os.path.join(work_dir, PLOTS_DIR)
    if os.path.isdir(plots):
        files += [(os.path.join(plots, n), PLOTS_DIR) for n in sorted(os.listdir(plots)) if n.endswith('.png')]
    files += [(path, CHECKPOINT_DIR) for path in sorted(set(checkpoints.values()))]
    return [(path, folder) for path, folder in files if os.path.isfile(path)]


def outcome(failed):
    """FINISHED, KILLED (a stop signal, an interrupt, a search pruning the run) or FAILED."""
    if failed is None:
        return 'FINISHED'
    return 'KILLED' if isinstance(failed, (KeyboardInterrupt, Preempted, RunPruned)) else 'FAILED'


def one_line(error, limit=300):
    """An exception's text on one line, cut at ``limit`` (a library's message may span many lines)."""
    text = ' '.join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + '...'


class TrackerHook(Hook):
    """The shared part of the trackers; a subclass implements the library calls (``open_run`` ... ``close_run``)."""

    para_dict = {
        'PRIORITY': {
            'value': PRIORITY_TRACKER,
            'description': 'after CheckpointHook, so the end-of-run checkpoint exists when it is recorded',
        },
        'LOG_MODEL': {'value': False, 'description': 'also upload the best and the last checkpoint files at the end'},
    }
    PACKAGE = EXTRA = ''  # the library, and the scepter_like extra that installs it

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        require_package(cfg, self.PACKAGE, self.EXTRA)
        self.log_model = cfg.LOG_MODEL
        self.run_id = None  # the tracked run; kept in checkpoints, so a resume continues it
        self.final_values = []  # fn(solver) -> {name: float}, recorded when training ends well
        self.checkpoints = {}  # {'best' | 'last': path} found when training ends
        self._logger = None  # rank 0's solver logger once a run is open
        self._healthy = False  # a run is open and no call into the library has failed

    # -- the library calls a tracker implements ------------------------------------------------
    def open_run(self, solver, run_id):
        """Open a new run (``run_id`` None) or reopen ``run_id``; returns (the run's id, where it is, for the log).

        Raises ConfigError (one line) when the store cannot be used.
        """
        raise NotImplementedError

    def log_params(self, params, resumed):
        """Record ``{dotted key: value}``; ``resumed``: the run already holds the params of its first start."""
        raise NotImplementedError

    def log_tags(self, tags):
        """Record ``{name: text}`` facts about the run (they may change: the best checkpoint)."""
        raise NotImplementedError

    def log_points(self, points):
        """Record ``[(step, unix time, {name: float})]`` in order."""
        raise NotImplementedError

    def log_files(self, files):
        """Upload ``[(path, folder in the run)]``."""
        raise NotImplementedError

    def close_run(self, status):
        """End the run as FINISHED, FAILED or KILLED."""
        raise NotImplementedError

    # -- sweeps (tracking/sweep.py): one parent per sweep, one child run per trial ------------
    def open_group(self, name, params, group_id=None):
        """Start the parent of a sweep called ``name`` (or continue ``group_id``); returns its id."""
        raise NotImplementedError

    def child_settings(self, group_id, child_name):
        """``{KEY: value}`` of this hook's config that makes a run a child of the group."""
        raise NotImplementedError

    def close_group(self, group_id, status, values, files):
        """End the parent: its final ``values`` ({name: float}) and ``files`` (paths) recorded."""
        raise NotImplementedError

    def end_children(self, group_id, child_name, status):
        """End the group's runs called ``child_name`` that are still open as ``status``: their process died (a
        search trial whose worker was killed)."""
        raise NotImplementedError

    # -- what a caller may add ---------------------------------------------------------------------
    def add_final_values(self, fn):
        """Record ``fn(solver)`` ({name: float}) at the last step when training ends well (a search objective)."""
        self.final_values.append(fn)

    # -- stages ------------------------------------------------------------------------------------
    def before_solve(self, solver):
        error = None
        if solver.is_main:
            try:
                self._start(solver)
            except UserError as e:
                error = str(e)
        error = broadcast_object(error)  # every rank stops on a store rank 0 cannot use
        if error is not None:
            raise ConfigError(error)

    def _start(self, solver):
        wanted = self.run_id
        self.run_id, where = self.open_run(solver, wanted)
        self._logger, self._healthy = solver.logger, True
        resumed = wanted is not None and self.run_id == wanted
        if wanted is not None and not resumed:
            solver.logger.warning(f'{type(self).__name__}: run {wanted} of the checkpoint is not in the store')
        solver.logger.info(f'{type(self).__name__}: {"continuing" if resumed else "new"} run {self.run_id} {where}')
        self._safely(
            'recording the config', self.log_params, flatten_config(resolved_config(solver).to_dict()), resumed
        )
        self._safely('recording the run', self.log_tags, run_tags(solver))
        solver.metrics_log.add_listener(self._mirror)

    def _mirror(self, records):
        """A batch of metrics.jsonl records as points: ``{kind}/{name}`` at the record's step and time."""
        points = []
        for record in records:
            kind = record['kind']
            if kind not in METRIC_KINDS:
                continue
            values = {f'{kind}/{name}': float(v) for name, v in record['values'].items()}  # 'nan' text too
            if kind == 'train':
                values.update({f'train/{key}': float(record[key]) for key in STEP_TIMES if key in record})
            points.append((record['step'], record['time'], values))
        if points:
            self._safely('logging metrics', self.log_points, points)

    def after_solve(self, solver):
        if self._logger is None or solver.metrics_log is None:  # not rank 0, or no run was opened
            return
        solver.metrics_log.flush()  # the train lines still held reach the run before it closes
        solver.metrics_log.remove_listener(self._mirror)
        if solver.failed is None and self.final_values:
            values = {}
            for fn in self.final_values:
                values.update(fn(solver))
            if values:
                self._safely('recording final values', self.log_points, [(solver.progress.total_iter, None, values)])
        self.checkpoints = checkpoint_paths(solver)
        tags = {f'checkpoint.{kind}': path for kind, path in self.checkpoints.items()}
        self._safely('recording the checkpoints', self.log_tags, tags)
        self._safely('uploading files', self.log_files, run_files(solver, self.checkpoints if self.log_model else {}))
        self._safely('closing the run', self.close_run, outcome(solver.failed))
        self._logger, self._healthy = None, False

    def _safely(self, what, fn, *args):
        """Call into the library; the first failure is one warning and ends tracking for this run."""
        if not self._healthy:
            return
        try:
            fn(*args)
        except Exception as e:  # whatever the library raises: training must go on
            self._healthy = False
            self._logger.warning(
                f'{type(self).__name__}: {what} failed ({type(e).__name__}: {one_line(e)}); tracking stops for'
                ' this run, training goes on (the checkpoints and metrics.jsonl keep the record)'
            )

    def state_dict(self):
        return {'run_id': self.run_id}

    def load_state_dict(self, state):
        self.run_id = state.get('run_id')
