"""StepClockHook: common.StepClock inside a ``tools/run_train.py`` process (loaded through IMPORTS).

Ticks after every other after_iter hook (taking turns with the other side's process when the benchmark
says so: ``common.side_clock``); writes the clock's result to OUTPUT at the end.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import side_clock  # noqa: E402

from scepter_like.solver.hooks.hook import Hook  # noqa: E402
from scepter_like.solver.hooks.registry import HOOKS  # noqa: E402


@HOOKS.register_class()
class StepClockHook(Hook):
    para_dict = {
        'PRIORITY': {'value': 100000, 'description': 'last of all after_iter hooks'},
        'OUTPUT': {'value': '', 'description': 'JSON file for the timings'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.output, self.clock = cfg.OUTPUT, side_clock()

    def after_iter(self, solver):
        self.clock.tick()

    def after_solve(self, solver):
        with open(self.output, 'w') as f:
            json.dump(self.clock.result(), f)
