"""Calling a model with a batch: ``model(**batch)`` as the loops and tools do, with its errors named.

A batch that does not fit the model's ``forward`` (a missing or unexpected input, sizes
that do not fit) is the data's or the config's mistake, reported as one ``DataError``
line; the reasons are worked out only after the error, so a step pays nothing for them.
"""

import inspect

from scepter_like.errors import DataError


def _signature_mismatch(model, batch):
    """Why ``model.forward`` cannot take ``batch`` as keywords (missing / unexpected names), or None."""
    forward = getattr(model, 'module', model).forward  # DDP wraps the module
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = {p.kind for p in params}
    missing = [
        p.name
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in batch
    ]
    if missing:
        return f'the model needs input(s) {missing}, which the inputs lack; they have {sorted(batch)}'
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        unexpected = sorted(set(batch) - {p.name for p in params})
        if unexpected:
            return f"the model's forward takes no {unexpected}; give it **kwargs or drop those keys from the data"
    return None


def forward_checked(model, batch, trained=False):
    """``model(**batch)`` as a dict (``trained``: inference, where the inputs are what must change).

    A model whose ``forward`` cannot take the batch's keys (a TypeError: a missing or an
    unexpected argument) gets a DataError naming them, and one whose sizes or dtypes do not
    fit the batch (torch's shape and dtype errors) a DataError naming the model, the batch's
    shapes or dtypes and the keys to change; all are worked out only after the error, so the
    step pays nothing for them.  Any other exception (a KeyError of the model's own code too)
    is the model's and keeps its traceback.
    """
    if not isinstance(batch, dict):
        raise DataError(
            f'a batch must be a dict of named fields (model(**batch)); the dataset gave {type(batch).__name__}:'
            ' make its __getitem__ return a dict'
        )
    try:
        out = model(**batch)
    except TypeError:
        why = _signature_mismatch(model, batch)
        if why is not None:
            raise DataError(why) from None
        raise
    except (RuntimeError, IndexError, ValueError) as e:  # torch's word for sizes or dtypes that do not fit the data
        from scepter_like.model import dtype_mismatch, size_mismatch

        why = size_mismatch.explain(model, batch, e, trained) or dtype_mismatch.explain(model, batch, e, trained)
        if why is not None:
            raise DataError(why) from e  # --debug shows where in the model
        raise
    if not isinstance(out, dict):
        raise DataError(f'the model must return a dict, got {type(out).__name__}')
    return out
