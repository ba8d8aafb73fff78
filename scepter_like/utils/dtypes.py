"""The floating dtypes a run may train in (``SOLVER.DTYPE``) and building under one."""

import contextlib

import torch

DTYPES = {'float32': torch.float32, 'float64': torch.float64}  # SOLVER.DTYPE


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype set to ``dtype`` inside, restored after (what SOLVER.DTYPE builds under)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
