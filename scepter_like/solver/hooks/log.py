"""LogHook: periodic train log lines (loss, lr, step and data time, samples/s, ETA).

Per step it only keeps references to this step's scalar outputs.  At each LOG_INTERVAL
it notes the interval (its means are all-reduced there under DDP, so the logged loss is
the mean over all ranks, but not read) and, when EMIT_SECONDS have passed since it last
emitted, emits every noted line: reads the means, makes the log record (stamped with the
time of its step) and the ``metrics.jsonl`` line.  Made one after another, lines cost a
fast loop a fraction of what they cost one at a time between steps, where each finds the
caches full of the training step's data; and the device is never waited on for a line.
While training runs, a line is emitted at most EMIT_SECONDS plus one interval after its
step (at its step when intervals take longer than EMIT_SECONDS), and always before the
epoch ends, a checkpoint is written, ``solve`` ends (on an error too), or any other
record of the solver's logger is made in the training thread, so the log stays in order.
A loop that stalls between two log steps holds its last noted lines until it goes on.
On a terminal (PROGRESS: auto) rank 0 shows a live bar per epoch instead of those lines
on the console; the log file still gets them.
"""

import logging
import math
import sys
import threading
import time
from typing import NamedTuple

import torch

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.hook import PRIORITY_LOG, Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.logger import backdate
from scepter_like.utils.progress import ProgressBar, format_hms
from scepter_like.utils.scalars import IntervalMeans, ScalarSums


class _Line(NamedTuple):
    """One LOG_INTERVAL, as noted at its last step."""

    wall: float  # unix time
    epoch: int
    iter: int
    step: int  # total train steps
    means: IntervalMeans
    lr: float | None
    step_time: float  # seconds per step
    data_time: float
    mem_mib: float | None  # peak CUDA memory (SHOW_GPU_MEM)


class _Run(NamedTuple):
    """What stays the same over a train epoch: the lines' sinks and constants (read once, not per line)."""

    logger: logging.Logger
    metrics_log: object  # MetricsLog, or None off rank 0
    max_epochs: int
    epoch_iters: int
    max_steps: int  # <= 0: no limit
    world_size: int
    samples_per_step: int  # over all ranks
    model_flops: float | None  # forward FLOPs per sample (register_flops)
    mem_device: torch.device | None  # SHOW_GPU_MEM on CUDA: the device whose peak memory is shown

    def steps_left(self, line):
        """Train steps left in the run after ``line``'s step."""
        left = self.epoch_iters - line.iter + (self.max_epochs - line.epoch - 1) * self.epoch_iters
        if self.max_steps > 0:
            left = min(left, self.max_steps - line.step)
        return max(left, 0)


