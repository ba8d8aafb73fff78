"""Physics-informed tasks: the Poisson problem on the unit square."""

from tasks.pinn import poisson  # noqa: F401  (registers PoissonPINN)
