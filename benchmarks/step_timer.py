"""StepTimerHook: the benchmark's stopwatch inside the solver (imported through IMPORTS).

Runs last in ``after_iter`` and times the span between the end of the first and the end
of the last train step, exactly as ``hand_loop.py`` does (wall clock and process CPU time),
and the median of the single step durations (robust to bursts of outside load); writes
them to OUTPUT at the end.
"""

import json
import statistics
import time

from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS


@HOOKS.register_class()
class StepTimerHook(Hook):
    para_dict = {
        'PRIORITY': {'value': 100000, 'description': 'last of all after_iter hooks'},
        'OUTPUT': {'value': '', 'description': 'JSON file for the timings'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.output = cfg.OUTPUT
        self.done, self.first, self.last, self.first_wall = 0, 0.0, 0.0, 0.0
        self.first_cpu = self.last_cpu = 0.0
        self.durations = []

    def after_iter(self, solver):
        now, cpu = time.perf_counter(), time.process_time()
        self.done += 1
        if self.done == 1:
            self.first, self.first_cpu, self.first_wall = now, cpu, time.time()
        else:
            self.durations.append(now - self.last)
        self.last, self.last_cpu = now, cpu

    def after_solve(self, solver):
        result = {
            'steps': self.done,
            'span_s': self.last - self.first,
            'cpu_s': self.last_cpu - self.first_cpu,
            'first_step_wall': self.first_wall,
        }
        result['us_per_step'] = result['span_s'] / max(self.done - 1, 1) * 1e6
        result['cpu_us_per_step'] = result['cpu_s'] / max(self.done - 1, 1) * 1e6
        result['median_step_us'] = statistics.median(self.durations) * 1e6 if self.durations else 0.0
        with open(self.output, 'w') as f:
            json.dump(result, f)
