"""LR range test: ``python tools/find_lr.py --cfg FILE [--steps N] [--min-lr A] [--max-lr B] [--output DIR] [K=V ...]``.

Trains the config's model for N optimizer steps while the learning rate grows on a log
scale from A to B, in a temporary folder (the config's WORK_DIR is not touched), then
writes ``DIR/lr_find.png`` (loss against learning rate) and ``DIR/lr_find.csv`` and prints
the suggested learning rate (``scepter_like/lr_finder.py``).
"""

import os
import sys

from scepter_like.cli import check_output, make_parser, run
from scepter_like.errors import ConfigError
from scepter_like.utils.checkpoint import atomic_write, atomic_write_text


def main(argv):
    parser = make_parser('Sweep the learning rate over a few hundred steps and suggest one.')
    parser.add_argument('--steps', type=int, default=100, help='optimizer steps of the sweep (default 100)')
    parser.add_argument('--min-lr', type=float, default=1e-7, help='first learning rate (default 1e-7)')
    parser.add_argument('--max-lr', type=float, default=10.0, help='last learning rate (default 10)')
    parser.add_argument('--output', default='lr_find', help='folder for lr_find.png and lr_find.csv (default lr_find)')
    args = parser.parse_args(argv)
    if args.print_config:
        raise ConfigError('--print-config: find_lr runs a sweep; print the config with tools/run_train.py')
    if not args.cfg:
        raise ConfigError('--cfg FILE is required; give the YAML config to sweep')
    if args.steps < 2 or not 0 < args.min_lr < args.max_lr:
        raise ConfigError('--steps must be at least 2 and 0 < --min-lr < --max-lr')
    check_output(args.output, 'folder')  # before the sweep, which a failed write would lose
    from scepter_like.lr_finder import find_lr

    result = find_lr(args.cfg, args.overrides, args.imports, args.min_lr, args.max_lr, args.steps)
    csv_path, png_path = os.path.join(args.output, 'lr_find.csv'), os.path.join(args.output, 'lr_find.png')
    atomic_write_text(csv_path, result.to_csv())
    atomic_write(png_path, lambda f: f.write(result.plot_png(os.path.basename(args.cfg))))
    print(f'loss against learning rate: {png_path} ({csv_path})')
    print(
        f'suggested learning rate: {result.suggestion:.3g} (where the smoothed loss falls fastest);'
        f' e.g. SOLVER.OPTIMIZER.LEARNING_RATE={result.suggestion:.3g}'
    )
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
