"""Registry: names -> classes or functions, built from config dicts.

Each registered class declares its config keys once, in ``para_dict``
(``{KEY: {'value': default, 'description': '...'}}``, or scepter's ``[{...}]``).  That
declaration fills defaults, rejects unknown keys, checks values and renders the YAML
template.  An entry may add ``type`` (a type or a tuple of types; else the default's type
is meant), ``min`` / ``max`` (inclusive), ``above`` / ``below`` (exclusive) and
``choices``.  A class's keys are its own ``para_dict`` merged over its parents'.  A class
that declares no ``para_dict`` of its own accepts extra keys (scepter-style classes read
them with ``cfg.get``).  Registering a taken name replaces the entry with a warning, as
scepter does, so a user's ``LogHook`` overrides the built-in one.
"""

from __future__ import annotations

import inspect
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from scepter_like.config import Config, merge_dicts, value_text
from scepter_like.errors import ConfigError, RegistryError, suggest

NAME_KEY = 'NAME'
BUILT_FROM = '_scepter_built_from'  # what a built object is called in errors: 'NAME (config path)'
_log = logging.getLogger(__name__)


def qualname(obj):
    return f'{getattr(obj, "__module__", "?")}.{getattr(obj, "__qualname__", repr(obj))}'


def normalize_para(para, owner='a class'):
    """A ``para_dict`` as ``{KEY: spec}``: the dict form as is, scepter's ``[{...}]`` merged.

    An entry that is not a mapping with ``value`` (scepter writes ``'MODEL': {}`` or
    ``'TRAIN_HOOKS': []`` for keys without a default) declares the key with a null default.
    """
    if para is None:
        return {}
    if isinstance(para, (list, tuple)):
        merged = {}
        for part in para:
            if not isinstance(part, dict):
                raise RegistryError(
                    f'{owner}.para_dict: a list form holds mappings of KEY: {{value, description}}, got {part!r}'
                )
            merged.update(part)
        para = merged
    if not isinstance(para, dict):
        raise RegistryError(
            f'{owner}.para_dict: expected a mapping of KEY: {{value, description}}, got {type(para).__name__}'
        )
    return {key: spec if isinstance(spec, dict) and 'value' in spec else _keyless(spec) for key, spec in para.items()}


_SPEC_FIELDS = ('description', 'required', 'type', 'min', 'max', 'above', 'below', 'choices')


def _keyless(spec):
    """The entry of a key declared without a ``value``: a null default, its other spec fields kept."""
    fields = {k: spec[k] for k in _SPEC_FIELDS if k in spec} if isinstance(spec, dict) else {}
    if not isinstance(fields.get('description', ''), str):
        fields.pop('description')
    return {'value': None, **fields}


def declared_params(obj):
    """(merged para_dict, strict) for a registered class or function.

    ``strict`` is True when the object itself declares ``para_dict`` (either form): then
    only the declared keys are accepted.
    """
    if inspect.isclass(obj):
        merged = {}
        for klass in reversed(obj.__mro__):
            if 'para_dict' in klass.__dict__:
                merged.update(normalize_para(klass.__dict__['para_dict'], klass.__qualname__))
        return merged, 'para_dict' in obj.__dict__
    para = getattr(obj, 'para_dict', None)
    return normalize_para(para, getattr(obj, '__name__', repr(obj))), para is not None


_TYPE_NAMES = {
    bool: 'a bool',
    int: 'an int',
    float: 'a number',
    str: 'a string',
    list: 'a list',
    dict: 'a mapping',
    type(None): 'null',
}
_NUMBER_WORD = re.compile(r'^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$')


def _declared_types(spec):
    """The accepted types of an entry: its ``type`` (a type or a tuple), else its default's."""
    types = spec.get('type')
    if types is not None:
        return tuple(types) if isinstance(types, (tuple, list)) else (types,)
    default = spec.get('value')
    for kind in (bool, int, float, str):
        if isinstance(default, kind):
            return (kind,)
    if isinstance(default, (list, tuple)):
        return (list,)
    if isinstance(default, (dict, Config)):
        return (dict,)
    return ()  # a null (or unusual) default accepts anything


