"""MeshRegressionSolver: TrainValSolver that hands the training split's statistics to the model.

Before the model is built, the statistics of TRAIN_DATA are computed on rank 0, sent to
every rank (identical everywhere), written to ``WORK_DIR/stats.json`` and put into the
model config as ``MODEL.STATS`` (so the run's config records them too).  The log shows,
beside them, the eval / test RMSE of predicting the training mean: the figure to beat.  A model config
that already gives STATS or STATS_FILE keeps its own.
"""

import os

from scepter_like.errors import ConfigError
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.train_val_solver import TrainValSolver
from tasks.mesh_regression.stats import STATS_FILE, mean_baseline_rmse, save_stats, shared_stats


@SOLVERS.register_class()
class MeshRegressionSolver(TrainValSolver):
    para_dict = {}  # TrainValSolver's keys, strictly

    def construct_model(self):
        model_cfg = self.cfg.MODEL
        if model_cfg is not None and not model_cfg.get('STATS') and not model_cfg.get('STATS_FILE'):
            bundle = self.datas.get('train')
            if bundle is None or not hasattr(bundle.dataset, 'normalisation_stats'):
                raise ConfigError(
                    f'{self.cfg.path_of("MODEL")}: normalisation statistics come from TRAIN_DATA (a MeshDataset);'
                    ' without it set MODEL.STATS_FILE to the stats.json of the training run'
                )
            stats = shared_stats(bundle.dataset)
            if self.is_main:
                save_stats(stats, os.path.join(self.work_dir, STATS_FILE))
            model_cfg['STATS'] = stats.to_dict()
            self.logger.info(
                f'normalisation statistics from {stats.samples} training samples ({stats.vertices} vertices)'
                f' written to {os.path.join(self.work_dir, STATS_FILE)}'
            )
            for mode in ('eval', 'test'):
                samples = getattr(self.datas[mode].dataset, 'samples', None) if mode in self.datas else None
                if samples:
                    baseline = mean_baseline_rmse(samples, stats)
                    self.logger.info(f'{mode} rmse of predicting the training mean: {baseline:.4f}')
        super().construct_model()
