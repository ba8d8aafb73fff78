"""Batched inference on in-memory inputs: ``solver.predict`` and ``tools/run_inference.py``.

A dict of equally long arrays goes in, cut into batches and fed to ``model(**batch)`` in
eval mode under ``no_grad``; the per-sample tensors of every output dict come back
concatenated as numpy arrays.  The model's previous train / eval mode is restored.
A model whose class sets ``INPUT_BATCHING = 'whole'`` (a graph model: features [V, F] and
edge_index [2, E] share no sample axis) gets the arrays as one batch, in one forward, and
every non-scalar output comes back.

predict runs the model's forward, as BaseSolver's eval and test steps do; a solver subclass's own
``run_step_eval`` / ``run_step_test`` (outputs un-normalised there, say) is not applied, so predict
says so once per solver class (``_warn_own_step``): its outputs then differ from what test scores.
"""

import contextlib
import weakref

import numpy as np
import torch

from scepter_like.data.datasets import reject_nonfinite
from scepter_like.errors import DataError
from scepter_like.solver.hooks.eval_weights import evaluation_weights
from scepter_like.solver.model_call import forward_checked

BATCHINGS = ('rows', 'whole')
OWN_STEPS = ('run_step_eval', 'run_step_test')  # what predict does not run: it feeds the model itself
_told = weakref.WeakSet()  # the solver classes predict warned about their own steps (once each)


def input_batching(model):
    """``model``'s INPUT_BATCHING ('rows' unless its class declares 'whole'); anything else is a DataError."""
    batching = getattr(type(getattr(model, 'module', model)), 'INPUT_BATCHING', 'rows')
    if batching not in BATCHINGS:
        raise DataError(f'{type(model).__name__}.INPUT_BATCHING must be one of {BATCHINGS}, got {batching!r}')
    return batching


def as_tensors(inputs, rows=True, columns=None):
    """``{key: tensor}`` from a dict of numpy arrays, tensors, nested lists or DataFrames; with ``rows``, all
    equally long.  ``columns`` (batch key -> the table columns it was trained on) orders a DataFrame's by name."""
    if not isinstance(inputs, dict) or not inputs:
        raise DataError('predict needs a non-empty dict of arrays (batch key -> array)')
    tensors = {k: _tensor(k, by_name(k, v, (columns or {}).get(k))) for k, v in inputs.items()}
    lengths = {k: (len(v) if v.dim() else 0) for k, v in tensors.items()}
    if rows and all(v.dim() for v in tensors.values()) and set(lengths.values()) == {0}:
        shapes = {k: list(v.shape) for k, v in tensors.items()}
        raise DataError(f'predict got no samples: the inputs hold 0 rows ({shapes}); give at least one')
    if rows and (len(set(lengths.values())) != 1 or 0 in lengths.values()):
        raise DataError(
            f'predict inputs must be arrays with one equally long first (sample) dimension; got {lengths}'
            " (a model whose inputs are one batch as they stand, e.g. a graph, sets INPUT_BATCHING = 'whole')"
        )
    return tensors


