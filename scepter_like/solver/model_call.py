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


def forward_checked(model, batch):
    """``model(**batch)`` as a dict; a key the model reads but ``batch`` lacks is a DataError.

    A model whose ``forward`` cannot take the batch's keys (a TypeError) gets a DataError
    naming them, and one whose sizes do not fit the batch (torch's shape errors) a
    DataError naming the model, the batch's shapes and the size keys to change; both are
    worked out only after the error, so the step pays nothing for them.
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
    except KeyError as e:
        key = e.args[0] if e.args else None
        if isinstance(key, str) and key not in batch:
            raise DataError(
                f'the model needs input {key!r}, which the inputs lack; they have {sorted(batch)}'
            ) from None
        raise
    except (RuntimeError, IndexError, ValueError) as e:  # torch's word for sizes that do not fit the data
        from scepter_like.model.size_mismatch import explain

        why = explain(model, batch, e)
        if why is not None:
            raise DataError(why) from e  # --debug shows where in the model
        raise
    if not isinstance(out, dict):
        raise DataError(f'the model must return a dict, got {type(out).__name__}')
    return out
