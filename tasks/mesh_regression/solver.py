"""MeshRegressionSolver: TrainValSolver that hands the training split's statistics to the model.

Before the model is built, the statistics of TRAIN_DATA are computed on rank 0, sent to
every rank (identical everywhere), written to ``WORK_DIR/stats.json`` and put into the
model config as ``MODEL.STATS`` (so the run's config records them too).  The log shows,
beside them, the eval / test RMSE of predicting the training mean: the figure to beat.
A model config that already gives STATS or STATS_FILE keeps its own.  Without
TRAIN_DATA (``tools/run_eval.py``) the model reads the training run's ``WORK_DIR/stats.json``.
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
            saved = os.path.join(self.work_dir, STATS_FILE)
            if bundle is not None and hasattr(bundle.dataset, 'normalisation_stats'):
                model_cfg['STATS'] = self._training_stats(bundle.dataset, saved).to_dict()
            elif bundle is None and os.path.isfile(saved):  # evaluation: the training run's statistics
                model_cfg['STATS_FILE'] = saved
            else:
                raise ConfigError(
                    f'{self.cfg.path_of("MODEL")}: normalisation statistics come from TRAIN_DATA (a MeshDataset)'
                    f' or {saved}; set MODEL.STATS_FILE to the stats.json of the training run'
                )
        super().construct_model()

    def _training_stats(self, dataset, path):
        stats = shared_stats(dataset)
        if self.is_main:
            save_stats(stats, path)
        self.logger.info(
            f'normalisation statistics from {stats.samples} training samples ({stats.vertices} vertices)'
            f' written to {path}'
        )
        for mode in ('eval', 'test'):
            samples = getattr(self.datas[mode].dataset, 'samples', None) if mode in self.datas else None
            if samples:
                self.logger.info(
                    f'{mode} rmse of predicting the training mean: {mean_baseline_rmse(samples, stats):.4f}'
                )
        return stats
