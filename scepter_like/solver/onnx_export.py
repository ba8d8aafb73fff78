"""ONNX export of a ``model(**batch) -> dict`` model, checked against torch with onnxruntime.

torch.onnx wants positional tensors in and a tuple out, so the model is wrapped with
named inputs and outputs.  The inputs are the batch keys the model cannot run without
(found by leaving each one out of a sample batch); the outputs are its per-sample
tensors, less those named as an input (a PINN returns its points ``x`` beside ``u``).
The batch dimension is dynamic.  The exported graph is run by onnxruntime on
the sample and on a smaller batch, and must match torch within ``atol`` / ``rtol``
before the file is written (atomically).  A model with INPUT_BATCHING 'whole' (a graph:
features [V, F], edge_index [2, E]) has no batch dimension to cut: every dimension the
exporter finds dynamic stays so (``torch.export.Dim.AUTO``), its outputs are all its
non-scalar tensors, and the check runs on the sample as it is.  onnx, onnxscript and onnxruntime are the
optional extra ``onnx``; they are imported only here.
"""

import numpy as np
import torch

from scepter_like.errors import ConfigError, DataError
from scepter_like.solver.model_call import forward_checked
from scepter_like.solver.predict import input_batching
from scepter_like.utils.checkpoint import atomic_write
from scepter_like.utils.torch_noise import quiet_onnx_export

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-4


class NamedIOWrapper(torch.nn.Module):
    """``model(**dict(zip(input_names, tensors)))[name] for name in output_names`` as a plain module."""

    def __init__(self, model, input_names, output_names):
        super().__init__()
        self.model = model
        self.input_names = list(input_names)
        self.output_names = list(output_names)

    def forward(self, *tensors):
        out = self.model(**dict(zip(self.input_names, tensors)))
        return tuple(out[name] for name in self.output_names)


def required_inputs(model, sample):
    """The keys of ``sample`` without which ``model`` fails: a missing ``forward`` argument (DataError), or a
    KeyError naming the key (a model that reads its inputs from ``**batch``)."""
    needed = []
    with torch.no_grad():
        for key in sample:
            try:
                forward_checked(model, {k: v for k, v in sample.items() if k != key})
            except DataError:
                needed.append(key)
            except KeyError as e:
                if e.args and e.args[0] == key:
                    needed.append(key)
                else:
                    raise
    return needed or list(sample)


def _import_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError(
            "ONNX export needs onnx, onnxscript and onnxruntime: pip install 'scepter_like[onnx]'"
        ) from None
    return onnxruntime


def export_onnx(model, sample, path, atol=DEFAULT_ATOL, rtol=DEFAULT_RTOL, logger=None):
    """Export ``model`` (eval mode) to ``path`` and check it; returns (inputs, outputs, max abs diff).

    ``sample`` is a dict of CPU tensors with at least 2 samples (any batch, for INPUT_BATCHING
    'whole').  A mismatch beyond the tolerance raises RuntimeError and writes nothing.
    """
    ort = _import_onnxruntime()
    whole = input_batching(model) == 'whole'
    rows = None if whole else len(next(iter(sample.values())))
    if not whole and rows < 2:
        raise DataError(f'ONNX export needs a sample batch of at least 2 rows (for a dynamic batch), got {rows}')
    was_training = model.training
    model.eval()
    try:
        input_names = required_inputs(model, sample)
        with torch.no_grad():
            out = forward_checked(model, {k: sample[k] for k in input_names})
        output_names = [  # an output that hands an input back (a PINN's x) is not exported: a name is defined once
            k
            for k, v in out.items()
            if isinstance(v, torch.Tensor) and v.dim() > 0 and (whole or len(v) == rows) and k not in input_names
        ]
        if not output_names:
            raise DataError(f'the model returns no per-sample tensor to export; it returns {sorted(out)}')
        wrapper = NamedIOWrapper(model, input_names, output_names).eval()
        args = tuple(sample[k] for k in input_names)
        if whole:
            auto = torch.export.Dim.AUTO
            dims = tuple(dict.fromkeys(range(sample[k].dim()), auto) for k in input_names)
        else:
            batch = torch.export.Dim('batch')
            dims = tuple({0: batch} for _ in input_names)
        with quiet_onnx_export():  # torch's torchvision-not-installed lines and a pytree FutureWarning
            program = torch.onnx.export(
                wrapper,
                args,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=(dims,),  # one spec per *tensors entry
                dynamo=True,
                verbose=False,
            )
        blob = program.model_proto.SerializeToString()
        session = ort.InferenceSession(blob, providers=['CPUExecutionProvider'])
        max_diff = 0.0
        # the sample, and another batch size (a whole batch cannot be cut)
        for n in (None,) if whole else (rows, max(1, rows // 2)):
            feed = {k: sample[k][:n] for k in input_names}
            with torch.no_grad():
                expected = [t.numpy() for t in wrapper(*feed.values())]
            got = session.run(output_names, {k: v.numpy() for k, v in feed.items()})
            for name, e, g in zip(output_names, expected, got):
                diff = float(np.max(np.abs(e.astype(np.float64) - g.astype(np.float64)))) if e.size else 0.0
                max_diff = max(max_diff, diff)
                if e.shape != g.shape or not np.allclose(g, e, atol=atol, rtol=rtol):
                    raise RuntimeError(
                        f'ONNX output {name!r} (batch {n}) differs from torch: max abs diff {diff:.3g}'
                        f' beyond atol {atol:g} / rtol {rtol:g}; nothing was written'
                    )
    finally:
        model.train(was_training)
    atomic_write(path, lambda f: f.write(blob))
    return input_names, output_names, max_diff
