"""Import user modules named in ``IMPORTS`` / ``--import`` so their registrations happen.

A ``.py`` file with relative imports (a file from scepter's own tree, ``from ...utils.config
import dict_to_yaml``) is loaded as a module of the one ``scepter_like`` package in which
all of them resolve (``scepter_like.solver.hooks`` for scepter's ``solver/hooks/lr.py``),
under its own name there, so nothing of the package is replaced.

A file (or a module's file) changed since this process ran it is run again, into the same module,
so its registrations replace the old ones (with the registry's warning): a notebook that edits its
``.py`` and builds again runs the new code, which is what the run records' code snapshot saves.
Only the entries of IMPORTS are checked; modules they import themselves are Python's cache.
"""

import ast
import hashlib
import importlib
import importlib.util
import logging
import os
import sys

from scepter_like.about import PACKAGE_DIR
from scepter_like.errors import ComponentError, ConfigError, UserError

FILE_MODULE_PREFIX = '_scepter_user_'  # the module name of an imported .py file: this prefix + its stem
_ran = {}  # real path of an IMPORTS entry's file -> sha256 of the source its module last ran (as far as known)


def importable_name(module_name):
    """What ``import_user_modules`` takes to import ``module_name`` again: the name, or the .py file it came from."""
    if module_name.rpartition('.')[2].startswith(FILE_MODULE_PREFIX):
        return getattr(sys.modules.get(module_name), '__file__', None) or module_name
    return module_name


def imported_files():
    """The ``.py`` files this process imported from IMPORTS by path (their modules' names exist only here)."""
    return sorted(
        module.__file__
        for name, module in list(sys.modules.items())
        if name.rpartition('.')[2].startswith(FILE_MODULE_PREFIX) and getattr(module, '__file__', None)
    )


def import_user_modules(names, base_dir=None):
    """Import each dotted module name or ``.py`` path (relative paths from ``base_dir`` or cwd)."""
    modules = []
    for name in names or []:
        if not isinstance(name, str) or not name:
            raise ConfigError(f'IMPORTS: {name!r} is not a module name or .py path')
        modules.append(_import_one(name, base_dir))
    return modules


def _is_path(name):
    return name.endswith('.py') or os.sep in name or '/' in name


def _file_path(name, base_dir):
    path = name if os.path.isabs(name) else os.path.join(base_dir or os.getcwd(), name)
    if not os.path.isfile(path) and base_dir and os.path.isfile(name):
        path = os.path.abspath(name)
    return path


def source_files(names, base_dir=None):
    """The source files behind the imported ``names`` (a package gives every ``.py`` file in its folder).

    A dotted name gives its parent packages' ``__init__.py`` too (importing it ran them).  Names not
    imported (or without a file) give nothing; the run records save the files git does not track.
    """
    files = []
    for name in names or []:
        if not isinstance(name, str) or not name:
            continue
        if _is_path(name):
            path = _file_path(name, base_dir)
            files += [os.path.abspath(path)] if os.path.isfile(path) else []
            continue
        path = getattr(sys.modules.get(name), '__file__', None)
        if not path:
            continue
        parts = name.split('.')
        parents = (getattr(sys.modules.get('.'.join(parts[:i])), '__file__', None) for i in range(1, len(parts)))
        files += [parent for parent in parents if parent]
        if os.path.basename(path) == '__init__.py':
            for folder, dirs, names_here in os.walk(os.path.dirname(path)):
                dirs[:] = sorted(d for d in dirs if d != '__pycache__')
                files += [os.path.join(folder, n) for n in sorted(names_here) if n.endswith('.py')]
        else:
            files.append(path)
    return list(dict.fromkeys(os.path.abspath(f) for f in files))


def _import_one(name, base_dir):
    """Import one entry: a syntax error is a ConfigError naming file and line, any other exception a ComponentError."""
    try:
        return _load(name, base_dir)
    except SyntaxError as e:
        where = f'line {e.lineno} of {e.filename}' if e.lineno else e.filename
        raise ConfigError(f'IMPORTS: {name!r} does not compile: {e.msg} at {where}; fix the code there') from None
    except UnicodeDecodeError as e:
        raise ConfigError(f'IMPORTS: {name!r} is not UTF-8 text (byte {e.start}); save it as UTF-8') from None
    except UserError:
        raise
    except Exception as e:
        raise ComponentError(f'IMPORTS entry {name!r}', e) from e


