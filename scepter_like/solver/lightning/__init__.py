"""``ENV.USE_PL: true``: the configured solver, its hooks and its update run on PyTorch Lightning's Trainer.

- ``library.py``: importing Lightning itself (or one error line naming the extra)
- ``settings.py``: the ``ENV.PL`` keys and the Trainer arguments they make (imports no Lightning)
- ``cluster.py``: the process group the native loop's own join made under torchrun / srun, told to Lightning
- ``module.py``: ``SolverModule``, the LightningModule whose steps and hooks are the solver's
- ``backend.py``: ``LightningBackend``: builds the Trainer, joins (or starts) the processes, runs fit / test

Nothing imports Lightning until a run with ``ENV.USE_PL: true`` asks for it (``lightning_backend``).
docs/lightning.md says when to use which loop and what each key maps to.
"""

from scepter_like.solver.lightning.library import import_lightning


def lightning_backend(solver):
    """The LightningBackend that runs ``solver``'s loop (a ConfigError when Lightning is missing)."""
    import_lightning()
    from scepter_like.solver.lightning.backend import LightningBackend

    return LightningBackend(solver)