def _tensor(key, value):
    """``value`` (an array, a tensor, nested lists of numbers, a DataFrame of numbers or bools) as a tensor;
    anything else (file paths, images as objects) is a DataError: predict feeds the model arrays, and reads no
    files."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        array = np.asarray(value)
        if hasattr(value, 'to_numpy') and array.dtype.kind in 'bO':
            # a DataFrame's bool or nullable columns (Int64, boolean: numpy objects) are numbers, pd.NA as NaN
            array = value.to_numpy(dtype=np.float64, na_value=np.nan)
        # torch takes no negative strides (x[:, ::-1], np.flip) and warns of a read-only array (np.asarray of a PIL
        # image): such arrays are copied
        copy = any(s < 0 for s in array.strides) or not array.flags.writeable
        return torch.as_tensor(np.array(array) if copy else array)
    except (TypeError, ValueError):
        raise _not_numbers(key, value) from None


def _not_numbers(key, value):
    """The DataError for an input holding other values than numbers, naming them (a DataFrame: its text columns)."""
    dtypes = getattr(value, 'dtypes', None)  # a DataFrame's, by column
    texts = [name for name, dtype in dtypes.items() if dtype.kind == 'O'] if hasattr(dtypes, 'items') else []
    if texts:
        return DataError(
            f'predict input {key!r} is a DataFrame whose column(s) {texts} hold text, not numbers: encode them as'
            ' numbers as the training data did, or leave them out'
        )
    if hasattr(value, 'to_numpy'):  # a Series
        value = value.to_numpy()
    first = value[0] if isinstance(value, (list, tuple, np.ndarray)) and len(value) else value
    kind = type(getattr(first, 'item', lambda: first)()).__name__  # a numpy scalar by its Python type
    return DataError(
        f'predict input {key!r} holds {kind} values, not numbers: predict takes arrays as the model does (images'
        ' as [N, C, H, W] floats, made as the TEST_DATA pipeline makes them); it reads no files'
    )


def by_name(key, value, names):
    """A DataFrame ``value`` (duck-typed: no pandas import) as its columns ``names`` (a list, or one name), in
    that order: the features of a table are matched by place, and a DataFrame's own order may differ from the
    training file's.  Anything else, or without ``names`` (the data was no table), is taken as it is."""
    if names is None or not hasattr(value, 'columns'):
        return value
    missing = [name for name in ([names] if isinstance(names, str) else names) if name not in value.columns]
    if missing:
        raise DataError(
            f'predict input {key!r} is a DataFrame without the column(s) {missing} the model was trained on; it takes'
            f' the columns {names} (in any order; pass df.to_numpy() to take its columns as they stand)'
        )
    return value[names]


def solver_predict(solver, inputs, batch_size):
    """``BaseSolver.predict``: the model's outputs with the weights its evaluation and test use (an averaging hook's
    EMA / SWA swapped in: ``evaluation_weights``), so predict, test and run_inference agree (where the solver's
    eval / test step is the model's forward: ``_warn_own_step``)."""
    _warn_own_step(solver)
    with evaluation_weights(solver):
        model = solver.unwrapped_model
        return predict(model, inputs, batch_size, solver.device, solver.updater.autocast, solver.datas)


def _warn_own_step(solver):
    """Warn, once per solver class, that predict runs the model without the class's own eval / test step."""
    own = [name for name in OWN_STEPS if solver.overrides(name)]
    if own and type(solver) not in _told:
        _told.add(type(solver))
        name = type(solver).__name__
        solver.logger.warning(
            f"predict runs the model's forward, not {name}'s own {' / '.join(own)}: what that step does to the"
            " outputs (test and evaluation run it) is not in predict's or run_inference's; do it in the model's"
            ' forward so all agree, or call the step on batches yourself'
        )


def predict(model, inputs, batch_size, device, autocast=contextlib.nullcontext, datas=None):
    """Outputs of ``model`` for ``inputs`` (a dict of arrays), ``batch_size`` samples at a time.

    The inputs go through the model's ``inputs_from_arrays`` first, as run_inference's do: a model checks (and may
    convert) them there.  Under INPUT_BATCHING 'whole' the inputs are one batch (``batch_size`` does not cut
    them).  DataFrame inputs are ordered by name, by the columns the model was trained on
    (``BaseModel.input_columns``), else those of ``datas`` (the solver's, mode -> DataBundle) where they read a
    table (the splits agree on them: ``check_splits_agree``).
    """
    columns = getattr(model, 'input_columns', None) or next(
        (bundle.columns for bundle in (datas or {}).values() if bundle.columns), None
    )
    if batch_size < 1:
        raise DataError(f'predict batch_size must be at least 1, got {batch_size}')
    whole = input_batching(model) == 'whole'
    convert = getattr(getattr(model, 'module', model), 'inputs_from_arrays', None)
    if convert is not None and isinstance(inputs, dict):  # the model's checks (MeshModel: a graph's edges)
        inputs = convert(inputs, 'predict input')
    tensors = as_tensors(inputs, not whole, columns)
    for key, tensor in tensors.items():  # NaN in gives NaN out (argmax: class 0), which training refuses too
        reject_nonfinite(tensor, f'predict input {key!r}')
    if whole:
        return predict_batches(model, [tensors], device, autocast, rows=False)
    n = len(next(iter(tensors.values())))
    batches = ({k: v[start : start + batch_size] for k, v in tensors.items()} for start in range(0, n, batch_size))
    try:
        return predict_batches(model, batches, device, autocast)
    except DataError as e:  # inputs the model does not take: maybe one sample, given without its batch axis
        one = _one_sample(tensors, datas)
        if one is None:
            raise
        raise one from e


