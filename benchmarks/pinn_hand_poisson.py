#!/usr/bin/env python
"""The Poisson PINN of ``configs/pinn/poisson2d.yaml`` written by hand, the way a PyTorch user writes it.

laplace(u) = -2 pi^2 sin(pi x) sin(pi y) on the unit square, u = 0 on its boundary; 2,000
interior and 400 boundary points, 2 -> 4x64 tanh -> 1 (Glorot normal), Adam (lr 1e-3) for
2,000 steps, then L-BFGS with DeepXDE's defaults: one ``step(closure)`` call of 1,000
iterations (max_eval 1,250, history 100, tolerance_grad 1e-8, tolerance_change 0, no line
search); the loss printed every 100 Adam steps; the relative L2 error on a 101x101 grid at
the end.  Plain PyTorch: nothing of the toolkit.  Prints one JSON line:
``{"relative_l2": ..., "seconds": ...}``.

    python benchmarks/pinn_hand_poisson.py [--adam-steps 2000] [--lbfgs-iterations 1000] [--seed 2024]
"""

import argparse
import json
import math
import time

import torch

start = time.perf_counter()
parser = argparse.ArgumentParser()
parser.add_argument('--adam-steps', type=int, default=2000)
parser.add_argument('--lbfgs-iterations', type=int, default=1000)
parser.add_argument('--seed', type=int, default=2024)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(args.seed)


def exact(x):
    return torch.sin(math.pi * x[:, 0:1]) * torch.sin(math.pi * x[:, 1:2])


x_in = torch.rand(2000, 2).requires_grad_(True)
side, s = torch.randint(0, 4, (400,)), torch.rand(400)
x_bc = torch.stack([torch.where(side < 2, side.float(), s), torch.where(side < 2, s, side.float() - 2)], dim=1)
f = -2 * math.pi**2 * exact(x_in.detach())

layers, width = [], 2
for _ in range(4):
    layers += [torch.nn.Linear(width, 64), torch.nn.Tanh()]
    width = 64
net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
for layer in net:
    if isinstance(layer, torch.nn.Linear):
        torch.nn.init.xavier_normal_(layer.weight)
        torch.nn.init.zeros_(layer.bias)


def loss_fn():
    u = net(x_in)
    (du,) = torch.autograd.grad(u.sum(), x_in, create_graph=True)
    u_xx = torch.autograd.grad(du[:, 0].sum(), x_in, create_graph=True)[0][:, 0:1]
    u_yy = torch.autograd.grad(du[:, 1].sum(), x_in, create_graph=True)[0][:, 1:2]
    return ((u_xx + u_yy - f) ** 2).mean() + (net(x_bc) ** 2).mean()


adam = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(1, args.adam_steps + 1):
    adam.zero_grad()
    loss = loss_fn()
    loss.backward()
    adam.step()
    if step % 100 == 0:
        print(f'step {step} loss {loss.item():.4g}', flush=True)

lbfgs = torch.optim.LBFGS(
    net.parameters(),
    lr=1,
    max_iter=args.lbfgs_iterations,
    max_eval=args.lbfgs_iterations * 5 // 4,
    tolerance_grad=1e-8,
    tolerance_change=0,
    history_size=100,
    line_search_fn=None,
)


def closure():
    lbfgs.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss


lbfgs.step(closure)

grid = torch.linspace(0, 1, 101)
points = torch.stack(torch.meshgrid(grid, grid, indexing='ij'), dim=-1).reshape(-1, 2)
with torch.no_grad():
    u, ref = net(points).double(), exact(points).double()
relative_l2 = ((u - ref).norm() / ref.norm()).item()
print(json.dumps({'relative_l2': relative_l2, 'seconds': time.perf_counter() - start}))
