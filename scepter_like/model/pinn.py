"""PhysicsInformedModel: a network and the equation it must satisfy, in one model.

A subclass states the problem in three methods of the input points ``x`` ``[N, d]`` and
the network's output ``u`` there:

- ``pde_residual(x, u)``: the equation's residual at interior points (use
  ``scepter_like.model.derivatives``; ``x`` requires gradients);
- ``boundary_residual(x, u)``: the boundary condition's residual at boundary points;
- ``exact_solution(x)`` (optional): the reference solution, for evaluation metrics.

In train mode ``forward(x=..., on_boundary=...)`` returns ``loss_pde`` and ``loss_bc``,
the mean squared residuals, 0 for a mini-batch without points of that kind (the solver
sums ``loss_*`` terms with LOSS_WEIGHTS); in eval and test mode it returns ``x``, the
prediction ``u`` and, when the subclass defines it, ``u_exact`` (what RelativeL2Error,
MaxAbsError and FieldPlotHook read).
"""

from scepter_like.data.collocation import BOUNDARY_KEY, COORD_KEY
from scepter_like.model.base import BaseModel
from scepter_like.model.registry import MODELS


class PhysicsInformedModel(BaseModel):
    para_dict = {
        'NETWORK': {
            'value': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [64, 64, 64, 64], 'OUT_DIM': 1, 'ACTIVATION': 'tanh'},
            'description': 'a MODELS config: the network mapping points [N, d] to the field [N, 1]',
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.network = MODELS.build(cfg.NETWORK, logger=logger)

    def pde_residual(self, x, u):
        raise NotImplementedError

    def boundary_residual(self, x, u):
        raise NotImplementedError

    def exact_solution(self, x):
        """The reference solution at ``x``, or None when there is none."""
        return None

    def forward(self, **batch):
        x = batch[COORD_KEY]
        if not self.training:
            u = self.network(x)
            out = {COORD_KEY: x, 'u': u}
            exact = self.exact_solution(x)
            if exact is not None:
                out['u_exact'] = exact.view_as(u)
            return out
        on_boundary = batch[BOUNDARY_KEY]
        interior = x[~on_boundary].detach().requires_grad_(True)
        boundary = x[on_boundary]
        pde = self.pde_residual(interior, self.network(interior))
        bc = self.boundary_residual(boundary, self.network(boundary))
        return {'loss_pde': _mean_square(pde), 'loss_bc': _mean_square(bc)}


def _mean_square(residual):
    """The mean of ``residual ** 2``; 0 for a mini-batch without points of that kind (not NaN)."""
    return residual.pow(2).sum() / max(residual.numel(), 1)
