"""Import user modules named in ``IMPORTS`` / ``--import`` so their registrations happen."""

import importlib
import importlib.util
import os
import sys

from scepter_like.errors import ConfigError

FILE_MODULE_PREFIX = '_scepter_user_'  # the module name of an imported .py file: this prefix + its stem


def importable_name(module_name):
    """What ``import_user_modules`` takes to import ``module_name`` again: the name, or the .py file it came from."""
    if module_name.startswith(FILE_MODULE_PREFIX):
        return getattr(sys.modules.get(module_name), '__file__', None) or module_name
    return module_name


def import_user_modules(names, base_dir=None):
    """Import each dotted module name or ``.py`` path (relative paths from ``base_dir`` or cwd)."""
    modules = []
    for name in names or []:
        if not isinstance(name, str) or not name:
            raise ConfigError(f'IMPORTS: {name!r} is not a module name or .py path')
        modules.append(_import_one(name, base_dir))
    return modules


def _import_one(name, base_dir):
    if name.endswith('.py') or os.sep in name or '/' in name:
        path = name if os.path.isabs(name) else os.path.join(base_dir or os.getcwd(), name)
        if not os.path.isfile(path) and base_dir and os.path.isfile(name):
            path = os.path.abspath(name)
        if not os.path.isfile(path):
            raise ConfigError(f'IMPORTS: file {name!r} not found; give a path relative to {base_dir or os.getcwd()}')
        mod_name = FILE_MODULE_PREFIX + os.path.splitext(os.path.basename(path))[0]
        if mod_name in sys.modules and getattr(sys.modules[mod_name], '__file__', None) == path:
            return sys.modules[mod_name]
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise ConfigError(
                f'IMPORTS: module {name!r} not found; check the name, give a .py path, or add its folder to PYTHONPATH'
            ) from None
        raise
