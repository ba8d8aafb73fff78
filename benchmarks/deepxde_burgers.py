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


def main(argv=None):
    """A whole DeepXDE run as its users start one: train, then the relative L2 error on the 201 x 101 grid (JSON)."""
    import argparse
    import json
    import sys
    import time

    start = time.perf_counter()
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=5000)
    parser.add_argument('--seed', type=int, default=2024)
    args = parser.parse_args(argv)
    import numpy as np
    import torch

    torch.set_num_threads(1)
    model = build(args.seed)
    model.train(iterations=args.steps, display_every=1000)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tasks.pinn.burgers import cole_hopf  # the same reference as the toolkit's evaluation

    x, t = np.meshgrid(np.linspace(-1, 1, 201), np.linspace(0, 1, 101), indexing='ij')
    points = np.stack([x.ravel(), t.ravel()], axis=1)
    reference = cole_hopf(points[:, 0], points[:, 1])
    predicted = model.predict(points.astype(np.float32))[:, 0].astype(np.float64)
    error = float(np.linalg.norm(predicted - reference) / np.linalg.norm(reference))
    print(json.dumps({'relative_l2': error, 'seconds': time.perf_counter() - start}))


if __name__ == '__main__':
    main()
