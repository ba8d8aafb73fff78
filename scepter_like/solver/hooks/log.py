"""LogHook: a train log line every LOG_INTERVAL steps (loss, lr, step and data time, samples/s, ETA).

Per step it keeps a reference to each of the step's scalar outputs; at the interval's
last step it writes their means (all-reduced under DDP, so the loss is the mean over all
ranks) to the log and to ``metrics.jsonl``, and warns about non-finite values.  An epoch
that ends between two intervals writes its remaining steps as a last line, then an
``epoch N trained`` line.  Epochs shorter than LOG_INTERVAL (one step each in full-batch
training) count their steps across epochs instead: a line every LOG_INTERVAL train steps
of the run and one for the steps left at the end, no line per epoch.  On a terminal
or in a Jupyter notebook (PROGRESS: auto) rank 0 shows a live bar per epoch instead of those lines on the console;
the log file still gets them.

Listed in EVAL_HOOKS or TEST_HOOKS (as scepter's configs do), it logs that pass's progress
instead: ``eval iter 20/63 ...`` with this rank's means of the step scalars every
LOG_INTERVAL iterations of the pass and at its end (no collective: the ranks' passes may
differ in length), and nothing else -- no train record in ``metrics.jsonl``, no ``trained in``
line; the pass's metrics are logged by the solver.
"""

import math
import sys
import time

import torch

from scepter_like.errors import TrainingError
from scepter_like.solver.hooks.hook import PRIORITY_LOG, Hook, SolverSurface, model_state
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.logger import LineWriter
from scepter_like.utils.progress_bar import ProgressBar, format_hms, live_display
from scepter_like.utils.scalars import ScalarSums


