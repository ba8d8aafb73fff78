"""Config: a YAML-backed tree of dicts and lists with attribute access.

A ``Config`` remembers where it sits in the whole tree (``SOLVER.TRAIN_HOOKS[2]``) so
that every error can name the exact place a user must fix.  YAML is read with the safe
loader only, from UTF-8 files; a key written twice in one mapping is an error.
``_BASE_`` files are merged in (dicts deeply, lists replaced; a mapping that holds
``_delete_: true`` replaces the inherited one, as in mmengine), then scepter's ``_BASE``,
``_BASE_RUN`` and ``_BASE_MODEL``.  After the command-line
overrides, ``${A.B.0.C}`` references are resolved (``resolve_references``).
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

import yaml

from scepter_like.errors import ConfigError, suggest

BASE_KEY = '_BASE_'
SCEPTER_BASE_KEYS = ('_BASE', '_BASE_RUN', '_BASE_MODEL')  # scepter's, merged in this order after _BASE_
DELETE_KEY = '_delete_'  # in a mapping of a file with _BASE_: replace the inherited mapping instead of merging
REFERENCE = re.compile(r'\$\{([^${}]+)\}')
ROOT_KEYS = ('ENV', 'SOLVER', 'IMPORTS')


INT_TAG = 'tag:yaml.org,2002:int'
FLOAT_TAG = 'tag:yaml.org,2002:float'


class YamlResolver(yaml.resolver.Resolver):
    """Which plain scalars are numbers: YAML 1.2's core schema, for the loader and the dumper alike.

    PyYAML implements YAML 1.1, where ``5e-4`` is a string, ``010`` is octal 8 and ``30:00``
    is base-60 1800.  Here numbers with an exponent and no dot are floats and integers are
    decimal, ``0o`` octal or ``0x`` hexadecimal (``010`` is 10; ``30:00``, ``30:00.5``,
    ``1_000`` and ``1_000.5`` are strings).  The dumper quotes every string this table reads as something else, so a
    dumped config loads back equal.
    """


YamlResolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (INT_TAG, FLOAT_TAG)]
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}
YamlResolver.add_implicit_resolver(
    INT_TAG, re.compile(r'^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$'), list('-+0123456789')
)
YamlResolver.add_implicit_resolver(  # after the integers: a plain 10 is one
    FLOAT_TAG,
    re.compile(
        r'^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$'
    ),
    list('-+0123456789.'),
)


def _construct_int(loader, node):
    """A YAML 1.2 integer: decimal even with leading zeros, ``0o`` octal, ``0x`` hexadecimal."""
    text = loader.construct_scalar(node)
    return int(text, 0) if text[:2] in ('0o', '0x') else int(text, 10)


class YamlLoader(yaml.SafeLoader, YamlResolver):
    """PyYAML's safe loader with YamlResolver's numbers.

    A key written twice in one mapping is an error (YAML would keep the last silently).
    """

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_at = {}
            for key_node, _ in node.value:
                if key_node.tag == 'tag:yaml.org,2002:merge':  # '<<' merges: later keys override by design
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = first_at.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
                if first is not key_node.start_mark:
                    raise yaml.constructor.ConstructorError(
                        problem=f'key {key!r} is written twice in one mapping (first at line {first.line + 1})',
                        problem_mark=key_node.start_mark,
                    )
        return super().construct_mapping(node, deep)


YamlLoader.add_constructor(INT_TAG, _construct_int)


class YamlDumper(getattr(yaml, 'CSafeDumper', yaml.SafeDumper), YamlResolver):  # type: ignore[misc]
    """PyYAML's safe dumper (libyaml's when present: same text, faster) quoting by YamlResolver's table."""


def flatten_config(value, prefix=''):
    """``{'A.B.C': leaf}`` of a plain config: mappings open up, and lists holding mappings or lists open up
    by index (``SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL``, the override syntax); other lists, empty mappings and
    scalars are leaves."""
    if isinstance(value, dict) and value:
        items = value.items()
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = enumerate(value)
    else:
        return {prefix: value}
    out = {}
    for key, item in items:
        out.update(flatten_config(item, f'{prefix}.{key}' if prefix else str(key)))
    return out


def load_yaml(stream):
    """YAML text (or a file object) to Python values, safely, numbers as YAML 1.2 reads them."""
    return yaml.load(stream, Loader=YamlLoader)


