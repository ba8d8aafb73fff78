#!/usr/bin/env python
"""Write the synthetic mesh dataset: ``python tools/make_mesh_dataset.py --out DIR [--seed N] [--subjects N] ...``.

One ``.npz`` per (subject, phase) sample and ``DIR/manifest.csv`` (subject, phase, stage,
split, file), split by subject; see ``tasks/mesh_regression/generate.py``.  The same
options always write the same files.  A MeshDataset with GENERATE set writes the same
dataset by itself on first use.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scepter_like.cli import make_bare_parser, run  # noqa: E402
from scepter_like.errors import ConfigError  # noqa: E402


def main(argv):
    from tasks.mesh_regression.generate import GenerationSpec, write_dataset

    default = GenerationSpec()
    parser = make_bare_parser('Write the synthetic mesh regression dataset (manifest + one .npz per sample).')
    parser.add_argument('--out', required=True, help='folder to write (manifest.csv goes there)')
    parser.add_argument('--seed', type=int, default=default.seed)
    parser.add_argument('--subjects', type=int, default=default.subjects)
    parser.add_argument('--phases', type=int, default=default.phases)
    parser.add_argument('--pca-modes', type=int, default=default.pca_modes)
    parser.add_argument(
        '--levels', type=int, nargs='+', default=list(default.levels), help='icosphere subdivisions, cycled'
    )
    parser.add_argument('--val-subjects', type=int, default=default.val_subjects)
    parser.add_argument('--test-subjects', type=int, default=default.test_subjects)
    args = parser.parse_args(argv)
    if os.path.exists(os.path.join(args.out, 'manifest.csv')):
        raise ConfigError(f'--out {args.out}: a dataset is already there; delete it or choose another folder')
    try:
        spec = GenerationSpec(
            seed=args.seed,
            subjects=args.subjects,
            phases=args.phases,
            pca_modes=args.pca_modes,
            levels=args.levels,
            val_subjects=args.val_subjects,
            test_subjects=args.test_subjects,
        )
    except ValueError as e:
        raise ConfigError(f'{e}; fix the options') from None
    manifest = write_dataset(args.out, spec)
    print(f'wrote {spec.subjects * spec.phases} samples and {manifest}')
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
