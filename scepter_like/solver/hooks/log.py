"""LogHook: periodic train log lines (loss, lr, step and data time, samples/s, ETA).

Per step it only adds this step's scalar outputs to running sums on their device; at
each LOG_INTERVAL it reads them once (one all-reduce under DDP, so the logged loss is
the mean over all ranks), formats one line and appends it to ``metrics.jsonl``.
On a terminal (PROGRESS: auto) rank 0 shows a live bar per epoch instead of those lines
on the console; the log file still gets them.
"""

import math
import sys
import time

import torch

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.hook import PRIORITY_LOG, Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.progress import ProgressBar, format_hms
from scepter_like.utils.scalars import ScalarSums


@HOOKS.register_class()
class LogHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_LOG, 'description': 'after BackwardHook'},
        'LOG_INTERVAL': {'value': 10, 'description': 'train steps between log lines; <= 0: off'},
        'SHOW_GPU_MEM': {'value': False, 'description': 'add the peak CUDA memory to each line'},
        'PROGRESS': {
            'value': 'auto',
            'description': "live progress bar: 'auto' (when stdout is a terminal), on, off",
            'type': (str, bool),  # YAML reads a bare on / off as a boolean
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.interval = cfg.LOG_INTERVAL
        self.show_gpu_mem = cfg.SHOW_GPU_MEM
        progress = {True: 'on', False: 'off'}.get(cfg.PROGRESS, cfg.PROGRESS)
        if progress not in ('auto', 'on', 'off'):
            raise ConfigError(f'{cfg.path_of("PROGRESS")}: expected auto, on or off, got {cfg.PROGRESS!r}')
        self.progress = progress
        self._bar = None
        self.last_logged = {}
        self._reset(time.perf_counter())
        self._epoch_start = time.perf_counter()

    def _reset(self, now):
        self._scalars = ScalarSums()
        self._data_time = 0.0
        self._since = now

    def before_solve(self, solver):
        if solver.is_main and (self.progress == 'on' or (self.progress == 'auto' and sys.stdout.isatty())):
            self._bar = ProgressBar(sys.stdout)
            self._bar.attach(solver.logger)

    def after_solve(self, solver):
        if self._bar is not None:
            self._bar.detach()
            self._bar = None

    def before_epoch(self, solver):
        if solver.mode == 'train':
            self._epoch_start = time.perf_counter()
            self._reset(self._epoch_start)

    def before_all_iter(self, solver):
        if solver.mode == 'train' and self._bar is not None:
            total = solver.epoch_max_iter
            if solver.max_steps > 0:
                total = min(total, solver.iter + solver.max_steps - solver.total_iter)
            self._bar.start(f'epoch {solver.epoch + 1}/{solver.max_epochs}', total, solver.iter)

    def after_all_iter(self, solver):
        if solver.mode != 'train':
            return
        if self.interval > 0 and self._scalars.count:  # steps since the last line: MAX_STEPS or a stop cut the epoch
            self._log(solver)
        if self._bar is not None:
            self._bar.finish(solver.iter)

    def after_iter(self, solver):
        if solver.mode != 'train':
            return
        it = solver.iter
        if self._bar is not None:
            self._bar.tick(it)
        if self.interval <= 0:
            return
        self._scalars.add(solver.iter_outputs)
        self._data_time += solver.data_time
        if it % self.interval == 0:  # after_all_iter logs the steps left at the end of an epoch
            self._log(solver)

    def _log(self, solver):
        now = time.perf_counter()
        count = max(self._scalars.count, 1)
        means = self._scalars.means(solver.world_size)
        values = dict(means)
        if solver.optimizer is not None:
            values['lr'] = solver.optimizer.param_groups[0]['lr']
        step_time, data_time = (now - self._since) / count, self._data_time / count
        line = (
            f'epoch {solver.epoch + 1}/{solver.max_epochs} iter {solver.iter}/{solver.epoch_max_iter}'
            f' step {solver.total_iter}'
            + ''.join([f' {k}: {v:.4g}' for k, v in values.items()])
            + f' time: {step_time * 1e3:.2f}ms data: {data_time * 1e3:.2f}ms'
        )
        if step_time > 0:
            samples_per_s = solver.batch_size * solver.world_size / step_time
            line += f' samples/s: {samples_per_s:.0f}'
            if solver.model_flops:  # forward + backward ~ 3x the forward FLOPs (register_flops)
                line += f' FLOP/s: {3 * solver.model_flops * samples_per_s:.3g}'
        line += f' eta: {format_hms(self._remaining_steps(solver) * step_time)}'
        if self.show_gpu_mem and solver.device.type == 'cuda':
            line += f' mem: {torch.cuda.max_memory_allocated(solver.device) / 2**20:.0f}MiB'
        solver.logger.info(line, extra={'progress_line': True})
        if solver.metrics_log is not None:
            solver.metrics_log.write_train(solver, values, step_time=step_time, data_time=data_time)
        bad = [k for k, v in means.items() if not math.isfinite(v)]
        if bad:
            solver.logger.warning(f'non-finite {", ".join(bad)} in the last {count} steps')
        self.last_logged = means
        if self._bar is not None and 'loss' in means:
            self._bar.postfix = f', loss {means["loss"]:.4g}'
        self._reset(now)

    @staticmethod
    def _remaining_steps(solver):
        per_epoch = solver.epoch_max_iter
        left = per_epoch - solver.iter + (solver.max_epochs - solver.epoch - 1) * per_epoch
        if solver.max_steps > 0:
            left = min(left, solver.max_steps - solver.total_iter)
        return max(left, 0)

    def after_epoch(self, solver):
        if solver.mode == 'train':
            seconds = time.perf_counter() - self._epoch_start
            solver.logger.info(f'epoch {solver.epoch + 1}/{solver.max_epochs} trained in {seconds:.2f}s')
