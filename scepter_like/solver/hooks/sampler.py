"""DistSamplerHook: kept for scepter configs; the solver itself reshuffles each pass (``sampler.set_epoch``)."""

from scepter_like.solver.hooks.hook import PRIORITY_SAMPLER, Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS


@HOOKS.register_class()
class DistSamplerHook(Hook):
    """Calls ``sampler.set_epoch(pass)`` in ``before_epoch``, as the solver does after that stage: harmless."""

    para_dict = {'PRIORITY': {'value': PRIORITY_SAMPLER, 'description': 'runs last in before_epoch'}}

    def before_epoch(self, solver: SolverSurface):
        bundle = solver.datas.get(solver.mode)
        if bundle is not None:
            bundle.sampler.set_epoch(solver.progress.pass_index)
