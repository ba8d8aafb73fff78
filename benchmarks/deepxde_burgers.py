"""DeepXDE's own Burgers example (examples/pinn_forward/Burgers.py), as its users write it: the baseline.

The same problem, points (2,540 domain, 80 boundary, 160 initial; DeepXDE's default
Hammersley sampling), network (2 -> 3x20 tanh -> 1, Glorot normal) and Adam (lr 1e-3) as
``configs/pinn/burgers1d.yaml``, on t in [0, 1].  DeepXDE 1.15 with its pytorch backend is a
benchmark-only dependency (``pip install 'deepxde==1.15.*'``, DDE_BACKEND=pytorch); it is
imported only when ``build`` is called.
"""

import os


def build(seed):
    """The compiled DeepXDE model of the Burgers example; its network initialised from ``seed``."""
    os.environ.setdefault('DDE_BACKEND', 'pytorch')
    import deepxde as dde
    import numpy as np
    import torch

    def pde(x, y):
        dy_x = dde.grad.jacobian(y, x, i=0, j=0)
        dy_t = dde.grad.jacobian(y, x, i=0, j=1)
        dy_xx = dde.grad.hessian(y, x, i=0, j=0)
        return dy_t + y * dy_x - 0.01 / np.pi * dy_xx

    geom = dde.geometry.Interval(-1, 1)
    timedomain = dde.geometry.TimeDomain(0, 1)
    geomtime = dde.geometry.GeometryXTime(geom, timedomain)
    bc = dde.icbc.DirichletBC(geomtime, lambda x: 0, lambda _, on_boundary: on_boundary)
    ic = dde.icbc.IC(geomtime, lambda x: -np.sin(np.pi * x[:, 0:1]), lambda _, on_initial: on_initial)
    data = dde.data.TimePDE(geomtime, pde, [bc, ic], num_domain=2540, num_boundary=80, num_initial=160)
    torch.manual_seed(seed)
    net = dde.nn.FNN([2] + [20] * 3 + [1], 'tanh', 'Glorot normal')
    model = dde.Model(data, net)
    model.compile('adam', lr=1e-3)
    return model
