"""One line for a forward that fails because a batch tensor's dtype does not fit the model.

The loop casts floating inputs to the model's dtype (``SOLVER.DTYPE``) and CrossEntropyLoss
takes integer class labels of any width, so numpy's float64 features and int32 labels just
work.  What cannot be cast without a guess (integer or boolean features for a floating
model, a user's loss that wants int64 labels, an explicit ``DTYPES`` that disagrees with the
model) reaches torch, whose message (``mat1 and mat2 must have the same dtype``, ``expected
scalar type Long but found Int``) names no batch key.  ``explain`` turns it into a line naming
the keys, their dtypes and the data config's ``DTYPES`` key that sets them.  It runs only
after a forward raised.
"""

import re

import torch

from scepter_like.utils.checkpoint import unwrap_model

_DTYPE_MESSAGE = re.compile(
    r'must have the same dtype|same dtype|scalar type|not implemented for|Input type \(\w+\) and \w+ type'
    r'|expected .*dtype|dtype .* but got',
    re.IGNORECASE,
)
USUAL_LABEL_DTYPE = torch.int64


def _name(dtype):
    return str(dtype).removeprefix('torch.')


def model_dtype(model):
    """The dtype of the model's floating parameters (float32 without any)."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def explain(model, batch, error, trained=False):
    """The one-line message for ``error`` raised by ``model(**batch)``, or None when it is not about dtypes.

    ``trained``: inference on given inputs (predict, run_inference), which read no data config.
    """
    lines = str(error).strip().splitlines()
    message = lines[0].rstrip('.') if lines else ''
    if not _DTYPE_MESSAGE.search(message):
        return None
    inner = unwrap_model(model)
    want = model_dtype(inner)
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and v.dtype != want}
    odd = {k: v for k, v in tensors.items() if v.dtype != USUAL_LABEL_DTYPE} or tensors
    odd = {k: v for k, v in odd.items() if v.dim() > 1} or odd  # features before 1-d labels
    if not odd:
        return None
    cfg = getattr(inner, 'cfg', None)
    name = cfg.get('NAME', type(inner).__name__) if cfg is not None else type(inner).__name__
    keys = ', '.join(f'{k}: {_name(v.dtype)}' for k, v in odd.items())
    example = ', '.join(
        f'{k}: {_name(want) if v.is_floating_point() or v.dim() > 1 else "int64"}' for k, v in odd.items()
    )
    where = f"the data config's DTYPES (NpzDataset, CsvDataset: DTYPES: {{{example}}}) or in your dataset"
    if trained:
        where = f"the inputs you give (numpy: x.astype('{_name(want)}'))"
    return (
        f'the model {name} ({_name(want)}) cannot take the batch key(s) {keys}: {message}; set their dtypes in {where}'
    )
