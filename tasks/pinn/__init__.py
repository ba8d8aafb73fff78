"""Physics-informed tasks: Poisson on the unit square, 1-D Burgers, the inverse heat problem."""

from tasks.pinn import burgers, heat, poisson  # noqa: F401  (registers their models and datasets)