def dump_yaml(value, **options):
    """YAML text that ``load_yaml`` reads back as ``value``."""
    return yaml.dump(value, Dumper=YamlDumper, sort_keys=False, allow_unicode=True, **options)


def _child_path(path, key):
    if isinstance(key, int):
        return f'{path}[{key}]'
    return f'{path}.{key}' if path else str(key)


class Config:
    """A mapping with ``cfg.KEY`` access whose nested dicts are Configs too."""

    __slots__ = ('_d', '_path', '_root', '_references')  # _references: the root's, set by resolve_references

    def __init__(
        self,
        cfg_dict: Any = None,
        cfg_file: str | None = None,
        path: str = '',
        root: Config | None = None,
        *,
        load: Any = None,
        logger: Any = None,
    ):
        """``load`` and ``logger`` are scepter's: ``load=False`` reads no file; the logger is not used."""
        object.__setattr__(self, '_path', path)
        object.__setattr__(self, '_root', root)
        if load and cfg_file is None:
            raise ConfigError(
                'Config(load=True) needs cfg_file=...; the command line is parsed by tools/run_train.py, not by Config'
            )
        if cfg_file is not None and load is not False:
            if cfg_dict is not None:
                raise ValueError('Config takes cfg_dict or cfg_file, not both')
            cfg_dict = load_yaml_with_base(cfg_file)
        if cfg_dict is None:
            cfg_dict = {}
        if isinstance(cfg_dict, Config):
            cfg_dict = cfg_dict.to_dict()
        if not isinstance(cfg_dict, dict):
            raise ConfigError(f'{path or "config"}: expected a mapping, got {type(cfg_dict).__name__}')
        object.__setattr__(self, '_d', {})
        for k, v in cfg_dict.items():
            self._d[k] = self._wrap(k, v)

    # -- tree plumbing -------------------------------------------------------------
    @property
    def root(self):
        """The top of the tree this Config belongs to (itself at the top)."""
        return self._root if self._root is not None else self

    @property
    def path(self):
        """Where this Config sits in the whole tree, e.g. ``SOLVER.TRAIN_HOOKS[2]``."""
        return self._path

    def path_of(self, key: str) -> str:
        return _child_path(self._path, key)

    def reference_of(self, key: str) -> str:
        """What the files or overrides wrote for ``key`` where it held a reference (``${SOLVER.MAX_EPOCHS}``), else
        ``''``: an error about the value says where it came from."""
        return getattr(self.root, '_references', {}).get(self.path_of(key), '')

    def _wrap(self, key, value, path=None):
        path = _child_path(self._path, key) if path is None else path
        if isinstance(value, Config):
            value = value.to_dict()
        if isinstance(value, dict):
            return Config(value, path=path, root=self.root)
        if isinstance(value, (list, tuple)):
            return [self._wrap(i, v, _child_path(path, i)) for i, v in enumerate(value)]
        return _python_scalar(value)

    # -- mapping interface ------------------------------------------------------------
    def __getattr__(self, key):
        try:
            return self._d[key]
        except KeyError:
            raise AttributeError(f'{self.path_of(key)} is not in the config') from None

    def __setattr__(self, key, value):
        self[key] = value

    def __getitem__(self, key):
        return self._d[key]

    def __setitem__(self, key, value):
        self._d[key] = self._wrap(key, value)

    def __delitem__(self, key):
        del self._d[key]

    def __contains__(self, key):
        return key in self._d

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)

    def __eq__(self, other):
        if isinstance(other, Config):
            other = other.to_dict()
        return self.to_dict() == other

    def __repr__(self):
        return f'Config({self.to_dict()!r})'

    def __deepcopy__(self, memo):
        copied = Config(copy.deepcopy(self.to_dict(), memo), path=self._path)
        object.__setattr__(copied, '_references', getattr(self.root, '_references', {}))  # places are whole paths
        return copied

    def __getstate__(self):
        return {'d': self.to_dict(), 'path': self._path}

    def __setstate__(self, state):
        object.__setattr__(self, '_path', state['path'])
        object.__setattr__(self, '_root', None)
        object.__setattr__(self, '_d', {})
        for k, v in state['d'].items():
            self._d[k] = self._wrap(k, v)

    def get(self, key: str, default: Any = None) -> Any:
        return self._d.get(key, default)

    def have(self, key):
        """scepter's name for ``key in cfg``."""
        return key in self._d

    def set(self, key, value):
        """scepter's name for ``cfg[key] = value``."""
        self[key] = value

    def get_dict(self):
        """scepter's name for :meth:`to_dict` (a plain copy: changing it leaves the Config as it is)."""
        return self.to_dict()

    @property
    def cfg_dict(self):
        """scepter's attribute: the config as plain dicts (a copy, as ``get_dict``)."""
        return self.to_dict()

    def get_lowercase_dict(self):
        """scepter's: the plain dicts with the keys of every mapping lower-cased (keyword arguments for a callee)."""
        return _recased(self.to_dict(), str.lower)

    def get_uppercase_dict(self):
        """scepter's: the plain dicts with the keys of every mapping upper-cased."""
        return _recased(self.to_dict(), str.upper)

    @staticmethod
    def get_plain_cfg(cfg=None):
        """scepter's: plain dicts and lists of a Config, or of dicts and lists that hold Configs."""
        if isinstance(cfg, dict):
            return {k: Config.get_plain_cfg(v) for k, v in cfg.items()}
        return _plain(cfg)

    def keys(self):
        return self._d.keys()

    def values(self):
        return self._d.values()

    def items(self):
        return self._d.items()

    def pop(self, key, *default):
        return self._d.pop(key, *default)

    def setdefault(self, key, value):
        if key not in self._d:
            self[key] = value
        return self._d[key]

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists, ready for YAML or JSON."""
        return {k: _plain(v) for k, v in self._d.items()}

    def dump(self) -> str:
        """YAML text that loads back to an equal config."""
        return dump_yaml(self.to_dict(), default_flow_style=False)


def _recased(value, case):
    """``value`` with the string keys of every mapping in it (not inside lists, as scepter) put in ``case``."""
    if not isinstance(value, dict):
        return value
    return {case(k) if isinstance(k, str) else k: _recased(v, case) for k, v in value.items()}


def _python_scalar(value):
    """A numpy scalar (or 0-d array) of bool, int, float or str kind as the Python value it holds
    (``np.logspace(-3, -1, 3)[1]`` is the float 0.01), which YAML dumps and the registry's type checks take;
    anything else as it is."""
    if getattr(value, 'shape', None) == () and getattr(getattr(value, 'dtype', None), 'kind', None) in 'biufU':
        return value.item()
    return value


def _plain(value):
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# -- files -------------------------------------------------------------------------------
def _decoded(path):
    """The text of ``path``; a file that is not UTF-8 is a ConfigError naming the line of the first bad byte."""
    with open(path, 'rb') as f:
        raw = f.read()
    try:
        return raw.decode('utf-8')
    except UnicodeDecodeError as e:
        line = raw.count(b'\n', 0, e.start) + 1
        raise ConfigError(
            f'{path} is not UTF-8 text (byte {raw[e.start]:#04x} at line {line}); save the file as UTF-8'
        ) from None


def _read_yaml(path):
    if not os.path.isfile(path):
        raise ConfigError(f'config file not found: {path}')
    text = _decoded(path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark else ''
        problem = getattr(e, 'problem', None) or str(e).splitlines()[0]
        raise ConfigError(f'invalid YAML in {path}{where}: {problem}; fix the syntax there') from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f'{path}: the top level must be a mapping of keys, got {type(data).__name__}')
    return data


def merge_dicts(base, override):
    """Deep merge: dicts merge key by key, everything else (lists too) is replaced.

    A mapping of ``override`` holding ``_delete_: true`` replaces the one in ``base``.
    """
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not v.get(DELETE_KEY):
            out[k] = merge_dicts(out[k], v)
        else:
            out[k] = v
    return out


def _drop_delete_keys(value):
    if isinstance(value, dict):
        return {k: _drop_delete_keys(v) for k, v in value.items() if k != DELETE_KEY}
    if isinstance(value, list):
        return [_drop_delete_keys(v) for v in value]
    return value


def _holds_delete_key(value):
    if isinstance(value, dict):
        return DELETE_KEY in value or any(_holds_delete_key(v) for v in value.values())
    return isinstance(value, list) and any(_holds_delete_key(v) for v in value)


def load_yaml_with_base(path, _seen=()):
    """Load ``path``; its ``_BASE_`` (a path or list of paths, relative to it) goes first."""
    path = os.path.abspath(path)
    if path in _seen:
        raise ConfigError(f'{path}: _BASE_ includes itself in a cycle')
    data = _read_yaml(path)
    bases = data.pop(BASE_KEY, None)
    scepter_bases = [data.pop(key) for key in SCEPTER_BASE_KEYS if key in data]
    if bases is None and not scepter_bases:
        return data if _seen else _drop_delete_keys(data)
    bases = [bases] if isinstance(bases, str) else [] if bases is None else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases + scepter_bases):
        raise ConfigError(f'{path}: {BASE_KEY} must be a file path or a list of them, got {bases or scepter_bases!r}')
    bases = bases + scepter_bases
    merged = {}
    for base in bases:
        base_path = os.path.join(os.path.dirname(path), base)
        if not os.path.isfile(base_path):
            raise ConfigError(
                f'{path}: its {BASE_KEY} {base!r} is not a file ({base_path}); a base path is relative'
                ' to the file that names it'
            )
        merged = merge_dicts(merged, load_yaml_with_base(base_path, _seen + (path,)))
    merged = merge_dicts(merged, data)
    return merged if _seen else _drop_delete_keys(merged)


# -- command-line overrides -----------------------------------------------------------------
def parse_override(text):
    """``'A.B.0.C=value'`` -> (['A', 'B', 0, 'C'], parsed YAML value, append); ``A.B+=value`` appends a value
    and extends by a list, as Python's ``+=`` does."""
    if '=' not in text:
        raise ConfigError(f"override '{text}' has no '='; write KEY.PATH=VALUE")
    key, raw = text.split('=', 1)
    if key != key.strip():  # ('A.B = 1' written as one word: the key would be 'A.B ')
        raise ConfigError(f"override '{text}': no spaces around '='; write {key.strip()}={raw.strip()}")
    append = key.endswith('+')
    key = key[:-1] if append else key
    if not key or any(not part for part in key.split('.')):
        raise ConfigError(f"override '{text}' has an empty key part; write KEY.PATH=VALUE")
    parts = [int(p) if p.isdigit() else p for p in key.split('.')]
    try:
        value = load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"override '{text}': the value is not valid YAML; quote it") from None
    return parts, value, append


