"""MeshRegressionSolver: TrainValSolver that hands the training split's statistics to the model.

Before the model is built, the statistics of TRAIN_DATA are computed on rank 0, sent to
every rank (identical everywhere), put into the model config as ``MODEL.STATS`` (so the
run's config records them too) and, when training starts (once the run may use WORK_DIR),
written to ``WORK_DIR/stats.json``.  Eval / test features or targets of another width are an error, there
before training; eval / test samples (files, or subjects of one manifest folder) that TRAIN_DATA holds too a
warning.  The log shows,
beside them, the eval / test RMSE of predicting the training mean: the figure to beat.
A resumed checkpoint's (or PRETRAINED_MODEL's) normaliser buffers replace the model's, so
those are then the run's statistics: where they differ from TRAIN_DATA's, one warning says by
how much, and MODEL.STATS and stats.json take the loaded ones.
A model config that already gives STATS or STATS_FILE keeps its own.  Without
TRAIN_DATA (``tools/run_eval.py``) the model reads the training run's ``WORK_DIR/stats.json``, else the
statistics the checkpoint's description holds (``weights_description``, set by ``build_solver_with_weights``).
"""

import os

from scepter_like.data.loader import DATA_KEYS
from scepter_like.errors import ConfigError, DataError
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.train_val_solver import TrainValSolver
from tasks.mesh_regression.dataset import shared_samples
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
            elif bundle is None and getattr(self, 'weights_description', {}).get('stats'):
                model_cfg['STATS'] = self.weights_description['stats']  # those the evaluated weights were trained with
            else:
                raise ConfigError(
                    f'{self.cfg.path_of("MODEL")}: normalisation statistics come from TRAIN_DATA (a MeshDataset),'
                    f' {saved} or the description of the checkpoint evaluated; set MODEL.STATS_FILE to the'
                    ' stats.json of the training run'
                )
        super().construct_model()

    def _training_stats(self, dataset, path):
        stats = shared_stats(dataset)
        self._unsaved_stats = (stats, path)  # written by before_solve, once the run may use WORK_DIR
        self.logger.info(f'normalisation statistics from {stats.samples} training samples ({stats.vertices} vertices)')
        widths = (
            ('features', 'features', stats.n_features, 'PCA modes'),
            ('target', 'targets', stats.n_target, 'target channels'),
        )
        for mode in ('eval', 'test'):
            samples = getattr(self.datas[mode].dataset, 'samples', None) if mode in self.datas else None
            if not samples:
                continue
            where = self.cfg.path_of(DATA_KEYS[mode])
            for key, name, width, same in widths:  # before training, not when the test after it reaches them
                other = next((s[key].shape[-1] for s in samples if s[key].shape[-1] != width), None)
                if other is not None:
                    raise DataError(
                        f"{where}: its {name} have {other} value(s) per vertex, the training data's {width}"
                        + (f' ({", ".join(stats.feature_names)})' if key == 'features' else '')
                        + f'; give it samples of the same {same}'
                    )
            shared = shared_samples(dataset, self.datas[mode].dataset)
            if shared:  # a warning: evaluating on training samples on purpose (a fit check) is no mistake
                self.logger.warning(
                    f'{where} shares {shared} with TRAIN_DATA: its rmse measures the fit, not how the model does on'
                    ' meshes it never saw; split by subject, never by sample'
                )
            self.logger.info(f'{mode} rmse of predicting the training mean: {mean_baseline_rmse(samples, stats):.4f}')
        return stats

    def set_up(self):
        """Set up, then keep the statistics the model loaded (a resumed checkpoint's, pretrained weights')
        as the run's: stats.json and the recorded MODEL.STATS then describe the normaliser that trains."""
        super().set_up()
        unsaved = getattr(self, '_unsaved_stats', None)
        normaliser = getattr(self.unwrapped_model, 'normaliser', None)
        if unsaved is None or normaliser is None:
            return
        differences = normaliser.differences(unsaved[0])
        if not differences:
            return
        held = normaliser.stats()
        self.cfg.MODEL['STATS'] = held.to_dict()
        self._unsaved_stats = (held, unsaved[1])
        self.logger.warning(
            f"TRAIN_DATA's normalisation statistics differ from those the model loaded from"
            f' {self.resumed_from or self.cfg.MODEL.get("PRETRAINED_MODEL")}: {"; ".join(differences)};'
            ' the loaded ones are kept (stats.json, MODEL.STATS)'
        )

    def before_solve(self, hooks=None):
        """The training statistics go to WORK_DIR/stats.json once the run has claimed WORK_DIR (a run refused
        there, an earlier run's folder, writes nothing)."""
        unsaved = getattr(self, '_unsaved_stats', None)
        if hooks is None and unsaved is not None:
            self._unsaved_stats = None
            if self.is_main:
                save_stats(*unsaved)
            self.logger.info(f'normalisation statistics written to {unsaved[1]}')
        super().before_solve(hooks)
