"""Export: ``python tools/export.py [--cfg FILE] --checkpoint PATH --format safetensors|onnx --output OUT``.

``safetensors``: the model weights as OUT (``.safetensors``), the model's description in its
metadata, and with ``--cfg`` the config beside it (OUT with ``.yaml``), ready for
``run_eval --cfg OUT.yaml --checkpoint OUT`` or as MODEL.PRETRAINED_MODEL.  ``onnx``: the
model's eval-mode forward with named inputs and outputs and a dynamic batch dimension
(every dimension the export finds dynamic for a model with INPUT_BATCHING 'whole'),
checked with onnxruntime against torch on sample inputs (``--input x.npz``, else the first
samples of TEST_DATA or EVAL_DATA) within ``--atol`` / ``--rtol`` before it is written.
Without ``--cfg`` the model is the one the checkpoint describes (ONNX then needs
``--input``).  ``--output`` ends in the format's extension, checked before anything is built; files are
written atomically (rank 0).
"""

import os
import sys

from scepter_like.cli import (
    add_checkpoint_argument,
    check_output,
    import_modules,
    load_config,
    make_parser,
    refuse_config_options,
    run,
)
from scepter_like.errors import ConfigError

FORMATS = ('safetensors', 'onnx')
SAMPLE_ROWS = 8


def make_export_parser():
    from scepter_like.solver.onnx_export import DEFAULT_ATOL, DEFAULT_RTOL

    parser = make_parser('Export model weights to .safetensors, or the model to ONNX.')
    add_checkpoint_argument(parser)
    parser.add_argument('--format', required=True, choices=FORMATS, help='safetensors | onnx')
    parser.add_argument('--output', required=True, help='file to write')
    parser.add_argument('--input', help='onnx: .npz of sample inputs (default: the first samples of the data)')
    parser.add_argument('--atol', type=float, default=DEFAULT_ATOL, help=f'onnx check (default {DEFAULT_ATOL:g})')
    parser.add_argument('--rtol', type=float, default=DEFAULT_RTOL, help=f'onnx check (default {DEFAULT_RTOL:g})')
    return parser


def config_path_beside(output):
    return os.path.splitext(output)[0] + '.yaml'


def export_safetensors(model, weights, output, cfg=None):
    """``model``'s weights and description as ``output``; with ``cfg``, the config beside it."""
    from scepter_like.model.description import save_described_weights
    from scepter_like.utils.checkpoint import atomic_write_text

    state = model.state_dict()
    save_described_weights(output, state, model, source=weights)
    if cfg is None:
        print(f'wrote {output} ({len(state)} tensors; the model description is in its metadata)')
        return
    cfg_path = config_path_beside(output)
    atomic_write_text(cfg_path, cfg.dump())
    print(f'wrote {output} ({len(state)} tensors) and its config {cfg_path}')


def sample_inputs(model, input_path, solver=None):
    """A dict of CPU tensors: the arrays of ``input_path`` as the model takes them, else the first samples
    of TEST_DATA / EVAL_DATA (the first batch, for a model with INPUT_BATCHING 'whole')."""
    from scepter_like.solver.inference_solver import read_model_inputs
    from scepter_like.solver.predict import as_tensors, cast_inputs, input_batching, input_dtype

    rows = input_batching(model) == 'rows'
    if input_path:  # in the model's dtype, as run_inference reads it (a float32 file for a float64 model)
        return cast_inputs(as_tensors(read_model_inputs(input_path, model), rows=rows), input_dtype(model))
    bundle = solver.datas.get('test') or solver.datas.get('eval')
    if not rows:
        return as_tensors(next(bundle.iterate()), rows=False)
    dataset = bundle.dataset
    return as_tensors(bundle.loader.collate_fn([dataset[i] for i in range(min(SAMPLE_ROWS, len(dataset)))]))


def export_onnx_file(model, args, solver=None):
    from scepter_like.solver.onnx_export import export_onnx

    sample = sample_inputs(model, args.input, solver)
    model = model.cpu()
    inputs, outputs, diff = export_onnx(model, sample, args.output, atol=args.atol, rtol=args.rtol)
    print(
        f'wrote {args.output}: inputs {inputs}, outputs {outputs}, dynamic shapes;'
        f' onnxruntime vs torch max abs diff {diff:.3g} (atol {args.atol:g}, rtol {args.rtol:g})'
    )


def export_with_config(args, logger):
    from scepter_like.solver.inference_solver import build_solver_with_weights
    from scepter_like.utils.checkpoint import resolve_checkpoint

    cfg = load_config(args)
    data_modes = ()
    if args.format == 'onnx' and not args.input:
        if cfg.SOLVER.get('TEST_DATA') is None and cfg.SOLVER.get('EVAL_DATA') is None:
            raise ConfigError('ONNX export needs sample inputs: give --input x.npz or a TEST_DATA / EVAL_DATA')
        data_modes = ('test',) if cfg.SOLVER.get('TEST_DATA') is not None else ('eval',)
    weights = resolve_checkpoint(args.checkpoint)
    solver = build_solver_with_weights(cfg, weights, logger, data_modes=data_modes)
    try:
        if solver.is_main:
            if args.format == 'safetensors':
                export_safetensors(solver.unwrapped_model, weights, args.output, cfg)
            else:
                export_onnx_file(solver.unwrapped_model, args, solver)
    finally:
        solver.close()


def export_from_checkpoint(args, logger):
    from scepter_like.solver.inference_solver import model_from_weights
    from scepter_like.utils.checkpoint import resolve_checkpoint
    from scepter_like.utils.launch_env import process_rank

    refuse_config_options(args, 'export')
    if args.format == 'onnx' and not args.input:
        raise ConfigError('without --cfg (no data to take samples from) ONNX export needs --input x.npz')
    import_modules(args.imports)
    weights = resolve_checkpoint(args.checkpoint)
    model = model_from_weights(weights, logger)
    if process_rank() != 0:
        return
    if args.format == 'safetensors':
        export_safetensors(model, weights, args.output)
    else:
        export_onnx_file(model, args)


def main(argv):
    args = make_export_parser().parse_args(argv)
    if args.cfg and args.print_config:
        print(load_config(args).dump(), end='')
        return 0
    check_output(args.output, 'file', f'.{args.format}')
    from scepter_like.utils.launch_env import process_rank
    from scepter_like.utils.logger import get_logger

    logger = get_logger(rank=process_rank())
    if args.cfg:
        export_with_config(args, logger)
    else:
        export_from_checkpoint(args, logger)
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
