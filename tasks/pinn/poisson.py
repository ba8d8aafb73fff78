"""The Poisson problem on the unit square with a known solution.

    laplace(u) = -2 (k pi)^2 sin(k pi x) sin(k pi y)   in (0, 1)^2
    u = 0                                              on the boundary (a Dirichlet condition in the config)

The exact solution is ``u = sin(k pi x) sin(k pi y)``; ``K`` is a config key (default 1).
"""

import math

import torch

from scepter_like.model.pinn import PhysicsInformedModel
from scepter_like.model.registry import MODELS


@MODELS.register_class()
class PoissonPINN(PhysicsInformedModel):
    para_dict = {
        'NETWORK': {
            'value': {
                'NAME': 'MLP',
                'IN_DIM': 2,
                'HIDDEN_DIMS': [64, 64, 64, 64],
                'OUT_DIM': 1,
                'ACTIVATION': 'tanh',
                'INIT': 'glorot_normal',
            },
            'description': 'a MODELS config mapping (x, y) [N, 2] to u [N, 1]',
        },
        'K': {'value': 1, 'description': 'wave number k of the solution sin(k pi x) sin(k pi y)'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.k_pi = cfg.K * math.pi

    def exact_solution(self, x):
        return torch.sin(self.k_pi * x[:, 0:1]) * torch.sin(self.k_pi * x[:, 1:2])

    def pde_residual(self, x, u, d):
        return d.laplacian() + 2 * self.k_pi**2 * self.exact_solution(x)
