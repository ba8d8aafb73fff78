"""The viscous Burgers equation in 1-D (DeepXDE's Burgers example), with its exact solution.

    u_t + u u_x = nu u_xx   on [-1, 1] x [0, 1],   u(x, 0) = -sin(pi x),   u(-1, t) = u(1, t) = 0,

nu = 0.01 / pi.  The conditions are in ``configs/pinn/burgers1d.yaml``; the model states the
PDE.  ``BurgersReference`` is the evaluation grid with the exact solution by the Cole-Hopf
transform (``cole_hopf``): u = -2 nu phi_x / phi with phi solving the heat equation, so

    u(x, t) = - int sin(pi (x - y)) f(x - y) g(y) dy / int f(x - y) g(y) dy,
    f(y) = exp(-cos(pi y) / (2 pi nu)),   g(y) = exp(-y^2 / (4 nu t)),

integrated with the trapezoid rule in z = y / sqrt(4 nu t) (the integrand is smooth and
decays like exp(-z^2), so the rule converges exponentially), in log space against overflow.
"""

import math

import numpy as np
import torch

from scepter_like.data.point_sets import GridPoints
from scepter_like.data.registry import DATASETS
from scepter_like.model.pinn import PhysicsInformedModel
from scepter_like.model.registry import MODELS

NU = 0.01 / math.pi
Z = np.linspace(-14.0, 14.0, 701)  # quadrature nodes: exp(-z^2) < 1e-85 beyond; spacing 0.04


def cole_hopf(x, t, nu=NU, chunk=4096):
    """The exact Burgers solution at points ``x``, ``t`` (broadcast together), float64."""
    x, t = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(t, np.float64))
    flat_x, flat_t = x.reshape(-1), t.reshape(-1)
    out = -np.sin(np.pi * flat_x)  # t = 0: the initial condition
    later = np.flatnonzero(flat_t > 0)
    for begin in range(0, len(later), chunk):
        rows = later[begin : begin + chunk]
        y = flat_x[rows, None] - np.sqrt(4 * nu * flat_t[rows, None]) * Z  # x - y at each node
        log_w = -np.cos(np.pi * y) / (2 * np.pi * nu) - Z**2
        w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        out[rows] = -(np.sin(np.pi * y) * w).sum(axis=1) / w.sum(axis=1)
    return out.reshape(x.shape)


@MODELS.register_class()
class BurgersPINN(PhysicsInformedModel):
    para_dict = {'NU': {'value': NU, 'description': 'viscosity nu'}}

    def pde_residual(self, x, u, d):
        return d('t') + u * d('x') - self.cfg.NU * d('x', 'x')


@DATASETS.register_class()
class BurgersReference(GridPoints):
    """GridPoints over (x, t) with ``u_exact``, the Cole-Hopf solution (read through SOLVER.EXTRA_KEYS)."""

    para_dict = {'NU': {'value': NU, 'description': 'viscosity nu of the solution'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        points = self.arrays['x'].double().numpy()
        exact = cole_hopf(points[:, 0], points[:, 1], cfg.NU)
        self.arrays['u_exact'] = torch.from_numpy(exact[:, None]).to(self.arrays['x'].dtype)
