"""ProfilerHook: ``torch.profiler`` over a window of train steps, and optional NVTX ranges.

The profiler starts at the first train step and follows the schedule: skip START_STEP
steps, then REPEAT cycles of WAIT idle, WARMUP warm-up and ACTIVE recorded steps; each
recorded cycle writes ``{OUTPUT_DIR}/trace-rank{r}-step{S}.json`` (S: train steps done) (Chrome trace: open
in chrome://tracing or Perfetto) and ``summary-rank{r}-step{S}.txt`` (the operator
table of ``key_averages``, sorted by SORT_BY).  When the schedule is done the profiler
stops, so later steps cost nothing.  Profiler steps begin in ``before_iter`` (the hook
runs first), so a recorded step covers its forward, backward and every hook.

NVTX: with the environment variable ``SCEPTER_NVTX=1`` and CUDA available, each train
epoch and step is an NVTX range (``train epoch E`` / ``step S``) for Nsight Systems
(``nsys profile -t cuda,nvtx python tools/run_train.py ...``); without CUDA nothing is
called.

kineto's ``USDT: ... profiler_start / profiler_stop`` lines are kept out of the output
(``utils/torch_noise.py``).
"""

import os

import torch

from scepter_like.solver.hooks.hook import Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.torch_noise import quiet_profiler

PRIORITY_PROFILER = -100  # first at every stage: a step's range opens before any other hook


def nvtx_enabled():
    return os.environ.get('SCEPTER_NVTX', '') == '1' and torch.cuda.is_available()


@HOOKS.register_class()
class ProfilerHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_PROFILER, 'description': 'runs first so a step is profiled whole'},
        'START_STEP': {'value': 0, 'description': 'train steps to skip before the first cycle', 'min': 0},
        'WAIT': {'value': 1, 'description': 'idle steps at the start of a cycle', 'min': 0},
        'WARMUP': {'value': 1, 'description': 'traced but discarded steps of a cycle', 'min': 0},
        'ACTIVE': {'value': 3, 'description': 'recorded steps of a cycle', 'min': 1},
        'REPEAT': {'value': 1, 'description': 'cycles to record', 'min': 1},
        'RECORD_SHAPES': {'value': False, 'description': 'record operator input shapes'},
        'PROFILE_MEMORY': {'value': False, 'description': 'record tensor memory'},
        'WITH_STACK': {'value': False, 'description': 'record Python stacks'},
        'OUTPUT_DIR': {'value': '', 'description': "trace and summary folder; '': WORK_DIR/profiler"},
        'SORT_BY': {'value': 'self_cpu_time_total', 'description': 'key_averages().table sort key'},
        'ROW_LIMIT': {'value': 30, 'description': 'rows of the summary table'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.total_steps = cfg.START_STEP + (cfg.WAIT + cfg.WARMUP + cfg.ACTIVE) * cfg.REPEAT
        self.output_dir = cfg.OUTPUT_DIR
        self.profiler = None
        self._steps = 0
        self._last_step = 0
        self._done = False
        self._nvtx = False
        self._step_range_open = False
        self._rank = 0
        self.files = []

    def before_solve(self, solver: SolverSurface):
        self.output_dir = self.output_dir or os.path.join(solver.work_dir, 'profiler')
        self._rank = solver.rank
        self._nvtx = nvtx_enabled()

    def _start(self):
        from torch.profiler import ProfilerActivity, profile, schedule

        cfg = self.cfg
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.profiler = profile(
            activities=activities,
            schedule=schedule(
                skip_first=cfg.START_STEP, wait=cfg.WAIT, warmup=cfg.WARMUP, active=cfg.ACTIVE, repeat=cfg.REPEAT
            ),
            on_trace_ready=self._write,
            record_shapes=cfg.RECORD_SHAPES,
            profile_memory=cfg.PROFILE_MEMORY,
            with_stack=cfg.WITH_STACK,
        )
        with quiet_profiler():
            self.profiler.start()

    def _write(self, prof):
        """Chrome trace and summary table of one recorded cycle (written to a temp name, then moved)."""
        from scepter_like.utils.checkpoint import atomic_write_text

        os.makedirs(self.output_dir, exist_ok=True)
        stem = os.path.join(self.output_dir, f'trace-rank{self._rank}-step{self._last_step}')
        tmp = f'{stem}.tmp.json'
        prof.export_chrome_trace(tmp)
        os.replace(tmp, stem + '.json')
        summary = os.path.join(self.output_dir, f'summary-rank{self._rank}-step{self._last_step}.txt')
        atomic_write_text(summary, prof.key_averages().table(sort_by=self.cfg.SORT_BY, row_limit=self.cfg.ROW_LIMIT))
        self.files += [stem + '.json', summary]
        if self.logger is not None:
            self.logger.info(f'profiler: trace {stem}.json, summary {summary}')

    def before_all_iter(self, solver: SolverSurface):
        if self._nvtx and solver.mode == 'train':
            torch.cuda.nvtx.range_push(f'train epoch {solver.progress.epoch + 1}')

    def before_iter(self, solver: SolverSurface):
        if solver.mode != 'train':
            return
        if self._nvtx:
            if self._step_range_open:
                torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_push(f'step {solver.progress.total_iter + 1}')
            self._step_range_open = True
        if self._done:
            return
        self._last_step = solver.progress.total_iter
        if self.profiler is None:
            self._start()
        else:
            with quiet_profiler():  # a step may start or stop a recorded cycle
                self.profiler.step()
        self._steps += 1
        if self._steps > self.total_steps:
            self._stop()

    def after_all_iter(self, solver: SolverSurface):
        if self._nvtx and solver.mode == 'train':
            if self._step_range_open:
                torch.cuda.nvtx.range_pop()
                self._step_range_open = False
            torch.cuda.nvtx.range_pop()

    def _stop(self):
        self._done = True
        if self.profiler is not None:
            with quiet_profiler():
                self.profiler.stop()
            self.profiler = None

    def after_solve(self, solver: SolverSurface):
        self._stop()