def value_text(value: object) -> str:
    """The override text (one line) that an override reads back as ``value``."""
    text = dump_yaml(value, default_flow_style=True, width=1 << 20).strip()
    return text.removesuffix('...').strip()


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    """Set each ``A.B.C=value`` in ``cfg`` (a Config), creating missing mapping keys.

    A key written here that no component declares is reported when the component is
    built, with the closest declared keys.
    """
    for text in overrides:
        parts, value, append = parse_override(text)
        if parts[0] not in ROOT_KEYS and parts[0] not in cfg:
            raise ConfigError(f"override '{text}': unknown top-level key {parts[0]}{suggest(parts[0], ROOT_KEYS)}")
        if DELETE_KEY in parts or _holds_delete_key(value):
            _refuse_delete_key(text, parts)
        node = cfg
        for i, part in enumerate(parts[:-1]):
            node = _step(node, part, parts[: i + 1], text)
        last, dotted = parts[-1], '.'.join(map(str, parts))
        if append:
            target = node[last] if isinstance(node, list) and isinstance(last, int) and last < len(node) else None
            if isinstance(node, Config):
                target = node.get(last)
            if isinstance(node, Config) and last not in node:  # its declared default is not known here
                whole = value_text(value if isinstance(value, list) else [value])
                raise ConfigError(
                    f"override '{text}': the file does not write {dotted}, so += has no list to append to (a declared"
                    f' default is not known here); set it whole: {dotted}={whole}'
                )
            if not isinstance(target, list):
                raise ConfigError(f"override '{text}': += appends to a list, and {dotted} is not one")
            if isinstance(value, list):  # a list extends, as Python's += does
                target.extend(value)
            else:
                target.append(value)
            cfg[parts[0]] = _plain(cfg[parts[0]])  # a Config again, so later overrides may reach into the new item
            continue
        if isinstance(node, list):
            if not isinstance(last, int) or last >= len(node):
                raise ConfigError(f"override '{text}': index {last} is outside the list of {len(node)}")
        elif not isinstance(node, Config):
            raise ConfigError(f"override '{text}': {'.'.join(map(str, parts[:-1]))} is a value, not a mapping")
        node[last] = value
    # re-wrap the whole tree so values placed into lists become Configs with their paths
    for key in list(cfg.keys()):
        cfg[key] = _plain(cfg[key])
    return cfg


