"""EarlyStoppingHook: stop training when an eval metric stops improving.

List it in EVAL_HOOKS: after each evaluation it compares the monitored metric with the
best so far; after PATIENCE evaluations without an improvement of more than MIN_DELTA
it asks the solver to stop (the test data still runs).  Metrics are reduced over all
ranks, and the decision is broadcast from rank 0, so every rank stops together.
"""

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.hook import (
    PRIORITY_NORMAL,
    Hook,
    SolverSurface,
    check_eval_metric,
    eval_metric,
    greater_is_better,
)
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.distributed import broadcast_object


@HOOKS.register_class()
class EarlyStoppingHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'order among eval hooks'},
        'MONITOR': {'value': 'accuracy', 'description': 'eval metric to watch'},
        'MODE': {
            'value': 'auto',
            'description': 'max: greater | min: less is better | auto: as the metric says (min for MSE and errors)',
            'choices': ['auto', 'max', 'min'],
        },
        'PATIENCE': {'value': 3, 'description': 'evaluations without improvement before stopping', 'min': 1},
        'MIN_DELTA': {'value': 0.0, 'description': 'smallest change that counts as an improvement'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.monitor = cfg.MONITOR
        self.greater = None if cfg.MODE == 'auto' else cfg.MODE == 'max'  # auto: settled in before_solve
        self.patience = cfg.PATIENCE
        self.min_delta = abs(cfg.MIN_DELTA)
        self.best = None
        self.bad_evals = 0
        self.stopped_epoch = None

    def before_solve(self, solver: SolverSurface):
        check_eval_metric(self, solver, 'MONITOR', 'watches evaluations')
        if self.cfg.MODE == 'auto':
            self.greater = greater_is_better(solver, self.monitor)
        elif self.greater and not greater_is_better(solver, self.monitor):  # it would stop while the metric improves
            raise ConfigError(
                f'{self.cfg.path_of("MODE")}: max waits for {self.monitor} to rise, and its metric says less'
                f' {self.monitor} is better; set MODE: min (or auto)'
            )

    def after_epoch(self, solver: SolverSurface):
        value = eval_metric(solver, self.monitor, self.cfg.path_of('MONITOR'))
        if value is None or solver.progress.epoch_cut:  # (training stops there; a resumed run evaluates the epoch)
            return
        improved = self.best is None or (
            value > self.best + self.min_delta if self.greater else value < self.best - self.min_delta
        )
        if improved:
            self.best, self.bad_evals = value, 0
        else:
            self.bad_evals += 1
        stop = broadcast_object(self.bad_evals >= self.patience)
        if stop:
            self.stopped_epoch = solver.progress.epoch
            reason = (
                f'early stopping after epoch {solver.progress.epoch + 1}: {self.monitor} has not improved on'
                f' {self.best:.6g}'
                f' for {self.bad_evals} evaluation(s)'
            )
            solver.request_stop(reason)  # logged there, with this hook's name

    def after_load_checkpoint(self, solver: SolverSurface, checkpoint):
        if self.stopped_epoch is not None:  # the run this checkpoint came from had stopped early
            solver.request_stop(f'the run stopped early at epoch {self.stopped_epoch + 1}')

    def state_dict(self):
        return {'best': self.best, 'bad_evals': self.bad_evals, 'stopped_epoch': self.stopped_epoch}

    def load_state_dict(self, state):
        self.best = state['best']
        self.bad_evals = state['bad_evals']
        self.stopped_epoch = state['stopped_epoch']
