"""GradNormHook: the global L2 norm of the gradients, logged as ``grad_norm`` on every optimizer step (another
p-norm as ``grad_norm_l{p}``, ``grad_norm_linf``: GRADIENT_CLIP logs its own L2 norm as ``grad_norm``)."""

import math

import torch

from scepter_like.solver.hooks.hook import PRIORITY_NORMAL, Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.parallel import full_tensor


@HOOKS.register_class()
class GradNormHook(Hook):
    """Measures in ``after_backward``: all-reduced under DDP, unscaled under fp16, before clipping.

    The norm joins the step's outputs (``solver.log_scalar``), so LogHook and
    TensorboardLogHook show its mean over their interval.  No host sync: the value stays
    a tensor until a log line reads it.
    """

    para_dict = {
        'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'order among after_backward hooks'},
        'NORM_TYPE': {'value': 2.0, 'description': 'the p of the p-norm (inf: the largest magnitude)'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.norm_type = cfg.NORM_TYPE
        p = 'inf' if math.isinf(self.norm_type) else f'{self.norm_type:g}'
        self.key = 'grad_norm' if self.norm_type == 2 else f'grad_norm_l{p}'
        self._params = []

    def before_solve(self, solver: SolverSurface):
        self._params = [p for p in solver.unwrapped_model.parameters() if p.requires_grad]

    def after_backward(self, solver: SolverSurface):
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads, self.norm_type)
            solver.log_scalar(self.key, full_tensor(norm))
