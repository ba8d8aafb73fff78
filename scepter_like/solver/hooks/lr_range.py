"""LrRangeHook: the learning-rate sweep of an LR range test (``scepter_like.lr_finder``).

Before each optimizer step it sets the learning rate of step ``k`` of ``NUM_STEPS`` on a
log scale from MIN_LR to MAX_LR (every parameter group keeps its ratio to the first), and
after it records the step's loss.  It asks the run to stop once the smoothed loss exceeds
DIVERGE times its lowest value: larger rates only blow up.
"""

import math

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.hook import PRIORITY_LR, Hook
from scepter_like.solver.hooks.registry import HOOKS


@HOOKS.register_class()
class LrRangeHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_LR, 'description': 'after BackwardHook'},
        'MIN_LR': {'value': 1e-7, 'description': 'learning rate of the first step', 'above': 0.0},
        'MAX_LR': {'value': 10.0, 'description': 'learning rate of the last step', 'above': 0.0},
        'NUM_STEPS': {'value': 100, 'description': 'optimizer steps of the sweep', 'min': 2},
        'SMOOTHING': {'value': 0.05, 'description': 'weight of the newest loss in the running mean', 'above': 0.0},
        'DIVERGE': {
            'value': 4.0,
            'description': 'stop once the smoothed loss exceeds this times its lowest',
            'above': 1.0,
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        if cfg.MAX_LR <= cfg.MIN_LR:
            raise ConfigError(f'{cfg.path_of("MAX_LR")}: must be above MIN_LR ({cfg.MIN_LR}), got {cfg.MAX_LR}')
        self.min_lr, self.max_lr, self.num_steps = cfg.MIN_LR, cfg.MAX_LR, cfg.NUM_STEPS
        self.smoothing, self.diverge = cfg.SMOOTHING, cfg.DIVERGE
        self.lrs, self.losses, self.smoothed = [], [], []
        self._ratios = None
        self._mean = 0.0

    def lr_at(self, k):
        return self.min_lr * (self.max_lr / self.min_lr) ** (k / (self.num_steps - 1))

    def before_solve(self, solver):
        if solver.optimizer is None:
            raise ConfigError('LrRangeHook needs SOLVER.OPTIMIZER; add an optimizer config')
        groups = solver.optimizer.param_groups
        self._ratios = [group['lr'] / groups[0]['lr'] if groups[0]['lr'] else 1.0 for group in groups]

    def before_iter(self, solver):
        lr = self.lr_at(min(solver.optimizer_steps, self.num_steps - 1))
        for group, ratio in zip(solver.optimizer.param_groups, self._ratios):
            group['lr'] = lr * ratio

    def after_iter(self, solver):
        loss = solver.step.outputs.get('loss')
        if not solver.step.steps_optimizer or loss is None:
            return
        value = float(loss)
        self.lrs.append(solver.optimizer.param_groups[0]['lr'])
        self.losses.append(value)
        self._mean = (1 - self.smoothing) * self._mean + self.smoothing * value
        smoothed = self._mean / (1 - (1 - self.smoothing) ** len(self.losses))  # bias-corrected
        self.smoothed.append(smoothed)
        lowest = min(self.smoothed)
        if not math.isfinite(smoothed) or (len(self.smoothed) > 1 and smoothed > self.diverge * lowest):
            solver.request_stop(f'the loss diverged at learning rate {self.lrs[-1]:.3g} (smoothed {smoothed:.4g})')
