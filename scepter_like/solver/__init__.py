"""Solvers and the registries they build from.

Importing ``scepter_like.solver`` registers every built-in solver, hook, model, dataset,
metric, optimizer and scheduler, and imports none of the heavy optional packages
(tensorboard, fvcore, safetensors, sklearn, matplotlib): hooks that need them import
them when they are built.
"""

import scepter_like.data  # noqa: F401  (registrations)
import scepter_like.metric  # noqa: F401
import scepter_like.model  # noqa: F401
import scepter_like.opt  # noqa: F401
import scepter_like.solver.hooks  # noqa: F401
from scepter_like.solver.base_solver import BaseSolver
from scepter_like.solver.registry import SOLVERS
from scepter_like.solver.train_val_solver import TrainValSolver

__all__ = ['SOLVERS', 'BaseSolver', 'TrainValSolver']
