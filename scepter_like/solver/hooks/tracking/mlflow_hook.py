"""MLflowLogHook: the run's config, metrics, checkpoints and files in an MLflow tracking store.

It talks to the store through ``MlflowClient`` (no global active run, so runs of a search
in one process stay apart).  TRACKING_URI '' is MLflow's own choice: ``MLFLOW_TRACKING_URI``,
else ``sqlite:///mlflow.db`` in the working directory (MLflow 3; its artifacts go to
``./mlruns/``), which ``mlflow ui`` started in that folder shows.  Relative paths are made
absolute when the run starts.  An ``http(s)://`` store is asked for ``/health`` first (5 s),
so an unreachable server is one error line instead of minutes of retries.

Params are immutable in MLflow: a resumed run keeps the params of its first start, adds
new keys, and lists the values that changed (``SOLVER.MAX_EPOCHS: 2 -> 4``) in the tag
``config_changes_on_resume``; the resumed config.yaml is uploaded at the end.
"""

import contextlib
import os
import re
import time
import urllib.request

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.hooks.tracking.base import TrackerHook, one_line

HEALTH_TIMEOUT_S = 5
PARENT_TAG = 'mlflow.parentRunId'  # MLflow's tag for a nested run
GIT_COMMIT_TAG = 'mlflow.source.git.commit'  # where the MLflow UI shows the commit
_BAD_KEY_CHARS = re.compile(r'[^\w./ :-]')


def resolve_tracking_uri(uri):
    """The store's URI: ``uri``, else MLflow's default; a relative sqlite or file path made absolute."""
    import mlflow

    uri = uri or mlflow.get_tracking_uri()
    if uri.startswith('sqlite:///') and not uri.startswith('sqlite:////'):
        return 'sqlite:///' + os.path.abspath(uri[len('sqlite:///') :])
    if ':' not in uri:  # a plain path: a file store
        return 'file://' + os.path.abspath(uri)
    return uri


def check_reachable(uri):
    """An http(s) store answers ``/health``; raises OSError when it does not within HEALTH_TIMEOUT_S."""
    if uri.startswith(('http://', 'https://')):
        with urllib.request.urlopen(uri.rstrip('/') + '/health', timeout=HEALTH_TIMEOUT_S):
            pass


def batches(items, size):
    return [items[i : i + size] for i in range(0, len(items), size)]