def _refuse_delete_key(text, parts):
    """``_delete_`` in an override: it belongs to a file's mapping merged over its _BASE_'s; a mapping given on the
    command line already replaces the one it names whole, so there it would be a key of the config."""
    if DELETE_KEY in parts:
        whole = '.'.join(map(str, parts[: parts.index(DELETE_KEY)]))
        raise ConfigError(
            f"override '{text}': {DELETE_KEY} is for a YAML file with {BASE_KEY} (its mapping then replaces the"
            f' inherited one); on the command line give the mapping whole, which replaces it: {whole}={{...}}'
        )
    raise ConfigError(
        f"override '{text}': a mapping given on the command line already replaces {'.'.join(map(str, parts))} whole;"
        f' leave out {DELETE_KEY}, which is for a YAML file with {BASE_KEY} (to replace an inherited mapping instead'
        ' of merging into it)'
    )


def _step(node, part, so_far, text):
    """Walk one part of an override path; a missing or empty mapping key becomes {}."""
    where = '.'.join(str(p) for p in so_far)
    if isinstance(node, list):
        if not isinstance(part, int) or part >= len(node):
            raise ConfigError(f"override '{text}': {where} is not an index of a list of {len(node)}")
        return node[part]
    if not isinstance(node, Config):
        raise ConfigError(f"override '{text}': {where} is inside a value that is not a mapping")
    if node.get(part) is None:
        node[part] = {}
    return node[part]