def _accepts(value, kind):
    if kind is dict:
        return isinstance(value, Config)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def coerce_value(value, spec, path):
    """``value`` as the entry declares it, or a one-line ConfigError naming ``path``.

    Unambiguous values become the declared type: an int where a float is declared, a
    whole float where an int is, a scalar where the default is a one-element list, null
    where the default is an empty string.
    """
    default = spec.get('value')
    types = _declared_types(spec)
    if value is None:
        if default is None or type(None) in types:
            return None
        if default == '' and str in types:
            return ''
        raise ConfigError(
            f'{path}: expected {_expected(types, default)}, got None (an empty value); give a value or leave it out'
        )
    if not types or any(_accepts(value, kind) for kind in types):
        return value
    if float in types and _accepts(value, int):
        return float(value)
    if int in types and isinstance(value, float) and value.is_integer():
        return int(value)
    if list in types and isinstance(default, (list, tuple)) and len(default) == 1 and not isinstance(value, Config):
        return [coerce_value(value, {'value': default[0]}, path)]
    hint = ''
    if list in types and not isinstance(value, (list, Config)) and not _is_array(value):
        # ``MILESTONES: 1,2`` is the string '1,2' to YAML (torch would read its characters)
        items = value.replace(',', ' ').split() if isinstance(value, str) else [value_text(value)]
        hint = f'; write a YAML list: [{", ".join(items)}]'
    elif isinstance(value, str) and (int in types or float in types) and _NUMBER_WORD.match(value.strip()):
        # a quoted YAML value, a Python str in a dict, or a YAML 1.1 loader's reading of 1e-3: one hint fits each
        word = value.strip()
        hint = (
            f'; that is a string, not a number: give the number {word} (unquoted; {yaml11_float(word)} where a'
            ' YAML 1.1 loader reads it)'
        )
    if _is_array(value) and list in types:
        hint = '; give a list of numbers (array.tolist())'
    elif _is_array(value):  # where a config keeps a file's path
        hint = '; save arrays to a file (np.savez(path, x=..., label=...)) and give its path'
    raise ConfigError(
        f'{path}: expected {_expected(types, default)}, got {_shown(value)}' + (hint or '; fix the value')
    )


def _is_array(value):
    return hasattr(value, 'shape') and hasattr(value, 'dtype')  # numpy, torch, ...: no import of either


def _shown(value):
    """``value`` as one short piece of an error line: an array by its type and shape (its repr fills a screen),
    anything else by its repr, cut to 80 characters."""
    if _is_array(value):
        return f'{type(value).__name__} of shape {tuple(value.shape)}'
    text = ' '.join(repr(value).split())
    return text if len(text) <= 80 else f'{text[:77]}...'


def yaml11_float(word):
    """``word`` (e.g. ``1e-3``) written so that YAML 1.1 reads a float: ``1.0e-3``."""
    mantissa, exponent = re.split('[eE]', word)
    if '.' not in mantissa:
        mantissa += '.0'
    if exponent[0] not in '+-':
        exponent = '+' + exponent
    return f'{mantissa}e{exponent}'


def _expected(types, default):
    names = ' or '.join(_TYPE_NAMES.get(kind, kind.__name__) for kind in types if kind is not type(None))
    return names + (f' (like {default!r})' if default is not None else '')


_BOUNDS = (
    ('min', 'at least', lambda v, limit: v < limit),
    ('above', 'above', lambda v, limit: v <= limit),
    ('max', 'at most', lambda v, limit: v > limit),
    ('below', 'below', lambda v, limit: v >= limit),
)


