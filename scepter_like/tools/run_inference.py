"""Infer: ``python tools/run_inference.py [--cfg FILE] --checkpoint PATH [--input x.npz] --output y.npz [K=V ...]``.

Feeds the arrays of ``--input`` (named by the batch keys the model reads, e.g. ``img``, or
a sample file in the layout the model reads: ``BaseModel.inputs_from_arrays``; or a ``.csv``
table, its columns taken by the names the model was trained on, ``BaseModel.input_columns``) to the model
in eval mode, ``--batch-size`` samples at a time (a model with INPUT_BATCHING 'whole', such
as a graph model, takes the file as one batch), and writes every per-sample output (e.g.
``logits``) to ``--output`` (an ``.npz``, checked before the model is built) atomically.
Without ``--input`` it runs over the whole TEST_DATA in order.  Without ``--cfg`` the model is the
one the checkpoint describes (``scepter_like.model.description``); ``--input`` is then needed.  Under torchrun every
rank computes the same outputs and rank 0 writes them.
"""

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


def make_inference_parser():
    parser = make_parser('Run a model with given weights on arrays of an .npz file (or on TEST_DATA).')
    add_checkpoint_argument(parser)
    parser.add_argument(
        '--input',
        help='.npz of arrays named by batch key, or a .csv table read by the training columns (default: TEST_DATA)',
    )
    parser.add_argument('--output', required=True, help='.npz to write the outputs to')
    parser.add_argument('--batch-size', type=int, default=256, help='samples per forward (default 256)')
    return parser


def test_data_batches(solver, batch_size):
    """Every TEST_DATA sample in order (unsharded), ``batch_size`` at a time."""
    from torch.utils.data import DataLoader

    bundle = solver.datas['test']
    loader = bundle.loader
    return DataLoader(
        bundle.dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
    )


def infer_with_config(args, logger):
    """Outputs of the config's model with the checkpoint's weights, on --input or TEST_DATA."""
    from scepter_like.solver.inference_solver import build_solver_with_weights, model_inputs, read_inputs
    from scepter_like.solver.predict import predict_batches
    from scepter_like.utils.checkpoint import resolve_checkpoint

    cfg = load_config(args)
    if args.input is None and cfg.SOLVER.get('TEST_DATA') is None:
        raise ConfigError('run_inference needs --input (an .npz or a .csv) or a TEST_DATA in the config')
    arrays = read_inputs(args.input) if args.input else None  # a bad file fails before anything is built
    weights = resolve_checkpoint(args.checkpoint)
    solver = build_solver_with_weights(cfg, weights, logger, data_modes=() if arrays else ('test',))
    try:
        if arrays is not None:
            inputs = model_inputs(solver.unwrapped_model, arrays, args.input)
            outputs = solver.predict(inputs, batch_size=args.batch_size)
        else:
            batches = test_data_batches(solver, args.batch_size)
            outputs = predict_batches(solver.unwrapped_model, batches, solver.device, solver.updater.autocast)
    finally:
        solver.close()
    return outputs


def infer_from_checkpoint(args, logger):
    """Outputs of the model the checkpoint describes, on --input."""
    from scepter_like.solver.inference_solver import (
        inference_device,
        model_from_weights,
        model_inputs,
        read_inputs,
    )
    from scepter_like.solver.predict import predict
    from scepter_like.utils.checkpoint import resolve_checkpoint

    refuse_config_options(args, 'run_inference')
    if args.input is None:
        raise ConfigError('without --cfg (no TEST_DATA) run_inference needs --input (an .npz or a .csv)')
    arrays = read_inputs(args.input)  # a bad file fails before anything is built
    import_modules(args.imports)
    model = model_from_weights(resolve_checkpoint(args.checkpoint), logger)
    return predict(model, model_inputs(model, arrays, args.input), args.batch_size, inference_device())


def main(argv):
    args = make_inference_parser().parse_args(argv)
    if args.batch_size < 1:
        raise ConfigError(f'--batch-size must be at least 1, got {args.batch_size}')
    if args.cfg and args.print_config:
        print(load_config(args).dump(), end='')
        return 0
    check_output(args.output, 'file', '.npz')
    from scepter_like.solver.inference_solver import write_npz
    from scepter_like.utils.launch_env import process_rank
    from scepter_like.utils.logger import get_logger

    logger = get_logger(rank=process_rank())
    outputs = infer_with_config(args, logger) if args.cfg else infer_from_checkpoint(args, logger)
    if process_rank() == 0:
        write_npz(args.output, outputs)
        shapes = ', '.join(f'{k} {tuple(v.shape)} {v.dtype}' for k, v in outputs.items())
        print(f'wrote {args.output}: {shapes}')
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