@HOOKS.register_class()
class LogHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_LOG, 'description': 'after BackwardHook'},
        'LOG_INTERVAL': {'value': 10, 'description': 'train steps between log lines; <= 0: off'},
        'SHOW_GPU_MEM': {'value': False, 'description': 'add the peak CUDA memory to each line'},
        'PROGRESS': {
            'value': 'auto',
            'description': "live progress bar: 'auto' (when stdout is a terminal or a notebook), on, off",
            'type': (str, bool),  # YAML reads a bare on / off as a boolean
            'choices': ['auto', 'on', 'off', True, False],
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.interval = cfg.LOG_INTERVAL
        self.show_gpu_mem = cfg.SHOW_GPU_MEM
        self.show_bar = {True: 'on', False: 'off'}.get(cfg.PROGRESS, cfg.PROGRESS)  # PROGRESS: when to show the bar
        self.last_logged = {}  # the means of the last line written
        self._bar = None
        self._lines = None  # LineWriter: the lines' records, cheaper than logger.info's
        self._scalars = ScalarSums()  # since the last line
        self._data_time = 0.0
        self._short = 0  # samples the short last batches since the last line lacked of BATCH_SIZE
        self._since = self._epoch_start = time.perf_counter()
        self._per_epoch = True  # the epoch is at least LOG_INTERVAL steps long: intervals count within it
        self._paused_at = None  # short epochs: when the last one's steps ended (evaluations do not count as steps)
        self._pass_log = False  # listed in EVAL_HOOKS / TEST_HOOKS: it logs the passes' progress (before_solve)

    def before_solve(self, solver: SolverSurface):
        self._pass_log = self not in solver.hooks_dict['train']
        if self._pass_log:  # no bar
            return
        if solver.is_main and (self.show_bar == 'on' or (self.show_bar == 'auto' and live_display(sys.stdout))):
            self._bar = ProgressBar(sys.stdout)
            self._bar.attach(solver.logger)

    def after_solve(self, solver: SolverSurface):
        if self._bar is not None:
            self._bar.detach()
            self._bar = None

    def before_epoch(self, solver: SolverSurface):
        if self._pass_log:
            return
        self._epoch_start = now = time.perf_counter()
        self._per_epoch = solver.progress.epoch_iters['train'] >= self.interval
        if self._per_epoch:
            self._since = now
            self._scalars = ScalarSums()  # drops what an interrupted epoch left
            self._data_time, self._short = 0.0, 0
        elif self._paused_at is None:
            self._since = now
        else:
            self._since += now - self._paused_at  # the time between two epochs' steps is not step time

    def before_all_iter(self, solver: SolverSurface):
        if self._pass_log:  # a pass starts: its own sums and clock
            self._scalars, self._since = ScalarSums(), time.perf_counter()
            return
        if self._bar is not None:
            label = f'epoch {solver.progress.epoch + 1}/{solver.progress.max_epochs}'
            self._bar.start(label, solver.progress.train_stop, solver.progress.iters[solver.mode])

    def after_iter(self, solver: SolverSurface):
        if self._pass_log:
            self._scalars.add(solver.step.outputs)
            if self.interval > 0 and solver.progress.iters[solver.mode] % self.interval == 0:
                self._write_pass_line(solver)
            return
        if self._bar is not None:
            self._bar.tick(solver.progress.iters[solver.mode])
        if self.interval <= 0:
            return
        self._scalars.add(solver.step.outputs)
        self._data_time += solver.step.data_time
        progress = solver.progress  # (a train hook: its after_iter runs in train steps only)
        if progress.iters['train'] == progress.epoch_iters['train']:  # the epoch's last batch may be short
            bundle = solver.datas['train']
            self._short += bundle.batch_size - bundle.batch_samples(progress.fold_window(bundle.num_batches())[1] - 1)
        if progress.log_interval_ends(self.interval):
            self._write_line(solver)

    def after_all_iter(self, solver: SolverSurface):
        if self._pass_log:
            if self.interval > 0 and self._scalars.count:
                self._write_pass_line(solver)
            return
        progress = solver.progress
        # MAX_STEPS, a stop or the epoch's end cut an interval (a short epoch's end only at the end of training)
        ends = self._per_epoch or progress.steps_left() == 0 or progress.stop_reason is not None
        if self.interval > 0 and self._scalars.count and ends:
            self._write_line(solver)
        self._paused_at = time.perf_counter()
        if self._bar is not None:
            self._bar.finish(solver.progress.iters[solver.mode])

    def after_epoch(self, solver: SolverSurface):
        if self._per_epoch and not self._pass_log:
            seconds, progress = time.perf_counter() - self._epoch_start, solver.progress
            cut = (
                ''
                if progress.epoch_finished
                else f' (stopped after iter {progress.iters["train"]}/{progress.epoch_iters["train"]})'
            )
            solver.logger.info(f'epoch {progress.epoch + 1}/{progress.max_epochs} trained in {seconds:.2f}s{cut}')

    def _write_pass_line(self, solver: SolverSurface):
        """An eval / test pass's line: this rank's means since the last line, and the time per iteration."""
        now, count = time.perf_counter(), self._scalars.count
        means = self._scalars.take()
        mode, progress = solver.mode, solver.progress
        text = f'{mode} iter {progress.iters[mode]}/{progress.epoch_iters[mode]}' + ''.join(
            f' {k}: {v:.4g}' for k, v in means.items()
        )
        solver.logger.info(f'{text} time: {(now - self._since) / count * 1e3:.2f}ms')
        self._since = now

    def _write_line(self, solver: SolverSurface):
        now = time.perf_counter()
        count = self._scalars.count
        means = self._scalars.take(solver.world_size)  # every rank: a collective under DDP
        step_time, data_time = (now - self._since) / count, self._data_time / count
        samples, self._short = count * solver.datas[solver.mode].batch_size - self._short, 0
        self._data_time, self._since = 0.0, now
        values = {**means, **model_state(solver)}
        if solver.optimizer is not None:
            values['lr'] = solver.optimizer.param_groups[0]['lr']
        progress, mode = solver.progress, solver.mode
        text = (
            f'epoch {progress.epoch + 1}/{progress.max_epochs} iter {progress.iters[mode]}/{progress.epoch_iters[mode]}'
            f' step {progress.total_iter}'
            + ''.join(f' {k}: {v:.4g}' for k, v in values.items())
            + f' time: {step_time * 1e3:.2f}ms data: {data_time * 1e3:.2f}ms'
        )
        if step_time > 0:
            samples_per_s = samples * solver.world_size / (step_time * count)
            text += f' samples/s: {samples_per_s:.0f}'
            if solver.model_flops:  # forward + backward ~ 3x the forward FLOPs (register_flops)
                text += f' FLOP/s: {3 * solver.model_flops * samples_per_s:.3g}'
        text += f' eta: {format_hms(solver.progress.steps_left() * step_time)}'
        if self.show_gpu_mem and solver.device.type == 'cuda':
            text += f' mem: {torch.cuda.max_memory_allocated(solver.device) / 2**20:.0f}MiB'
        if self._lines is None or self._lines.logger is not solver.logger:
            self._lines = LineWriter(solver.logger, progress_line=True)  # the progress bar keeps these off its line
        self._lines.info(text)
        if solver.metrics_log is not None:
            solver.metrics_log.write_train(solver, step_time, data_time, values)
        bad = [k for k, v in means.items() if not math.isfinite(v)]
        if (
            'loss' in bad and solver.updater.settings.nonfinite_policy == 'stop'
        ):  # every rank read the same all-reduced means
            raise TrainingError(
                f'the loss is {means["loss"]} in the log interval up to step {progress.total_iter}; lower the learning'
                ' rate, clip gradients (BackwardHook GRADIENT_CLIP) or check the data; NONFINITE_POLICY: skip'
                ' skips such steps instead'
            )
        if bad:
            solver.logger.warning(f'non-finite {", ".join(bad)} in the log interval up to step {progress.total_iter}')
        self.last_logged = means
        if self._bar is not None and 'loss' in means:
            self._bar.set_postfix(f'loss {means["loss"]:.4g}')
