"""TrainValSolver: BaseSolver plus METRICS over the whole EVAL_DATA and TEST_DATA."""

from scepter_like.metric.base import checked_metric
from scepter_like.solver.base_solver import DATA_KEYS, BaseSolver
from scepter_like.solver.registry import SOLVERS


@SOLVERS.register_class()
class TrainValSolver(BaseSolver):
    """Evaluates METRICS every EVAL_INTERVAL epochs and on TEST_DATA at the end.

    The results land in ``solver.epoch_outputs['eval' | 'test']`` as ``{name: float}``,
    exact under any world size (metrics reduce sums and counts over ranks).
    """

    para_dict = {}  # BaseSolver's keys, strictly

    def construct_metrics(self):
        """BaseSolver's, then each metric must keep the Metric contract this solver runs it by."""
        super().construct_metrics()
        for metric, entry in zip(self.metrics, self.cfg.METRICS or []):
            checked_metric(metric, entry)

    def run_eval(self):
        self._reset_metrics()
        super().run_eval()

    def run_test(self):
        self._reset_metrics()
        super().run_test()

    def _reset_metrics(self):
        for metric in self.metrics:
            metric.reset()

    def _update_metrics(self, batch_data, results):
        data = results
        if self.extra_keys:
            missing = [k for k in self.extra_keys if k not in batch_data]
            if missing:
                from scepter_like.errors import DataError

                raise DataError(f'SOLVER.EXTRA_KEYS names {missing}, which the {self.mode} batches lack')
            data = {**results, **{k: batch_data[k] for k in self.extra_keys}}
        for metric in self.metrics:
            metric.update(data)

    def run_step_eval(self, batch_data, batch_idx=0, step=None, rank=None):
        results = self._eval_forward(batch_data)
        self._update_metrics(batch_data, results)
        return results

    def run_step_test(self, batch_data, batch_idx=0, step=None, rank=None):
        results = self._eval_forward(batch_data)
        self._update_metrics(batch_data, results)
        return results

    def metric_names(self, mode='eval'):
        return [name for metric in self.metrics for name in metric.output_names()] if mode in self.datas else []

    def compute_epoch_outputs(self):
        out = {}
        for metric in self.metrics:
            out.update(metric.compute(self.device))
        if out:
            text = ', '.join(f'{k}: {v:.4f}' for k, v in out.items())
            self.logger.info(f'{self.mode} {self._evaluated()} ({len(self.datas[self.mode].dataset)} samples): {text}')
        return out

    def _evaluated(self):
        """What this evaluation is of: an epoch inside training, the final test, or (no training) the data."""
        if 'train' not in self.datas:  # run_eval: the weights loaded, on this mode's data
            return f'on {self.cfg[DATA_KEYS[self.mode]].NAME}'
        return f'epoch {self.epoch + 1}/{self.max_epochs}' if self.mode == 'eval' else 'final'
