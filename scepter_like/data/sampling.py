"""Points in the unit cube [0, 1)^d, the raw material every collocation point is drawn from.

``unit_points(method, n, dim, rng)`` gives ``n`` points ``[n, dim]`` (float64) by

- ``uniform``: independent uniform draws (``rng.random``);
- ``hammersley``: the Hammersley set (DeepXDE's default): point i = 1..n is
  ((i - 1/2) / n, phi_2(i), phi_3(i), ...), phi_b the radical inverse in the b-th prime;
  deterministic, so ``rng`` only shifts it (modulo 1) when ``shift`` is asked (a resample);
- ``sobol``: scrambled Sobol' points, ``latin_hypercube``: Latin hypercube samples, both from
  scipy's ``scipy.stats.qmc`` (imported only then), seeded from ``rng``.

Every method is a pure function of ``rng``'s state, so a draw is reproducible from its seed.
"""

import warnings

import numpy as np

METHODS = ('uniform', 'hammersley', 'sobol', 'latin_hypercube')
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


def radical_inverse(i, base):
    """phi_base(i) for an integer array ``i``: the base-``base`` digits of i mirrored behind the point."""
    i = np.asarray(i, dtype=np.int64).copy()
    out = np.zeros(i.shape, dtype=np.float64)
    scale = 1.0 / base
    while np.any(i > 0):
        out += scale * (i % base)
        i //= base
        scale /= base
    return out


def hammersley(n, dim):
    """The ``n``-point Hammersley set in ``dim`` dimensions, no point on the cube's faces."""
    if dim > len(_PRIMES) + 1:
        raise ValueError(f'hammersley sampling goes up to {len(_PRIMES) + 1} dimensions, got {dim}')
    i = np.arange(1, n + 1)
    columns = [(i - 0.5) / n] + [radical_inverse(i, _PRIMES[k]) for k in range(dim - 1)]
    return np.stack(columns, axis=1)


def _scipy_qmc(method, n, dim, rng):
    from scipy.stats import qmc

    seed = int(rng.integers(2**63))
    if method == 'latin_hypercube':
        return qmc.LatinHypercube(d=dim, rng=seed).random(n)
    with warnings.catch_warnings():  # any n is fine here; powers of two only balance the sequence best
        warnings.filterwarnings('ignore', message='.*balance properties of Sobol', category=UserWarning)
        return qmc.Sobol(d=dim, scramble=True, rng=seed).random(n)


def unit_points(method, n, dim, rng, shift=False):
    """``[n, dim]`` points of ``method`` in [0, 1)^dim; ``shift``: a deterministic set moved by a random offset."""
    if method == 'uniform':
        return rng.random((n, dim))
    if method == 'hammersley':
        points = hammersley(n, dim)
        points = (points + rng.random(dim)) % 1.0 if shift else points
        # rows in a random order: the set sorts its first coordinate, so the first k rows (what rejection
        # sampling keeps from a larger draw) would cover only the low end of it
        return points[rng.permutation(n)]
    if method in ('sobol', 'latin_hypercube'):
        return _scipy_qmc(method, n, dim, rng)
    raise ValueError(f'unknown sampling method {method!r}; one of {METHODS}')