def _one_sample(tensors, datas):
    """The DataError for inputs shaped as one sample of the solver's data (``datas``: mode -> DataBundle) is, without
    the batch axis in front; None when they are not, or no data tells.  It reads a sample: on the error path only."""
    for mode, bundle in (datas or {}).items():
        sample = bundle.dataset[0] if len(bundle.dataset) else None
        if not isinstance(sample, dict) or not set(tensors) <= set(sample):
            continue
        shapes = {k: list(torch.as_tensor(sample[k]).shape) for k in tensors}
        if all(list(v.shape) == shapes[k] for k, v in tensors.items()):
            return DataError(
                f'predict inputs {shapes} are the shape of one sample of the {mode} data, without the batch axis:'
                ' give a batch, the sample axis first (one sample x as x[None], shape [1, ...])'
            )
    return None


def predict_batches(model, batches, device, autocast=contextlib.nullcontext, rows=True):
    """Outputs of ``model`` over an iterable of batch dicts, concatenated in order.

    With ``rows``, outputs whose first dimension is not the batch's (scalars such as a
    loss) are left out; without, only scalars are.  ``autocast`` makes the context each
    forward runs in (the solver's AMP setting).
    """
    was_training = model.training
    model.eval()
    pieces, dropped = {}, {}
    cast = input_dtype(model)
    try:
        with torch.no_grad():
            for batch in batches:
                batch = cast_inputs(batch, cast, device)
                n = len(next(iter(batch.values()))) if rows else None
                with autocast():
                    out = forward_checked(model, batch, trained=True)
                for key, value in out.items():
                    if isinstance(value, torch.Tensor) and value.dim() > 0 and (n is None or len(value) == n):
                        # numpy has no bfloat16: such outputs (AMP) come back as float32
                        value = value.detach().cpu()
                        pieces.setdefault(key, []).append(value.float() if value.dtype == torch.bfloat16 else value)
                    elif isinstance(value, torch.Tensor) and value.dim() > 0:
                        dropped[key] = (list(value.shape), n)
    finally:
        model.train(was_training)
    if not pieces and dropped:  # e.g. one sample given without its sample axis: x [8] read as 8 samples
        key, (shape, n) = next(iter(dropped.items()))
        raise DataError(
            f'no output of the model has one row per input sample: {key!r} is {shape} for a batch of {n}; the'
            ' inputs need the sample axis first (one sample x as x[None], shape [1, ...])'
        )
    return {k: torch.cat(v).numpy() for k, v in pieces.items()}


def cast_inputs(batch, dtype, device=None):
    """``batch`` with its floating tensors in ``dtype`` (and on ``device``): given inputs, for inference and ONNX
    export alike, fit the model whatever float type their file holds."""
    return {
        k: v.to(device, dtype=dtype if v.is_floating_point() else None) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


def input_dtype(model):
    """What floating inputs are cast to: the model's floating dtype (numpy's float64 arrays for a float32 model)."""
    from scepter_like.model.dtype_mismatch import model_dtype

    return model_dtype(model)
