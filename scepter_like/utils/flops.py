"""FLOPs per sample with fvcore (imported only when counting).

fvcore counts one FLOP per multiply-add (a Linear layer of ``in -> out`` is ``in * out``
per sample) and skips element-wise operations it has no formula for.
"""

import warnings

import torch

from scepter_like.errors import DataError


def first_sample(data, keys=()):
    """The values of ``keys`` (all when empty), each cut to its first element along the batch dim."""
    names = list(keys) or list(data)
    missing = [k for k in names if k not in data]
    if missing:
        raise DataError(f'register_flops: keys {missing} are not in the data (it has {sorted(data)})')
    out = {}
    for name in names:
        value = data[name]
        out[name] = value[:1] if isinstance(value, (torch.Tensor, list, tuple)) else value
    return out


class _TensorArgs(torch.nn.Module):
    """Calls ``model(**inputs)`` from positional tensors (fvcore traces positional inputs) and
    returns the output dict's tensors as a tuple (tracing wants tensors out)."""

    def __init__(self, model, tensor_names, constants):
        super().__init__()
        self.model = model
        self.tensor_names = tensor_names
        self.constants = constants

    def forward(self, *tensors):
        out = self.model(**dict(zip(self.tensor_names, tensors)), **self.constants)
        if isinstance(out, dict):
            return tuple(v for v in out.values() if isinstance(v, torch.Tensor))
        return out


def count_flops(model, inputs):
    """Forward FLOPs of ``model(**inputs)`` in eval mode, by fvcore."""
    tensor_names = [k for k, v in inputs.items() if isinstance(v, torch.Tensor)]
    constants = {k: v for k, v in inputs.items() if k not in tensor_names}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)  # fvcore uses torch.jit
            from fvcore.nn import FlopCountAnalysis

            analysis = FlopCountAnalysis(
                _TensorArgs(model, tensor_names, constants), tuple(inputs[k] for k in tensor_names)
            )
            analysis.unsupported_ops_warnings(False)
            analysis.uncalled_modules_warnings(False)
            return int(analysis.total())
    finally:
        model.train(was_training)


def register_flops(solver, data, keys=None):
    """``solver.register_flops``: the FLOPs per sample of its model on ``data``'s first sample, kept and logged."""
    inputs = first_sample(data, keys or [])
    if solver.moves_batches:  # another device, or a SOLVER.DTYPE other than float32
        inputs = solver.transfer_data_to_device(inputs)
    solver.model_flops = count_flops(solver.unwrapped_model, inputs)
    solver.logger.info(f'model FLOPs per sample (fvcore, multiply-add = 1): {format_flops(solver.model_flops)}')
    return solver.model_flops


def format_flops(value):
    """``1.23 GFLOP``-style text."""
    for unit, scale in (('T', 1e12), ('G', 1e9), ('M', 1e6), ('K', 1e3)):
        if value >= scale:
            return f'{value / scale:.3g} {unit}FLOP'
    return f'{value:.3g} FLOP'
