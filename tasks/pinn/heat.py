"""An inverse problem: the diffusivity D of the heat equation, learned from 20 observations.

    u_t = D u_xx   on [0, 1] x [0, 1],   u(0, t) = u(1, t) = 0,   u(x, 0) = sin(pi x)

has the solution u = exp(-D pi^2 t) sin(pi x).  ``configs/pinn/heat_inverse.yaml`` starts D at
0.5 (``PARAMETERS: {D: 0.5}``) and fits it to ``configs/pinn/heat_observations.csv``: 20
values of the solution with D = 0.1, written by ``write_observations``.
"""

import math

import numpy as np
import torch

from scepter_like.model.pinn import PhysicsInformedModel
from scepter_like.model.registry import MODELS


def heat_solution(x, t, d):
    return np.exp(-d * math.pi**2 * t) * np.sin(math.pi * x)


@MODELS.register_class()
class HeatPINN(PhysicsInformedModel):
    para_dict = {'TRUE_D': {'value': 0.1, 'description': 'D of the reference solution (evaluation only)'}}

    def pde_residual(self, x, u, d):
        return d('t') - self.D * d('x', 'x')

    def exact_solution(self, x):
        return torch.exp(-self.cfg.TRUE_D * math.pi**2 * x[:, 1:2]) * torch.sin(math.pi * x[:, 0:1])


def write_observations(path, count=20, d=0.1, seed=0):
    """``count`` rows ``x, t, u`` of the solution with diffusivity ``d`` at points uniform in (0, 1) x (0, 1]."""
    rng = np.random.default_rng(seed)
    x, t = rng.uniform(0.0, 1.0, count), 1.0 - rng.uniform(0.0, 1.0, count)
    rows = [f'{a!r},{b!r},{float(heat_solution(a, b, d))!r}' for a, b in zip(x.tolist(), t.tolist())]
    with open(path, 'w', encoding='utf-8') as f:
        f.write('x,t,u\n' + '\n'.join(rows) + '\n')
