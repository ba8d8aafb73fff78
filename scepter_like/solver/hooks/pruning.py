"""PruningHook: report each evaluation to a search trial; stop the run when the search prunes it.

``tools/run_search.py`` lists it in EVAL_HOOKS of every trial and attaches the trial
(anything with optuna's ``report(value, step)`` and ``should_prune()``). After each
evaluation it reports ``epoch_outputs['eval'][METRIC]`` at step = train epochs completed
and, when the trial should be pruned, raises :class:`RunPruned`, which the search's trial
runner turns into a pruned trial. Without an attached trial (a trial's ``config.yaml`` run
again) it only records the values. It reads solver state and changes none.
"""

from scepter_like.errors import RunPruned
from scepter_like.solver.hooks.hook import PRIORITY_NORMAL, Hook, SolverSurface, check_eval_metric, eval_metric
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.distributed import broadcast_object


@HOOKS.register_class()
class PruningHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'order among eval hooks'},
        'METRIC': {'value': 'accuracy', 'description': 'eval metric reported to the search trial'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.metric = cfg.METRIC
        self.trial = None
        self.values = {}  # step (train epochs completed) -> reported value

    def attach(self, trial):
        """Report to ``trial`` (rank 0 only; other ranks follow its decision)."""
        self.trial = trial

    def before_solve(self, solver: SolverSurface):
        check_eval_metric(self, solver, 'METRIC', 'reports evaluations')

    def after_all_iter(self, solver: SolverSurface):
        value = eval_metric(solver, self.metric, self.cfg.path_of('METRIC'))
        if value is None:  # no evaluation results (an eval pass without METRICS)
            return
        step = solver.progress.epoch + 1
        self.values[step] = value
        prune = False
        if self.trial is not None and solver.is_main:
            self.trial.report(value, step)
            prune = self.trial.should_prune()
        if broadcast_object(prune):
            raise RunPruned(f'pruned after epoch {step}: {self.metric} {value:.6g}')