# -- references: ${A.B.0.C} ----------------------------------------------------------------------
NESTED_REFERENCE = re.compile(r'\$\{[^}]*\$\{')  # a '${' opened before the previous one closed


def _place(parts):
    """``('SOLVER', 'TRAIN_HOOKS', 1)`` -> ``SOLVER.TRAIN_HOOKS[1]``, the way errors name a place."""
    place = ''
    for part in parts:
        place = _child_path(place, part)
    return place


def resolve_references(cfg: Config) -> Config:
    """Replace each ``${A.B.C}`` in the string values of ``cfg`` (a root Config) by the value there.

    A string that is one reference takes the referenced value as it is (a number stays a
    number); a reference inside a longer string is put in as text.  References may chain;
    a cycle (a value referring to itself or to a mapping or list holding it), a nested
    reference (``${A.${B}}``) or a path that leads nowhere is a ConfigError naming the places.
    References read what the files and overrides write: a key left to its declared
    default is not there yet.  The root keeps what each place wrote (``Config.reference_of``).
    """
    tree = cfg.to_dict()
    written = {}

    def lookup(path, chain):
        """The resolved value at reference ``path``; ``chain`` holds the places being resolved (tuples of keys)."""
        node, parts = tree, ()
        for part in path.split('.'):
            key = int(part) if part.isdigit() and isinstance(node, list) else part
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                raise ConfigError(
                    f'${{{path}}} (in {_place(chain[-1])}): the config has no {path}; references read what the'
                    ' files and overrides write, not the declared defaults: write the key there, or fix the reference'
                ) from None
            parts += (key,)
        if any(place[: len(parts)] == parts for place in chain):  # itself, or a mapping or list holding it
            cycle = ' -> '.join(_place(place) for place in [*chain, parts])
            raise ConfigError(f'${{{path}}}: the references form a cycle ({cycle})')
        return resolve(node, [*chain, parts])

    def resolve(value, chain):
        """``value`` with its references resolved; it sits at ``chain[-1]``, reached through the rest of ``chain``."""
        if isinstance(value, dict):
            return {k: resolve(v, [*chain[:-1], chain[-1] + (k,)]) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v, [*chain[:-1], chain[-1] + (i,)]) for i, v in enumerate(value)]
        if not isinstance(value, str) or '${' not in value:
            return value
        if NESTED_REFERENCE.search(value):
            raise ConfigError(
                f'{_place(chain[-1])}: {value!r} nests a reference inside another; nested references are not'
                ' supported: write the inner path out'
            )
        written[_place(chain[-1])] = value.strip()
        whole = REFERENCE.fullmatch(value.strip())
        if whole:
            return lookup(whole.group(1).strip(), chain)
        return REFERENCE.sub(lambda m: str(lookup(m.group(1).strip(), chain)), value)

    for key, value in {key: resolve(tree[key], [(key,)]) for key in tree}.items():
        cfg[key] = value
    object.__setattr__(cfg, '_references', written)
    return cfg