def check_range(value, spec, path):
    """Raise ConfigError when ``value`` (or an item of a list) breaks the entry's bounds or choices."""
    if value is None:
        return
    for item in value if isinstance(value, list) else (value,):
        choices = spec.get('choices')
        if choices is not None and item not in choices:
            listed = ', '.join(repr(c) for c in choices)
            raise ConfigError(f'{path}: must be one of {listed}, got {item!r}{suggest(item, choices)}')
        for bound, word, breaks in _BOUNDS:
            limit = spec.get(bound)
            if limit is None:
                continue
            if not isinstance(item, (int, float)) or isinstance(item, bool):
                raise ConfigError(f'{path}: expected a number {word} {limit}, got {item!r}')
            if not math.isfinite(item):  # a bounded key takes finite numbers (nan passes every comparison)
                raise ConfigError(f'{path}: must be a finite number {word} {limit}, got {item!r}')
            if breaks(item, limit):
                raise ConfigError(f'{path}: must be {word} {limit}, got {item!r}')


ALIASES = {'LR': 'LEARNING_RATE', 'BS': 'BATCH_SIZE', 'EPOCHS': 'MAX_EPOCHS'}  # the short names users type (any case)
SCEPTER_KEYS = {  # keys scepter's classes declare and this project's do not, each with what does its work here
    'TRAIN_PRECISION': "scepter's BaseSolver key (its Lightning precision); here a train hook {NAME: BackwardHook,"
    " USE_AMP: true, AMP_DTYPE: bf16 | fp16} sets mixed precision and SOLVER.DTYPE the parameters' (float32 |"
    ' float64), on Lightning too (docs/porting_from_scepter.md)',
}


def resolve_params(cfg: Any, para: Any, owner: str, strict: bool = True, skip: tuple[str, ...] = (NAME_KEY,)) -> Any:
    """Fill defaults from ``para`` into ``cfg`` in place, reject unknown keys, check values."""
    if strict:
        for key in cfg.keys():
            if key not in para and key not in skip:
                hint = (
                    (f'; {key} is {SCEPTER_KEYS[key]}' if key in SCEPTER_KEYS else '')
                    or suggest(key, para)
                    or (f'; did you mean {ALIASES[key.upper()]}?' if ALIASES.get(key.upper()) in para else '')
                )
                raise ConfigError(
                    f'{cfg.path_of(key)}: unknown key for {owner}{hint} (its keys: {", ".join(sorted(para)) or "none"})'
                )
    for key, spec in para.items():
        if key not in cfg or (cfg[key] is None and spec.get('required')):  # a null is no value for it
            if spec.get('required'):
                raise ConfigError(
                    f'{cfg.path_of(key)}: {owner} needs this key; {spec.get("description", "")}'.rstrip('; ')
                )
            if spec.get('fill', True):  # 'fill': False -- accepted, left out when not written
                cfg[key] = spec.get('value')
            continue
        reference = cfg.reference_of(key)
        path = cfg.path_of(key) + (f' (written {reference})' if reference else '')
        onto_default = _onto_default(cfg[key], spec.get('value'))
        if onto_default is not cfg[key]:
            cfg[key] = onto_default
        value = coerce_value(cfg[key], spec, path)
        check_range(value, spec, path)
        if value is not cfg[key]:
            cfg[key] = value
    return cfg


def _onto_default(value, default):
    """A mapping without NAME given where the default names a component (``LOSS: {LABEL_SMOOTHING: 0.1}``, as an
    override of one key of a sub-config the file does not write makes it) is that default with its keys laid over:
    the default's NAME is kept.  A mapping with a NAME of its own is another component, taken as written."""
    if isinstance(default, dict) and NAME_KEY in default and isinstance(value, (dict, Config)):
        if NAME_KEY not in value:
            return merge_dicts(default, value.to_dict() if isinstance(value, Config) else value)
    return value