@HOOKS.register_class()
class LogHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_LOG, 'description': 'after BackwardHook'},
        'LOG_INTERVAL': {'value': 10, 'description': 'train steps between log lines; <= 0: off'},
        'SHOW_GPU_MEM': {'value': False, 'description': 'add the peak CUDA memory to each line'},
        'EMIT_SECONDS': {
            'value': 0.5,
            'description': 'noted lines are written together at most this often (seconds); 0: each at its step',
        },
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
        self.emit_seconds = cfg.EMIT_SECONDS
        if self.emit_seconds < 0:
            raise ConfigError(f'{cfg.path_of("EMIT_SECONDS")}: must be 0 or more, got {self.emit_seconds}')
        progress = {True: 'on', False: 'off'}.get(cfg.PROGRESS, cfg.PROGRESS)
        if progress not in ('auto', 'on', 'off'):
            raise ConfigError(f'{cfg.path_of("PROGRESS")}: expected auto, on or off, got {cfg.PROGRESS!r}')
        self.progress = progress
        self._bar = None
        self.last_logged = {}  # the means of the last line emitted
        self._pending = []  # noted lines (_Line), oldest first
        self._emitted_at = float('-inf')  # perf_counter
        self._run = None  # _Run, set per train epoch
        self._thread = None  # the training thread
        self._failed = None  # an emission's error inside another record's logging call, raised by the next
        self._scalars = ScalarSums()  # since the last noted line
        self._data_time = 0.0
        self._since = self._epoch_start = time.perf_counter()

    def before_solve(self, solver):
        if solver.is_main and (self.progress == 'on' or (self.progress == 'auto' and sys.stdout.isatty())):
            self._bar = ProgressBar(sys.stdout)
            self._bar.attach(solver.logger)
        self._thread = threading.get_ident()
        solver.logger.addFilter(self._emit_first)

    def after_solve(self, solver):
        try:
            self._emit()
        finally:
            solver.logger.removeFilter(self._emit_first)
            if self._bar is not None:
                self._bar.detach()
                self._bar = None

    def before_epoch(self, solver):
        if solver.mode == 'train':
            self._since = self._epoch_start = time.perf_counter()
            self._scalars = ScalarSums()  # drops what an interrupted epoch left
            self._data_time = 0.0

    def before_all_iter(self, solver):
        if solver.mode != 'train':
            return
        world_size = solver.world_size
        self._run = _Run(
            solver.logger,
            solver.metrics_log,
            solver.max_epochs,
            solver.epoch_max_iter,
            solver.max_steps,
            world_size,
            solver.batch_size * world_size,
            solver.model_flops,
            solver.device if self.show_gpu_mem and solver.device.type == 'cuda' else None,
        )
        if self._bar is not None:
            total = solver.epoch_max_iter
            if solver.max_steps > 0:
                total = min(total, solver.iter + solver.max_steps - solver.total_iter)
            self._bar.start(f'epoch {solver.epoch + 1}/{solver.max_epochs}', total, solver.iter)

    def after_all_iter(self, solver):
        if solver.mode != 'train':
            return
        if self.interval > 0 and self._scalars.count:  # steps since the last line: MAX_STEPS or a stop cut the epoch
            self._note(solver)
        self._emit()
        if self._bar is not None:
            self._bar.finish(solver.iter)

    def before_save_checkpoint(self, solver, checkpoint):
        self._emit()  # metrics.jsonl holds every line up to the checkpoint

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
        if it % self.interval == 0:  # after_all_iter notes the steps left at the end of an epoch
            self._note(solver)

    def _note(self, solver):
        """Note the interval that ends at this step; emit the noted lines when EMIT_SECONDS have passed."""
        now = time.perf_counter()
        scalars, run, optimizer = self._scalars, self._run, solver.optimizer
        count = scalars.count or 1
        self._pending.append(
            _Line(
                time.time(),
                solver.epoch,
                solver.iter,
                solver.total_iter,
                scalars.take(run.world_size),
                optimizer.param_groups[0]['lr'] if optimizer is not None else None,
                (now - self._since) / count,
                self._data_time / count,
                torch.cuda.max_memory_allocated(run.mem_device) / 2**20 if run.mem_device is not None else None,
            )
        )
        self._data_time, self._since = 0.0, now
        if now - self._emitted_at >= self.emit_seconds:
            self._emit()

    def _emit_first(self, record):
        """Logger filter: the noted lines go out before any other record made in the training thread."""
        if self._pending and not getattr(record, 'progress_line', False) and threading.get_ident() == self._thread:
            try:
                self._emit()
            except Exception as e:  # not the logging caller's error: the next emission raises it
                self._failed = e
        return True

    def _emit(self):
        """Log the noted lines and add them to metrics.jsonl, in order."""
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        lines, self._pending = self._pending, []  # a warning logged below finds none pending
        if not lines:
            return
        self._emitted_at = time.perf_counter()
        run = self._run
        logger, metrics_log = run.logger, run.metrics_log
        site = logger.findCaller()[:3] if logger.isEnabledFor(logging.INFO) else None
        for line in lines:
            means = line.means.read()
            values = dict(means)
            if line.lr is not None:
                values['lr'] = line.lr
            if site is not None:
                text = self._format(line, values, run)
                record = logger.makeRecord(
                    logger.name, logging.INFO, site[0], site[1], text, (), None, site[2], {'progress_line': True}
                )
                logger.handle(backdate(record, line.wall))
            if metrics_log is not None:
                metrics_log.write_train(line, run.epoch_iters, values)
            bad = [k for k, v in means.items() if not math.isfinite(v)]
            if bad:
                logger.warning(f'non-finite {", ".join(bad)} in the log interval up to step {line.step}')
            self.last_logged = means
        if metrics_log is not None:
            metrics_log.flush()
        if self._bar is not None and 'loss' in self.last_logged:
            self._bar.postfix = f', loss {self.last_logged["loss"]:.4g}'

    @staticmethod
    def _format(line, values, run):
        text = (
            f'epoch {line.epoch + 1}/{run.max_epochs} iter {line.iter}/{run.epoch_iters} step {line.step}'
            + ''.join([f' {k}: {v:.4g}' for k, v in values.items()])
            + f' time: {line.step_time * 1e3:.2f}ms data: {line.data_time * 1e3:.2f}ms'
        )
        if line.step_time > 0:
            samples_per_s = run.samples_per_step / line.step_time
            text += f' samples/s: {samples_per_s:.0f}'
            if run.model_flops:  # forward + backward ~ 3x the forward FLOPs (register_flops)
                text += f' FLOP/s: {3 * run.model_flops * samples_per_s:.3g}'
        text += f' eta: {format_hms(run.steps_left(line) * line.step_time)}'
        if line.mem_mib is not None:
            text += f' mem: {line.mem_mib:.0f}MiB'
        return text

    def after_epoch(self, solver):
        if solver.mode == 'train':
            seconds = time.perf_counter() - self._epoch_start
            solver.logger.info(f'epoch {solver.epoch + 1}/{solver.max_epochs} trained in {seconds:.2f}s')
