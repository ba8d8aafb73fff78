"""WandbLogHook: the run's config, metrics, checkpoints and files in a Weights & Biases run.

MODE offline (the default) needs no account and no network: W&B writes the run to
``DIR/wandb/offline-run-<time>-<id>/`` ('' DIR: WORK_DIR), and ``wandb sync <that folder>``
uploads it later.  The run name key is RUN_NAME, since NAME names the hook.  A resumed
run passes the same run id to ``wandb.init(resume='allow')``: online W&B continues the
run; offline, the resumed part is a second folder with the same id, and ``wandb sync``
of both folders puts them into one run.

Where things go: the config as the run's config (dotted keys), metrics by ``run.log(...,
step=train step)``, WORK_DIR, git commit and checkpoint paths in the run's summary,
config.yaml, the log file and the plots as run files under ``work_dir/``, and with
LOG_MODEL the checkpoints as a ``model`` artifact (aliases best / last).  The runs of a
multirun or search share a W&B group named after it.  Console capture is off (the log
file is uploaded instead) and W&B's own console lines are silenced.
"""

import os
import shutil

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.hooks.tracking.base import TrackerHook, one_line
from scepter_like.utils.checkpoint import CHECKPOINT_DIR

FILES_FOLDER = 'work_dir'  # run files go under it (W&B keeps its own config.yaml at the top)


@HOOKS.register_class()
class WandbLogHook(TrackerHook):
    para_dict = {
        'PROJECT': {'value': 'scepter_like', 'description': 'W&B project'},
        'RUN_NAME': {'value': '', 'description': "run name; '': the WORK_DIR folder name"},
        'MODE': {
            'value': 'offline',
            'description': 'offline: no account or network (upload later with wandb sync); online',
            'choices': ['offline', 'online'],
        },
        'DIR': {'value': '', 'description': "folder W&B writes its wandb/ folder into; '': WORK_DIR"},
        'GROUP': {'value': '', 'description': 'W&B group (multirun and run_search set it to the sweep / study)'},
    }
    PACKAGE = EXTRA = 'wandb'

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.project = cfg.PROJECT
        self.run_name = cfg.RUN_NAME
        self.mode = cfg.MODE
        self.dir = cfg.DIR
        self.group = cfg.GROUP
        self.run = None

    def open_run(self, solver, run_id):
        import wandb

        folder = os.path.abspath(self.dir or solver.work_dir)
        try:
            os.makedirs(folder, exist_ok=True)
            self.run = wandb.init(
                project=self.project,
                name=self.run_name or os.path.basename(os.path.abspath(solver.work_dir)),
                group=self.group or None,
                mode=self.mode,
                dir=folder,
                id=run_id,
                resume='allow' if run_id else None,
                reinit='create_new',  # its own run object; no global wandb.run is needed
                settings=wandb.Settings(console='off', silent=True),
            )
        except Exception as e:  # no API key, no network, a folder it cannot write ...
            raise ConfigError(
                f'{self.cfg.path_of("MODE")}: W&B cannot start the run (MODE {self.mode}) in {folder} ({one_line(e)});'
                ' log in (wandb login) or use MODE: offline and wandb sync later'
            ) from None
        run_folder = os.path.dirname(self.run.dir)
        where = f'({self.mode}) in {run_folder}'
        if self.mode == 'offline':
            where += f'; upload it with: wandb sync {run_folder}'
        return self.run.id, where

    def log_params(self, params, resumed):
        self.run.config.update(params, allow_val_change=True)

    def log_tags(self, tags):
        self.run.summary.update(tags)

    def log_points(self, points):
        for step, _, values in points:
            self.run.log(values, step=step)

    def log_files(self, files):
        models = [path for path, folder in files if folder == CHECKPOINT_DIR]
        for path, folder in files:
            if folder == CHECKPOINT_DIR:
                continue
            copy = os.path.join(self.run.dir, FILES_FOLDER, folder, os.path.basename(path))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            shutil.copyfile(path, copy)  # a copy: the run keeps this moment's file
            self.run.save(copy, base_path=self.run.dir, policy='now')
        if models:
            import wandb

            artifact = wandb.Artifact(f'model-{self.run.id}', type='model')
            for path in models:
                artifact.add_file(path)
            self.run.log_artifact(artifact, aliases=['latest', *self.checkpoints])

    def close_run(self, status):
        self.run.finish(exit_code=0 if status == 'FINISHED' else 1)
        self.run = None

    # -- sweeps: a W&B group per sweep (W&B has no parent runs) ---------------------------------
    def open_group(self, name, params, group_id=None):
        return group_id or self.group or name

    def child_settings(self, group_id, child_name):
        return {'GROUP': group_id, 'RUN_NAME': child_name}

    def close_group(self, group_id, status, values, files):
        pass  # a group is only a name its runs share

    def end_children(self, group_id, child_name, status):
        pass  # W&B marks a run whose process stopped sending heartbeats as crashed itself
