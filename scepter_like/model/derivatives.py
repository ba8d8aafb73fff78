"""Derivatives of a network's outputs with respect to its inputs, for PDE residual losses.

Every function differentiates with ``torch.autograd.grad(..., create_graph=True)``, so
the result is itself differentiable: a loss built from it trains the network's
parameters (its backward differentiates through the derivative).  ``x`` must require
gradients before the network sees it (``x.requires_grad_()``), and ``u`` must be
computed from ``x`` point by point (row ``i`` of ``u`` depends only on row ``i`` of
``x``, as in an MLP without batch norm): the derivatives of the summed output are then
the per-point derivatives.

``u`` is ``[N]`` or ``[N, 1]`` (one scalar field); ``x`` is ``[N, d]``.

>>> x = torch.rand(8, 2, requires_grad=True)
>>> u = net(x)                       # [8, 1]
>>> gradient(u, x)                   # [8, 2]: du/dx_0, du/dx_1
>>> laplacian(u, x)                  # [8]: d2u/dx_0^2 + d2u/dx_1^2
>>> partial(u, x, 0, 0, 1)           # [8]: d3u / dx_0^2 dx_1
"""

import torch


def _scalar_field(u, x):
    if u.dim() == 2 and u.shape[1] == 1:
        u = u[:, 0]
    if u.dim() != 1 or u.shape[0] != x.shape[0]:
        raise ValueError(f'u must be [N] or [N, 1] for x of shape {tuple(x.shape)}, got {tuple(u.shape)}')
    return u


def gradient(u, x):
    """``[N, d]``: the gradient of the scalar field ``u`` at each point of ``x``."""
    (grad,) = torch.autograd.grad(_scalar_field(u, x).sum(), x, create_graph=True)
    return grad


def partial(u, x, *dims):
    """``[N]``: the partial derivative of ``u`` along the input coordinates ``dims`` in order.

    ``partial(u, x, 0)`` is du/dx_0; ``partial(u, x, 1, 1)`` is d2u/dx_1^2; no dims gives ``u``.
    """
    out = _scalar_field(u, x)
    for dim in dims:
        out = gradient(out, x)[:, dim]
    return out


def laplacian(u, x):
    """``[N]``: the sum of the second derivatives of ``u`` along every coordinate of ``x``."""
    grad = gradient(u, x)
    return sum(torch.autograd.grad(grad[:, i].sum(), x, create_graph=True)[0][:, i] for i in range(x.shape[1]))
