#!/usr/bin/env python
"""Config templates: ``python tools/config_template.py NAME [--registry R] [--import M]...`` or ``--list``.

Prints the YAML template of a registered component: ``NAME`` and every key it declares
with its default, and its description as a comment (``(required)`` marks keys without a
usable default).  A DATASETS entry also shows the loader keys a data config takes.
``--list`` prints what each registry holds.  ``--import`` adds user modules first.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scepter_like.cli import make_bare_parser, run  # noqa: E402
from scepter_like.errors import RegistryError, suggest  # noqa: E402


def all_registries():
    """Every registry of the toolkit by name, in the order a config nests them."""
    import scepter_like.solver  # noqa: F401  (registers every built-in component)
    from scepter_like.data.registry import DATASETS
    from scepter_like.metric.registry import METRICS
    from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS
    from scepter_like.model.registry import LOSSES, MODELS
    from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS
    from scepter_like.solver.hooks.registry import HOOKS
    from scepter_like.solver.registry import SOLVERS

    registries = (SOLVERS, HOOKS, MODELS, LOSSES, LOSS_AGGREGATORS, DATASETS, METRICS, OPTIMIZERS, LR_SCHEDULERS)
    return {r.name: r for r in registries}


def template(registries, name, registry_name=None):
    """The YAML template of ``name`` (in ``registry_name``, else in the one registry that holds it)."""
    from scepter_like.data.loader import LOADER_PARA_DICT
    from scepter_like.registry import declared_params, render_config_template

    if registry_name is not None:
        if registry_name not in registries:
            raise RegistryError(
                f'--registry: no registry {registry_name!r}{suggest(registry_name, registries)}'
                f' (registries: {", ".join(registries)})'
            )
        holders = [registry_name]
    else:
        holders = [r for r, reg in registries.items() if name in reg]
    if len(holders) > 1:
        raise RegistryError(f'{name!r} is in {" and ".join(holders)}; pick one with --registry')
    if not holders or name not in registries[holders[0]]:
        names = [n for r in ([holders[0]] if holders else registries) for n in registries[r].names()]
        where = f'registry {holders[0]}' if holders else 'any registry'
        elsewhere = [r for r, reg in registries.items() if name in reg]
        hint = f'; it is in {" and ".join(elsewhere)}' if elsewhere else suggest(name, names)
        raise RegistryError(f'{name!r} is not in {where}{hint}; see --list')
    registry = registries[holders[0]]
    para, _ = declared_params(registry.get(name))
    header = f'# {registry.name}.{name}\n'
    if registry.name == 'DATASETS':  # a data config holds the loader keys beside the dataset's
        return header + render_config_template(name, {**para, **LOADER_PARA_DICT})
    return header + render_config_template(name, para)


def listing(registries):
    return '\n'.join(f'{name} ({len(reg)}): {", ".join(reg.names())}' for name, reg in registries.items())


def main(argv):
    parser = make_bare_parser('Print the YAML config template of a registered component.')
    parser.add_argument('name', nargs='?', help='component name, e.g. LogHook, MLP, SGD')
    parser.add_argument('--registry', help='registry to look in when a name is in several, e.g. MODELS')
    parser.add_argument('--list', action='store_true', help='list what each registry holds')
    parser.add_argument(
        '--import', dest='imports', action='append', default=[], metavar='MODULE', help='user module or .py to import'
    )
    parser.add_argument('--debug', action='store_true', help='show tracebacks of user errors')
    args = parser.parse_args(argv)
    if not args.list and not args.name:
        parser.error('give a component NAME or --list')
    from scepter_like.utils.imports import import_user_modules

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    import_user_modules(args.imports, base_dir=os.getcwd())
    registries = all_registries()
    print(listing(registries) + '\n' if args.list else template(registries, args.name, args.registry), end='')
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
