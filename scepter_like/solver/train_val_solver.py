"""TrainValSolver: BaseSolver plus METRICS over the whole EVAL_DATA and TEST_DATA."""

import os

import numpy as np
import torch

from scepter_like.data.loader import DATA_KEYS
from scepter_like.errors import ConfigError, DataError
from scepter_like.metric.base import Metric, checked_metric
from scepter_like.metric.output_means import OutputMeans, batch_samples
from scepter_like.metric.whole_pass import PassCollector, WholePassMetric
from scepter_like.solver.base_solver import BaseSolver
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.sanity import first_eval_results
from scepter_like.utils.checkpoint import atomic_torch_save

ABSENT = object()


def batch_value(batch, key):
    """``batch[key]``; a dotted key (scepter's ``meta.img_path``) reads into nested dicts; ``ABSENT`` when missing."""
    value = batch
    for part in [key] if key in batch else key.split('.'):
        if not isinstance(value, dict) or part not in value:
            return ABSENT
        value = value[part]
    return value


def _same_values(a, b):
    """Whether two step values hold the same numbers (tensors compared on the same device and dtype; lists, numbers
    and arrays by value)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.equal(a.to(b.device, b.dtype), b)
    try:
        return bool(np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object)))
    except (TypeError, ValueError):
        return a is b


def check_distinct_names(metrics, entries):
    """A ConfigError when two METRICS report a value of one name: the later would hide the earlier in epoch_outputs,
    the log and SAVE_BEST_BY without a word.  Names a first pass makes known (scepter's metrics) are not checked."""
    seen = {}
    for i, metric in enumerate(metrics):
        names = metric.output_names()
        for name in names or ():
            if name in seen:
                first = seen[name]
                raise ConfigError(
                    f'{entries[i].path}: {entries[i].NAME} reports {name!r}, as {entries[first].path}'
                    f' ({entries[first].NAME}) does, and one would hide the other; keep one of them'
                )
            seen[name] = i


@SOLVERS.register_class()
class TrainValSolver(BaseSolver):
    """Evaluates METRICS every EVAL_INTERVAL epochs and on TEST_DATA at the end.

    The results land in ``solver.epoch_outputs['eval' | 'test']`` as ``{name: float}``,
    exact under any world size (metrics reduce sums and counts over ranks).  A scepter
    metric (a callable over the whole pass, ``BaseMetric``) is given the tensors its KEYS
    name, gathered from every batch and rank (``metric/whole_pass.py``).  The scalars the
    step returns that no metric reads (``val_loss``) join them, averaged over the pass
    (``metric/output_means.py``).
    """

    para_dict = {
        'DO_FINAL_EVAL': {
            'value': True,
            'description': "compute METRICS over each eval / test pass (scepter's switch; false: only the hooks run)",
        },
        'SAVE_EVAL_DATA': {
            'value': False,
            'description': 'save what METRICS and EXTRA_KEYS read in each eval / test pass, gathered over ranks in'
            ' dataset order, to WORK_DIR/{mode}_{epochs done:05d}.pth (rank 0)',
        },
    }

    def construct_metrics(self):
        super().construct_metrics()
        entries = self.cfg.METRICS or []
        self.metrics = [self._metric(entry, metric) for entry, metric in zip(entries, self.metrics)]
        if not self.cfg.DO_FINAL_EVAL:
            self.metrics = []
        read = [k for metric in self.metrics for k in getattr(metric, 'keys', ())]
        self.output_means = OutputMeans(read) if self.cfg.DO_FINAL_EVAL else None
        self._eval_outputs_learnt = False
        cfg = self.cfg
        check_distinct_names(self.metrics, cfg.METRICS)
        if cfg.EVAL_DATA is not None and not entries and not cfg.EVAL_HOOKS and not self.runs_own_pass('eval'):
            hint = getattr(self.unwrapped_model, 'metrics_hint', lambda: None)() or (
                '[{NAME: MSEMetric, KEYS: [pred, target]}] for a regression, [{NAME: AccuracyMetric}] for a classifier'
            )
            self.logger.warning(
                f'{cfg.path_of("EVAL_DATA")} is evaluated, but with no METRICS (and no EVAL_HOOKS) the evaluation'
                f' reports nothing; add METRICS, e.g. {hint}'
            )
        self.eval_data = None
        self._extras_hide_outputs_checked = False
        if self.cfg.SAVE_EVAL_DATA:
            keys = list(dict.fromkeys([k for entry in entries for k in entry.get('KEYS') or []] + self.extra_keys))
            if not keys:
                raise ConfigError(f'{self.cfg.path_of("SAVE_EVAL_DATA")}: METRICS and EXTRA_KEYS name no key to save')
            self.eval_data = PassCollector(keys, 'SAVE_EVAL_DATA')

    def _metric(self, entry, metric):
        """This project's Metric as it is; scepter's callable over the whole pass wrapped; anything else an error."""
        if isinstance(metric, Metric):
            return metric
        if callable(metric):
            return WholePassMetric(metric, entry.get('KEYS') or [])
        return checked_metric(metric, entry)  # raises: the Metric contract, named

    def _check_extras_against_outputs(self, extras, results):
        """Once, on the first batch: a batch key of EXTRA_KEYS that the model's outputs hold too, with other values
        (a reference ``u_exact`` from a file beside the model's ``exact_solution``), is the one the metrics read;
        nothing else would say which."""
        self._extras_hide_outputs_checked = True
        differ = [k for k, v in extras.items() if k in results and not _same_values(v, results[k])]
        if differ:
            self.logger.warning(
                f'{self.cfg.path_of("EXTRA_KEYS")}: {differ} are in the model outputs too, with other values; the'
                " metrics read the batch's, not the model's"
            )

    def start_pass_iters(self):
        """Each eval / test pass starts its METRICS (SAVE_EVAL_DATA's collector, the output means) from nothing; what
        gathers whole-pass rows learns from the pass's sampler how to put them in dataset order."""
        sampler = self.datas[self._mode].sampler
        for metric in self.metrics + [m for m in (self.eval_data, self.output_means) if m]:
            metric.reset(sampler) if isinstance(metric, (PassCollector, WholePassMetric)) else metric.reset()
        super().start_pass_iters()

    def update_metrics(self, batch_data, results):
        """Feed the metrics what the step returned and EXTRA_KEYS of its batch (the eval hooks see those keys too):
        a ``run_step_eval`` of a subclass's own, scepter's way, feeds them its results."""
        data = results
        if self.extra_keys:
            extras = {k: batch_value(batch_data, k) for k in self.extra_keys}
            missing = [k for k, value in extras.items() if value is ABSENT]
            if missing:
                raise DataError(f'SOLVER.EXTRA_KEYS names {missing}, which the {self.mode} batches lack')
            self.step.outputs.update(extras)
            if not self._extras_hide_outputs_checked:
                self._check_extras_against_outputs(extras, results)
            data = {**results, **extras}
        for metric in self.metrics + ([self.eval_data] if self.eval_data else []):
            metric.update(data)
        if self.output_means is not None:
            self.output_means.update(results, batch_samples(batch_data))

    def metric_names(self, mode='eval'):
        """The names ``epoch_outputs[mode]`` will hold; None while a scepter metric has not run yet, or when a
        subclass's own ``run_eval`` / ``run_test`` fills them.  The scalars the step returns beside (``val_loss``)
        are learnt, before any pass, from one eval step (``sanity.first_eval_results``)."""
        if mode not in self.datas:
            return []
        if self.runs_own_pass(mode):
            return None
        names = [metric.output_names() for metric in self.metrics]
        if None in names:
            return None
        names = [name for group in names for name in group]
        if self.output_means is None:
            return names
        if not self._eval_outputs_learnt:
            self._eval_outputs_learnt = True
            self.output_means.learn(first_eval_results(self) or {})
        return names + [name for name in self.output_means.seen if name not in names]

    def compute_epoch_outputs(self):
        out = {}
        for metric in self.metrics:
            out.update(metric.compute(self.device))
        if self.output_means is not None:  # a name a metric reports is the metric's (scepter's model METRIC)
            means = self.output_means.compute(self.device)
            out.update({name: value for name, value in means.items() if name not in out})
        if self.eval_data is not None:
            data = self.eval_data.gathered()  # every rank takes part
            path = os.path.join(self.work_dir, f'{self.mode}_{self.progress.epochs_completed():05d}.pth')
            if self.is_main:
                atomic_torch_save(data, path)
        if out:
            text = ', '.join(f'{k}: {v:.4g}' for k, v in out.items())  # an error of 3e-05 is not 0.0000
            self.logger.info(f'{self.mode} {self._evaluated()} ({len(self.datas[self.mode].dataset)} samples): {text}')
        return out

    def _evaluated(self):
        """What this evaluation is of: an epoch inside training, the final test, or (no training) the data."""
        if 'train' not in self.datas:  # run_eval: the weights loaded, on this mode's data
            return f'on {self.cfg[DATA_KEYS[self.mode]].NAME}'
        if self.mode != 'eval':
            return 'final'
        progress = self.progress
        cut = (
            f' at iter {progress.iters["train"]}/{progress.epoch_iters["train"]} (cut short)'
            if progress.epoch_cut
            else ''
        )
        return f'epoch {progress.epoch + 1}/{self.max_epochs}{cut}'