@HOOKS.register_class()
class MLflowLogHook(TrackerHook):
    para_dict = {
        'TRACKING_URI': {
            'value': '',
            'description': "MLflow store, e.g. sqlite:///mlflow.db or http://host:5000; '': MLFLOW_TRACKING_URI,"
            ' else sqlite:///mlflow.db in the working directory',
        },
        'EXPERIMENT': {'value': 'Default', 'description': 'experiment name (created when missing)'},
        'RUN_NAME': {'value': '', 'description': "run name; '': the WORK_DIR folder name"},
        'PARENT_RUN_ID': {'value': '', 'description': 'nest the run under this run (multirun and run_search set it)'},
    }
    PACKAGE = EXTRA = 'mlflow'

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.tracking_uri = cfg.TRACKING_URI
        self.experiment = cfg.EXPERIMENT
        self.run_name = cfg.RUN_NAME
        self.parent_run_id = cfg.PARENT_RUN_ID
        self.client = None

    @contextlib.contextmanager
    def _store(self):
        """Connect to the store (resolving the URI); any failure inside is a ConfigError naming the store."""
        from mlflow.tracking import MlflowClient

        uri = resolve_tracking_uri(self.tracking_uri)
        try:
            check_reachable(uri)
            self.tracking_uri, self.client = uri, MlflowClient(tracking_uri=uri)
            yield uri
        except Exception as e:  # unreachable, not a store, locked, of another MLflow version ...
            raise ConfigError(
                f'{self.cfg.path_of("TRACKING_URI")}: MLflow cannot use the store {uri} ({one_line(e)}); start the'
                ' server or give a store it can open, e.g. sqlite:///mlflow.db'
            ) from None

    def _experiment_id(self):
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except MlflowException:  # another process created it meanwhile
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def _existing(self, run_id):
        """Whether ``run_id`` is a run of the store (made RUNNING again)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException as e:
            if e.error_code == 'RESOURCE_DOES_NOT_EXIST':
                return False
            raise
        self.client.update_run(run_id, status='RUNNING')
        return True

    def _create_run(self, name, parent_id=''):
        tags = {PARENT_TAG: parent_id} if parent_id else {}
        return self.client.create_run(self._experiment_id(), run_name=name, tags=tags).info.run_id

    def open_run(self, solver, run_id):
        with self._store() as uri:
            if run_id is None or not self._existing(run_id):
                name = self.run_name or os.path.basename(os.path.abspath(solver.work_dir))
                run_id = self._create_run(name, self.parent_run_id)
        return run_id, f'in {uri} (experiment {self.experiment!r}; view it with: mlflow ui --backend-store-uri {uri})'

    def log_params(self, params, resumed, run_id=None):
        from mlflow.entities import Param, RunTag
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH, MAX_TAG_VAL_LENGTH

        from scepter_like.config import value_text

        run_id = run_id or self.run_id
        texts = {_BAD_KEY_CHARS.sub('_', k): value_text(v)[:MAX_PARAM_VAL_LENGTH] for k, v in params.items()}
        logged = self.client.get_run(run_id).data.params if resumed else {}
        changed = [f'{k}: {logged[k]} -> {v}' for k, v in texts.items() if k in logged and logged[k] != v]
        new = [Param(k, v) for k, v in texts.items() if k not in logged]
        for batch in batches(new, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=batch)
        if changed:
            text = '; '.join(changed)[:MAX_TAG_VAL_LENGTH]
            self.client.log_batch(run_id, tags=[RunTag('config_changes_on_resume', text)])

    def log_tags(self, tags):
        from mlflow.entities import RunTag

        if 'git_commit' in tags:
            tags = {**tags, GIT_COMMIT_TAG: tags['git_commit']}
        if tags:
            self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_points(self, points, run_id=None):
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        now = time.time()
        metrics = [
            Metric(name, value, int((wall if wall is not None else now) * 1000), step)
            for step, wall, values in points
            for name, value in values.items()
        ]
        for batch in batches(metrics, MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id or self.run_id, metrics=batch)

    def log_files(self, files, run_id=None):
        for path, folder in files:
            self.client.log_artifact(run_id or self.run_id, path, artifact_path=folder or None)

    def close_run(self, status, run_id=None):
        self.client.set_terminated(run_id or self.run_id, status)

    # -- sweeps: a parent run, each trial's run nested under it ---------------------------------
    def open_group(self, name, params, group_id=None):
        with self._store():
            if group_id and self._existing(group_id):
                return group_id
            group_id = self._create_run(self.run_name or name)
            self.log_params(params, False, run_id=group_id)
        return group_id

    def child_settings(self, group_id, child_name):
        return {'TRACKING_URI': self.tracking_uri, 'PARENT_RUN_ID': group_id, 'RUN_NAME': child_name}

    def end_children(self, group_id, child_name, status):
        with self._store():
            experiment = self.client.get_run(group_id).info.experiment_id
            found = self.client.search_runs(
                [experiment],
                f"tags.`{PARENT_TAG}` = '{group_id}' and attributes.run_name = '{child_name}'"
                " and attributes.status = 'RUNNING'",
            )
        for run in found:
            self.close_run(status, run_id=run.info.run_id)

    def close_group(self, group_id, status, values, files):
        if values:
            self.log_points([(0, None, values)], run_id=group_id)
        self.log_files([(path, '') for path in files if os.path.isfile(path)], run_id=group_id)
        self.close_run(status, run_id=group_id)
