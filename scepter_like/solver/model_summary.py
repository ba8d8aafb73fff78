"""The per-layer model summary a run logs at its start: name, type, parameters, output shape.

As Lightning's ModelSummary, the rows are the model's layers down to ``depth`` levels
(``SOLVER.MODEL_SUMMARY_DEPTH``, default 1: its direct children; 0: no summary).  Output
shapes come from one forward, in eval mode, of the first sample of the run's data (batch
size 1), seen by forward hooks on those layers; every RNG is restored after it.  A layer
the forward does not call shows ``-``; a forward that fails (or a sharded FSDP model, a
compiled one, a run without data) leaves the shapes out and says why, since the run itself reports a model
that cannot take its data.  Parameters are counted per layer (a weight shared by two layers
counts in both rows, once in the totals).
"""

import torch

from scepter_like.solver.parallel import is_fsdp
from scepter_like.utils.seed import get_rng_state, set_rng_state

NO_SHAPE = '-'


def model_summary(solver, depth):
    """The summary table of ``solver``'s model (text, starting with ``model summary:``)."""
    model = solver.unwrapped_model
    layers = [(name, module) for name, module in model.named_modules() if name and name.count('.') < depth]
    shapes, note = _output_shapes(solver, model, [module for _, module in layers])
    rows = [('name', 'type', 'params', 'output shape')]
    for name, module in layers:
        params = sum(p.numel() for p in module.parameters())
        rows.append((name, type(module).__name__, f'{params:,}', shapes.get(id(module), NO_SHAPE)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ['  ' + '  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    size = sum(p.numel() * p.element_size() for p in params) / 2**20
    lines.append(
        f'  {trainable:,} trainable, {sum(p.numel() for p in params) - trainable:,} frozen parameters'
        f' ({size:.2f} MiB)' + (f'; {note}' if note else '')
    )
    return 'model summary:\n' + '\n'.join(lines)


def _sample_batch(solver):
    """A batch of the first sample of the run's eval data (else test, else train), or None: the sample forward
    runs in eval mode, which a model may feed differently (a PINN trains on point sets, evaluates at points)."""
    for mode in ('eval', 'test', 'train'):
        bundle = solver.datas.get(mode)
        if bundle is not None and len(bundle.dataset):
            dataset = bundle.dataset  # a dataset that batches itself (graphs: __getitems__) makes its own batch
            items = dataset.__getitems__([0]) if hasattr(dataset, '__getitems__') else [dataset[0]]
            batch = bundle.loader.collate_fn(items)
            return solver.transfer_data_to_device(batch) if solver.moves_batches else batch
    return None


def _shape_text(value):
    if isinstance(value, torch.Tensor):
        return str(list(value.shape))
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        inner = [_shape_text(v) for v in value]
        inner = [text for text in inner if text != NO_SHAPE]
        return ', '.join(inner) if inner else NO_SHAPE
    return NO_SHAPE


def _output_shapes(solver, model, modules):
    """``({id(module): output shape text}, note)``: the shapes one forward of a sample gives, or why none."""
    if not modules:
        return {}, ''
    if is_fsdp(solver.model):
        return {}, 'no output shapes (the parameters are sharded)'
    if solver.compile_settings.ENABLED:  # a forward would compile it here (and meet a compile failure first)
        return {}, 'no output shapes (the model is compiled)'
    shapes = {}

    def record(module, inputs, output):
        shapes.setdefault(id(module), _shape_text(output))

    handles = [module.register_forward_hook(record) for module in modules]
    rng, was_training = get_rng_state(), model.training
    try:
        batch = _sample_batch(solver)
        if batch is None:
            return {}, 'no output shapes (no data)'
        model.eval()
        model(**batch)
    except Exception as e:  # the run reports a model that cannot take its data; the summary only notes it
        first = str(e).strip().splitlines()[0] if str(e).strip() else ''
        return {}, f'no output shapes (the sample forward raised {type(e).__name__}: {first})'
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
        set_rng_state(rng)
    return shapes, ''
