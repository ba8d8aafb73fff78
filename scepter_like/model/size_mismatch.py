"""One line for a forward that fails because the model's sizes do not fit the data.

torch reports it from deep inside the model (``mat1 and mat2 shapes cannot be multiplied
(32x64 and 32x256)``, ``Target 9 is out of bounds``).  ``explain`` turns such an error
into a line naming the model, the batch's shapes and the config keys that set the sizes
that must fit: the ``SIZE_KEYS`` of the models inside (MLP: IN_DIM / OUT_DIM).  It runs
only after a forward raised, so a step pays nothing for it.
"""

import re

import torch

from scepter_like.utils.checkpoint import unwrap_model

# a layer given an input of another rank, as torch words it: 'expected 4D input (got 3D input)' (batch norm),
# 'Expected 3D (unbatched) or 4D (batched) input to conv2d' (convolutions), '3D or 4D (batch mode) tensor expected
# for input' (pooling)
_RANK = re.compile(
    r'[Ee]xpected \dD (?:\(unbatched\) or \dD \(batched\) )?input|\dD or \dD \(batch mode\) tensor expected'
)
# which side of the model a torch message is about: the features going in, or the outputs against the labels
_SIDES = (
    (
        'input',
        re.compile(
            rf'mat1 and mat2 shapes cannot be multiplied|to have \d+ channels, but got \d+ channels|{_RANK.pattern}'
        ),
    ),
    ('output', re.compile(r'Target -?\d+ is out of bounds|Expected input batch_size \(\d+\) to match target')),
    ('input or output', re.compile(r'The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)')),
)


# what to do about class labels outside 0 .. classes - 1 (here and in AccuracyMetric)
NEGATIVE_LABELS = 'class labels are indices 0, 1, ..., classes - 1: remap the labels (e.g. -1 / 1 to 0 / 1)'
LABELS_FROM_1 = 'class labels are indices 0 .. classes - 1: labels counted from 1 take label - 1'
_LABEL = re.compile(r'Target (-?\d+) is out of bounds')


def _side(message):
    for side, pattern in _SIDES:
        if pattern.search(message):
            return side
    return None


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f'{list(value.shape)} {str(value.dtype).removeprefix("torch.")}'
    return type(value).__name__


def _size_keys(model, side):
    """``PATH (value)`` of every SIZE_KEYS entry of ``side`` among the model's modules."""
    found = []
    for module in model.modules():
        cfg = getattr(module, 'cfg', None)
        for key_side, key in getattr(module, 'SIZE_KEYS', {}).items():
            if key_side in side and cfg is not None and key in cfg:
                found.append(f'{cfg.path_of(key)} (now {cfg[key]})')
    return found


def _one_number_per_sample(model, batch):
    """What to do when the model's input is a 1-d float tensor, ``[rows]`` (a CsvDataset key COLUMNS names by one
    column, not a list), which no size key fixes; None otherwise."""
    key = getattr(model, 'input_key', None)
    value = batch.get(key)
    if not isinstance(value, torch.Tensor) or value.dim() != 1 or not value.is_floating_point():
        return None
    column = (getattr(model, 'input_columns', None) or {}).get(key)
    if isinstance(column, str):
        return (
            f'{key!r} is read from the one column {column!r} as [rows] (COLUMNS names it alone, not in a list):'
            f' write it as a list, {key}: [{column}], for a [rows, 1] feature'
        )
    return f'{key!r} is [rows], one number per sample: the model takes [rows, features] (one feature: x[:, None])'


def explain(model, batch, error, trained=False):
    """The one-line message for ``error`` raised by ``model(**batch)``, or None when it is not about sizes.

    ``trained``: the model's sizes are settled (inference on a checkpoint), so the inputs are what to change.
    """
    lines = str(error).strip().splitlines()
    message = lines[0].rstrip('.') if lines else ''
    side = _side(message)
    if side is None:
        return None
    inner = unwrap_model(model)
    cfg = getattr(inner, 'cfg', None)
    name = cfg.get('NAME', type(inner).__name__) if cfg is not None else type(inner).__name__
    where = f' ({cfg.path})' if cfg is not None and cfg.path else ''
    shapes = ', '.join(f'{k}: {_describe(v)}' for k, v in batch.items())
    keys = _size_keys(inner, side)
    if side == 'input or output' and not keys:  # any broadcast error: a model's own bug keeps its traceback
        return None
    target = _LABEL.search(message)
    if target and int(target.group(1)) < 0:  # no size fixes a negative label
        fix = NEGATIVE_LABELS
    elif trained:
        fix = 'give inputs of the sizes the model takes' + (f' ({", ".join(keys)})' if keys else '')
    elif keys:
        fix = f'set {" or ".join(keys)} to fit the data'
    else:
        fix = f"make the model's {side} sizes fit the data"
    if target and int(target.group(1)) >= 0:
        fix += f' ({LABELS_FROM_1})'
    images = [v for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() == 4]
    if side == 'input' and _RANK.search(message):  # a sample without its batch axis
        fix = 'give a batch: the inputs need their sample axis first (one sample x as x[None])'
    elif side == 'input' and any(v.shape[-1] in (1, 3, 4) and v.shape[1] not in (1, 3, 4) for v in images):
        fix = (  # a channel count in the last place: images as they are read (HWC), not as the model takes them
            'images go into the model as [N, C, H, W] floats (what TRANSFORMS ImageToTensor and Normalize make),'
            ' and these are [N, H, W, C]: give them as the TEST_DATA pipeline makes them'
        )
    elif side == 'input' and images:
        fix += '; images of another size than the rest need TRANSFORMS Resize / CenterCrop instead'
    flat = _one_number_per_sample(inner, batch) if side == 'input' else None
    if flat is not None:
        fix = flat
    label_key = getattr(inner, 'label_key', None)  # a Classifier's: one column too many may be the labels
    if side == 'input' and not trained and label_key and label_key not in batch:
        fix += (
            f'; but the batches have no {label_key!r} either: a CsvDataset without LABEL_COLUMN reads the label'
            ' column as a feature (set LABEL_COLUMN)'
        )
    return f'the model {name}{where} does not fit the batch ({shapes}) at its {side}: {message}; {fix}'
