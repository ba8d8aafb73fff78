"""Registry: names -> classes or functions, built from config dicts.

Each registered class declares its config keys once, in ``para_dict``
(``{KEY: {'value': default, 'description': '...'}}``).  That declaration fills defaults,
rejects unknown keys, type-checks values and renders the YAML template.  A class's keys
are its own ``para_dict`` merged over its parents'.  A class that declares no
``para_dict`` of its own accepts extra keys (scepter-style classes read them with
``cfg.get``).
"""

import inspect

import yaml

from scepter_like.config import Config
from scepter_like.errors import ConfigError, RegistryError, suggest

NAME_KEY = 'NAME'


def declared_params(obj):
    """(merged para_dict, strict) for a registered class or function.

    ``strict`` is True when the object itself declares ``para_dict``: then only those
    keys are accepted.
    """
    if inspect.isclass(obj):
        merged = {}
        for klass in reversed(obj.__mro__):
            merged.update(klass.__dict__.get('para_dict', {}) or {})
        return merged, 'para_dict' in obj.__dict__
    para = getattr(obj, 'para_dict', None)
    return dict(para or {}), para is not None


_TYPE_NAMES = {bool: 'a bool', int: 'an int', float: 'a number', str: 'a string', list: 'a list', dict: 'a mapping'}


def _type_ok(value, default, types=None):
    """Whether ``value`` may replace ``default`` (a None default accepts anything but ``types``)."""
    if value is None:  # an empty override (KEY=) or null: only where the default is None too
        return default is None
    if types:
        return isinstance(value, types) and (bool in types or not isinstance(value, bool))
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, (list, tuple)):
        return isinstance(value, list)
    if isinstance(default, (dict, Config)):
        return isinstance(value, Config)
    return True


def resolve_params(cfg, para, owner, strict=True, skip=(NAME_KEY,)):
    """Fill defaults from ``para`` into ``cfg`` in place, reject unknown keys, check types."""
    if strict:
        for key in cfg.keys():
            if key not in para and key not in skip:
                raise ConfigError(
                    f'{cfg.path_of(key)}: unknown key for {owner}{suggest(key, para)}'
                    f' (its keys: {", ".join(sorted(para)) or "none"})'
                )
    for key, spec in para.items():
        default = spec.get('value')
        if key not in cfg or (cfg[key] is None and spec.get('required')):  # a null is no value for it
            if spec.get('required'):
                raise ConfigError(
                    f'{cfg.path_of(key)}: {owner} needs this key; {spec.get("description", "")}'.rstrip('; ')
                )
            cfg[key] = default
            continue
        value = cfg[key]
        if not _type_ok(value, default, spec.get('type')):
            kind = spec['type'][-1] if spec.get('type') else type(default)
            expected = _TYPE_NAMES.get(kind, kind.__name__)
            raise ConfigError(
                f'{cfg.path_of(key)}: expected {expected}'
                + (f' (like {default!r})' if default is not None else '')
                + f', got {value!r}; fix the value'
            )
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            cfg[key] = float(value)
    return cfg


class Registry:
    """A named table of buildable classes and functions."""

    def __init__(self, name):
        self.name = name
        self._entries = {}

    def __repr__(self):
        return f'Registry({self.name}, {sorted(self._entries)})'

    def __contains__(self, name):
        return name in self._entries

    def __len__(self):
        return len(self._entries)

    def names(self):
        return sorted(self._entries)

    def _add(self, name, obj):
        old = self._entries.get(name)
        if old is not None and old is not obj:
            raise RegistryError(f'{self.name}: the name {name!r} is already registered to {old!r}; pick another name')
        self._entries[name] = obj
        return obj

    def register_class(self, name=None):
        """Decorator: ``@R.register_class()`` or ``@R.register_class('Alias')``."""

        def deco(cls):
            if not inspect.isclass(cls):
                raise TypeError(f'{self.name}.register_class expects a class, got {cls!r}')
            return self._add(name or cls.__name__, cls)

        return deco

    def register_function(self, name=None, para_dict=None):
        """Decorator for a builder function ``fn(cfg, logger=None, **kwargs)``."""

        def deco(fn):
            if para_dict is not None:
                fn.para_dict = para_dict
            return self._add(name or fn.__name__, fn)

        return deco

    def get(self, name, where=NAME_KEY):
        if name not in self._entries:
            raise RegistryError(
                f'{where}: {name!r} is not in registry {self.name}{suggest(name, self._entries)}'
                f' (registered: {", ".join(sorted(self._entries))})'
            )
        return self._entries[name]

    def resolve(self, cfg):
        """Look up ``cfg.NAME`` and fill / check its keys; returns (obj, cfg as a Config)."""
        if cfg is None:
            raise ConfigError(f'{self.name}: a config with a NAME is needed, got nothing')
        if not isinstance(cfg, Config):
            if not isinstance(cfg, dict):
                raise ConfigError(f'{self.name}: expected a mapping with NAME, got {cfg!r}')
            cfg = Config(cfg)
        if NAME_KEY not in cfg:
            raise ConfigError(
                f'{cfg.path or self.name}: NAME is missing; name one of {self.name}: {", ".join(self.names())}'
            )
        obj = self.get(cfg[NAME_KEY], cfg.path_of(NAME_KEY))
        para, strict = declared_params(obj)
        resolve_params(cfg, para, f'{self.name}.{cfg[NAME_KEY]}', strict)
        return obj, cfg

    def build(self, cfg, logger=None, **kwargs):
        """Build ``cfg.NAME`` as ``obj(cfg, logger=logger, **kwargs)`` with defaults filled."""
        obj, cfg = self.resolve(cfg)
        return obj(cfg, logger=logger, **kwargs)

    def get_config_template(self, name):
        """YAML text with NAME and every declared key, its default and description."""
        para, _ = declared_params(self.get(name))
        return render_config_template(name, para)


def render_config_template(name, para):
    """YAML text ``NAME: name`` and ``KEY: default  # description`` per key of ``para``.

    A required key shows its default (often null) and ``(required)`` before its description.
    """
    lines = [f'NAME: {name}']
    for key, spec in para.items():
        value = spec.get('value')
        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip()
        if text.endswith('\n...'):
            text = text[:-4].strip()
        text = text.removesuffix('...').strip()
        desc = ' '.join(str(spec.get('description', '')).split())
        if spec.get('required'):
            desc = f'(required) {desc}'.strip()
        lines.append(f'{key}: {text}' + (f'  # {desc}' if desc else ''))
    return '\n'.join(lines) + '\n'
