"""Config templates: ``python tools/config_template.py NAME [--registry R] [--import M]...`` or ``--list``.

Prints the YAML template of a registered component: ``NAME`` and every key it declares
(in either ``para_dict`` form) with its default, and its description as a comment
(``(required)`` marks keys without a usable default; a declared type, range or choices
follow in brackets, e.g. ``[int, at least 1]``).  A DATASETS entry also shows the loader
keys a data config takes.
``--list`` prints what each registry holds.  ``--import`` adds user modules first.
"""

import os
import sys

from scepter_like.cli import make_bare_parser, run
from scepter_like.errors import RegistryError, suggest
from scepter_like.utils.registries import all_registries


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