def _load(name, base_dir):
    if _is_path(name):
        path = _file_path(name, base_dir)
        if os.path.isdir(path):
            raise ConfigError(
                f'IMPORTS: {name!r} is a folder; give a .py file, or the package by its module name with the folder'
                ' above it on PYTHONPATH'
            )
        if not os.path.isfile(path):
            raise ConfigError(f'IMPORTS: file {name!r} not found; give a path relative to {base_dir or os.getcwd()}')
        loaded = module_of_file(path)
        if loaded is not None:  # imported already (by a user module's ``import b``): its classes are registered
            return _current(loaded, path, name)
        package = _package_for_relative_imports(path)
        stem = os.path.splitext(os.path.basename(path))[0]
        mod_name = FILE_MODULE_PREFIX + stem
        if package:
            mod_name = f'{package}.{mod_name}'
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        names = [mod_name] + _plain_import_name(path, stem, package)
        for alias in names:
            sys.modules[alias] = module
        source = _read(path)
        try:
            exec(compile(source, path, 'exec'), module.__dict__)
        except BaseException:
            for alias in names:  # as importlib does: no half-run module stays importable
                del sys.modules[alias]
            raise
        _ran[os.path.realpath(path)] = _digest(source)
        return module
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise ConfigError(
                f'IMPORTS: module {name!r} not found; check the name, give a .py path, or add its folder to PYTHONPATH'
            ) from None
        raise
    path = getattr(module, '__file__', None)
    return _current(module, path, name) if path and path.endswith('.py') else module


def _read(path):
    with open(path, 'rb') as f:
        return f.read()


def _digest(source):
    return hashlib.sha256(source).hexdigest()


def _current(module, path, name):
    """``module``, its file ``path`` run again into it when the file changed since the module ran it (a module
    imported before this one saw it counts as running the file as it is now)."""
    source = _read(path)
    digest, real = _digest(source), os.path.realpath(path)
    if _ran.setdefault(real, digest) == digest:
        return module
    logging.getLogger(__name__).warning(
        f'IMPORTS: {name} changed since this process imported it: running it again (its registrations replace'
        ' the earlier ones)'
    )
    exec(compile(source, module.__file__, 'exec'), module.__dict__)
    _ran[real] = digest
    return module


def module_of_file(path):
    """The imported module (under any name) whose source is the file ``path``, or None."""
    real = os.path.realpath(path)
    base = os.path.basename(real)
    for module in list(sys.modules.values()):
        found = getattr(module, '__file__', None)
        if isinstance(found, str) and os.path.basename(found) == base and os.path.realpath(found) == real:
            return module
    return None


def _plain_import_name(path, stem, package):
    """``[stem]`` when ``import stem`` would load the file ``path`` (its folder is on sys.path, the name free).

    A user module imported by path is entered under that name too, so another user module's
    ``import stem`` finds it instead of running the file again (which would register its
    classes twice, each with a warning).
    """
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    on_path = any(os.path.realpath(entry or os.getcwd()) == folder for entry in sys.path)
    if package or not stem.isidentifier() or stem in sys.modules or not on_path:
        return []
    return [stem]


def _package_for_relative_imports(path):
    """The ``scepter_like`` package where every relative import of ``path`` resolves; None without any.

    A ConfigError when none or several do.
    """
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), filename=path)
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    if not relative:
        return None
    root = PACKAGE_DIR
    packages = [
        os.path.relpath(folder, os.path.dirname(root)).replace(os.sep, '.')
        for folder, _, files in os.walk(root)
        if '__init__.py' in files
    ]
    fits = [p for p in packages if all(_resolves(p, node, root) for node in relative)]
    if len(fits) == 1:
        return fits[0]
    first = relative[0]
    text = f'from {"." * first.level}{first.module or ""} import ...'
    raise ConfigError(
        f'IMPORTS: {path} uses relative imports ({text})'
        + (
            f' that resolve in several packages ({", ".join(sorted(fits))})'
            if fits
            else ' that no scepter_like package has'
        )
        + '; write them as absolute imports (from scepter_like.... import ...)'
    )


def _resolves(package, node, root):
    """Whether ``from .{level}{module} import names`` inside ``package`` names modules or packages that exist."""
    parts = package.split('.')
    if node.level > len(parts):
        return False
    base = parts[: len(parts) - node.level + 1] + (node.module.split('.') if node.module else [])
    targets = [base] if node.module else [base + [alias.name] for alias in node.names]
    return all(_exists(os.path.join(os.path.dirname(root), *target)) for target in targets)


def _exists(stem):
    return os.path.isfile(stem + '.py') or os.path.isfile(os.path.join(stem, '__init__.py'))