def _warn_undeclared(cfg, para, owner):
    """A class without a ``para_dict`` of its own takes any key (scepter's way: it reads them with ``cfg.get``); a
    key that no class in its line declares is named in a warning, since a misspelt one would go unread."""
    for key in cfg.keys():
        if key not in para and key != NAME_KEY:
            logging.getLogger(__name__).warning(
                f'{cfg.path_of(key)}: not a key {owner} declares, passed on as written{suggest(key, para)}'
                ' (give the class a para_dict of its own to make such a key an error)'
            )


def _check_call(obj, cfg, logger, kwargs, owner):
    """A RegistryError (one line) when ``obj`` cannot take ``(cfg, logger=..., **kwargs)``."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # no signature to read (a builtin): let the call tell
        return
    try:
        signature.bind(cfg, logger=logger, **kwargs)
    except TypeError as e:
        given = ''.join(f', {key}=...' for key in kwargs)
        where = f'{cfg.path}: ' if cfg.path else ''
        raise RegistryError(
            f'{where}{owner} cannot be built as (cfg, logger=...{given}): {e}; its signature is {signature}'
        ) from None


class Registry:
    """A named table of buildable classes and functions."""

    def __init__(self, name: str, left_out: dict[str, str] | None = None):
        """``left_out``: names scepter's registry of the same name holds and this one leaves out on purpose, each with
        what to do instead (its error says that, not a near name)."""
        self.name = name
        self._entries: dict[str, Any] = {}
        self.left_out = left_out or {}

    def __repr__(self):
        return f'Registry({self.name}, {sorted(self._entries)})'

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def name_of(self, obj):
        """The first name ``obj`` is registered under, or None."""
        return next((name for name, entry in self._entries.items() if entry is obj), None)

    def _add(self, name, obj):
        """Register ``obj`` as ``name``; a taken name is replaced with a one-line warning (scepter's rule)."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f'{self.name}: a registered name must be a non-empty string, got {name!r}')
        old = self._entries.get(name)
        if old is not None and old is not obj:
            _log.warning('%s: %r now names %s, replacing %s', self.name, name, qualname(obj), qualname(old))
        self._entries[name] = obj
        return obj

    def register_class(self, name: str | None = None) -> Callable[[type], type]:
        """Decorator: ``@R.register_class()`` or ``@R.register_class('Alias')``."""
        if inspect.isclass(name):
            raise RegistryError(
                f'{self.name}: write @{self.name}.register_class() with parentheses (for {name.__name__})'
            )

        def deco(cls):
            if not inspect.isclass(cls):
                raise RegistryError(f'{self.name}.register_class() decorates a class, got {cls!r}')
            return self._add(name or cls.__name__, cls)

        return deco

    def register_function(self, name: str | None = None, para_dict: Any = None) -> Callable[[Callable], Callable]:
        """Decorator for a builder function ``fn(cfg, logger=None, **kwargs)``."""
        if callable(name):
            raise RegistryError(f'{self.name}: write @{self.name}.register_function() with parentheses')

        def deco(fn):
            if para_dict is not None:
                fn.para_dict = para_dict
            return self._add(name or fn.__name__, fn)

        return deco

    def get(self, name: str, where: str = NAME_KEY) -> Any:
        if not isinstance(name, str):
            raise RegistryError(
                f'{where}: NAME must be a string naming an entry of {self.name}, got {name!r}'
                f' (registered: {", ".join(sorted(self._entries))})'
            )
        if name not in self._entries:
            if name in self.left_out:
                raise RegistryError(
                    f"{where}: {name!r} is scepter's and not in registry {self.name} here: {self.left_out[name]}"
                    ' (docs/porting_from_scepter.md)'
                )
            raise RegistryError(
                f'{where}: {name!r} is not in registry {self.name}{suggest(name, self._entries)}'
                f' (registered: {", ".join(sorted(self._entries))})'
            )
        return self._entries[name]

    def resolve(self, cfg, where: str | None = None):
        """Look up ``cfg.NAME`` and fill / check its keys; returns (obj, cfg as a Config).

        ``where`` names the place of ``cfg`` in the whole config for the error when it is
        not a mapping (a None or a word in a list carries no place of its own).
        """
        where = where or self.name
        if cfg is None:
            raise ConfigError(f'{where}: a mapping with NAME (a {self.name} entry) is needed, got nothing')
        if not isinstance(cfg, Config):
            if not isinstance(cfg, dict):
                raise ConfigError(f'{where}: expected a mapping with NAME (a {self.name} entry), got {cfg!r}')
            cfg = Config(cfg)
        if NAME_KEY not in cfg:
            glued = next((k for k in cfg.keys() if isinstance(k, str) and k.startswith(f'{NAME_KEY}:')), None)
            if glued is not None:  # YAML reads {NAME:X} as the one key 'NAME:X'
                raise ConfigError(
                    f'{cfg.path or self.name}: YAML read {{{glued}}} as one key {glued!r} with no value; put a space'
                    f' after the colon: {{{NAME_KEY}: {glued.split(":", 1)[1]}}}'
                )
            raise ConfigError(
                f'{cfg.path or self.name}: NAME is missing; name one of {self.name}: {", ".join(self.names())}'
            )
        obj = self.get(cfg[NAME_KEY], cfg.path_of(NAME_KEY))
        para, strict = declared_params(obj)
        owner = f'{self.name}.{cfg[NAME_KEY]}'
        if not strict:
            _warn_undeclared(cfg, para, owner)
        resolve_params(cfg, para, owner, strict)
        return obj, cfg

    def build(self, cfg: Any, logger: Any = None, *, where: str | None = None, **kwargs: Any) -> Any:
        """Build ``cfg.NAME`` as ``obj(cfg, logger=logger, **kwargs)`` with defaults filled (``where``: as resolve)."""
        obj, cfg = self.resolve(cfg, where)
        _check_call(obj, cfg, logger, kwargs, f'{self.name}.{cfg[NAME_KEY]}')
        built = obj(cfg, logger=logger, **kwargs)
        _label(built, f'{cfg[NAME_KEY]} ({cfg.path})' if cfg.path else str(cfg[NAME_KEY]))
        return built

    def get_config_template(self, name: str) -> str:
        """YAML text with NAME and every declared key, its default and description."""
        para, _ = declared_params(self.get(name))
        return render_config_template(name, para)


def _label(built, text):
    """Let errors name ``built`` by its config (``utils.blame``), whether or not it keeps its ``cfg``.

    An object that takes no attribute (slots, a number) stays unnamed.
    """
    try:
        setattr(built, BUILT_FROM, text)
    except (AttributeError, TypeError):
        pass


def render_config_template(name, para):
    """YAML text ``NAME: name`` and ``KEY: default  # description [rule]`` per key of ``para``.

    A required key shows its default (often null) and ``(required)`` before its description;
    a declared type, range or choices follow it in brackets, e.g. ``[int, at least 1]``.
    """
    lines = [f'NAME: {name}']
    for key, spec in para.items():
        value = spec.get('value')
        value = list(value) if isinstance(value, tuple) else value  # scepter writes some defaults as tuples
        text = value_text(value)
        desc = ' '.join(str(spec.get('description', '')).split())
        if spec.get('required'):
            desc = f'(required) {desc}'.strip()
        rule = value_rule(spec)
        if rule:
            desc = f'{desc} [{rule}]'.strip()
        lines.append(f'{key}: {text}' + (f'  # {desc}' if desc else ''))
    return '\n'.join(lines) + '\n'


def value_rule(spec):
    """The declared type, bounds and choices of an entry in words (``''`` when it declares none)."""
    parts = []
    if spec.get('type') is not None:
        parts.append(' or '.join('null' if kind is type(None) else kind.__name__ for kind in _declared_types(spec)))
    parts += [f'{word} {spec[bound]}' for bound, word, _ in _BOUNDS if spec.get(bound) is not None]
    if spec.get('choices') is not None:
        parts.append('one of: ' + ', '.join(str(c) for c in spec['choices']))
    return ', '.join(parts)
