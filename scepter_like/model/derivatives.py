"""Derivatives of a network's outputs with respect to its inputs, for PDE residual losses.

``Derivatives(u, x, names)`` answers every derivative a residual asks for and computes each
gradient once: the first time ``d('x')`` or ``d('t')`` is asked, the whole gradient of u
is taken (one ``autograd.grad``) and kept; ``d('x', 'x')`` then differentiates the column
du/dx once more, and ``d('x', 't')`` reuses that second gradient.  A residual written the
natural way therefore costs what DeepXDE's cached ``jacobian`` / ``hessian`` cost.
PhysicsInformedModel makes one per point set and forward and hands it to ``pde_residual``::

    def pde_residual(self, x, u, d):
        return d('t') + u * d('x') - self.nu * d('x', 'x')      # Burgers

Coordinates are named by the domain (``x``, ``y``, ``z``, then ``t``) or given by index;
mixed derivatives are taken in a fixed order (``d('t', 'x')`` is ``d('x', 't')``).  Results
are columns ``[N, 1]`` like ``u[:, k:k+1]`` (so ``u * d('x')`` is pointwise); ``component``
picks an output of a network with several.

Every gradient uses ``create_graph=True``, so a loss built from them trains the parameters
through the derivatives.  ``x`` must require gradients before the network sees it, and row
``i`` of ``u`` must depend on row ``i`` of ``x`` only (an MLP, not batch norm): the gradient
of the summed output is then the per-point gradient.

The functions ``gradient``, ``partial`` and ``laplacian`` are one-off forms of the same for a
single scalar field ``u`` (``[N]`` or ``[N, 1]``), returning ``[N, d]`` / ``[N]``.
"""

import torch

from scepter_like.errors import ModelError

TIME = 't'


class Derivatives:
    """The derivatives of ``u`` ``[N, k]`` (or ``[N]``) with respect to ``x`` ``[N, d]``, each computed once."""

    def __init__(self, u, x, names=None):
        if u.dim() == 1:
            u = u.unsqueeze(1)
        if u.dim() != 2 or u.shape[0] != x.shape[0]:
            raise ValueError(f'u must be [N] or [N, k] for x of shape {tuple(x.shape)}, got {tuple(u.shape)}')
        self.u, self.x = u, x
        self.names = list(names) if names is not None else None
        self._gradients = {}  # (component, orders) -> [N, d]: the gradient of that derivative of u

    def _axis(self, coordinate):
        if isinstance(coordinate, str):
            if self.names is None or coordinate not in self.names:
                hint = ' (a time-dependent problem gives its data TIME: [t0, t1])' if coordinate == TIME else ''
                raise ModelError(f'no coordinate {coordinate!r}: the coordinates are {self.names or "unnamed"}{hint}')
            return self.names.index(coordinate)
        if not 0 <= coordinate < self.x.shape[1]:
            raise ModelError(f'coordinate {coordinate} is out of range for x of shape {tuple(self.x.shape)}')
        return coordinate

    def __call__(self, *coordinates, component=0):
        """``[N, 1]``: the derivative of output ``component`` along ``coordinates`` (none: the output itself)."""
        if not 0 <= component < self.u.shape[1]:
            raise ModelError(
                f'component {component} is out of range: the network gives {self.u.shape[1]} output(s), counted'
                ' from 0 (NETWORK.OUT_DIM)'
            )
        axes = tuple(sorted(self._axis(c) for c in coordinates))
        if not axes:
            return self.u[:, component : component + 1]
        last = axes[-1]
        return self._gradient(component, axes[:-1])[:, last : last + 1]

    def _gradient(self, component, axes):
        key = (component, axes)
        grad = self._gradients.get(key)
        if grad is None:
            f = self(*axes, component=component)
            if not f.requires_grad:  # a derivative that no longer depends on x
                grad = torch.zeros_like(self.x)
            else:
                if not self.x.requires_grad:
                    raise ValueError('x must require gradients before the network sees it (x.requires_grad_())')
                (grad,) = torch.autograd.grad(
                    f, self.x, torch.ones_like(f), create_graph=True, allow_unused=True, materialize_grads=True
                )
            self._gradients[key] = grad
        return grad

    def gradient(self, component=0):
        """``[N, d]``: the gradient of output ``component`` along every coordinate."""
        return self._gradient(component, ())

    def laplacian(self, component=0):
        """``[N, 1]``: the sum of the second derivatives along the space coordinates (all but ``t``)."""
        axes = [i for i in range(self.x.shape[1]) if self.names is None or self.names[i] != TIME]
        return sum(self(i, i, component=component) for i in axes)


def gradient(u, x):
    """``[N, d]``: the gradient of the scalar field ``u`` at each point of ``x``."""
    return Derivatives(u, x).gradient()


def partial(u, x, *dims):
    """``[N]``: the partial derivative of ``u`` along the input coordinates ``dims``.

    ``partial(u, x, 0)`` is du/dx_0; ``partial(u, x, 1, 1)`` is d2u/dx_1^2; no dims gives ``u``.
    """
    return Derivatives(u, x)(*dims)[:, 0]


def laplacian(u, x):
    """``[N]``: the sum of the second derivatives of ``u`` along every coordinate of ``x``."""
    return Derivatives(u, x).laplacian()[:, 0]
