"""The search space file: which config paths to tune, over which values, for which objective.

A SPACE.yaml holds settings (single words) and parameters (dotted config paths)::

    METRIC: accuracy          # the eval metric to optimise
    DIRECTION: maximize       # maximize | minimize
    FROM: last                # last | best evaluation of a trial, or test (the final test pass)
    SAMPLER: tpe              # tpe | random | grid
    SEED: 0
    PRUNER: median            # median | none
    SOLVER.OPTIMIZER.LEARNING_RATE: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
    SOLVER.MODEL.BACKBONE.HIDDEN_DIMS: {type: categorical, choices: [[64, 64], [256, 256]]}

Every path is checked against the config before anything runs: it must exist there or be
a key the component at its parent declares (so ``SOLVER.MAX_EPOCHS`` works when the file
does not write it). This module reads no optuna: a trial is anything with optuna's
``suggest_float`` / ``suggest_int`` / ``suggest_categorical``.
"""

import json
import math
import os

from scepter_like.config import Config, load_yaml_with_base, value_text
from scepter_like.errors import ConfigError, suggest

SETTINGS = {
    'METRIC': 'accuracy',
    'DIRECTION': 'maximize',
    'FROM': 'last',
    'SAMPLER': 'tpe',
    'SEED': 0,
    'PRUNER': 'median',
    'PRUNE_STARTUP_TRIALS': 5,
    'PRUNE_WARMUP_EPOCHS': 0,
    'TPE_STARTUP_TRIALS': 10,
}
CHOICES = {
    'DIRECTION': ('maximize', 'minimize'),
    'FROM': ('last', 'best', 'test'),
    'SAMPLER': ('tpe', 'random', 'grid'),
    'PRUNER': ('median', 'none'),
}
_TYPES = {'float': ('low', 'high', 'log', 'step'), 'int': ('low', 'high', 'log', 'step'), 'categorical': ('choices',)}


class Param:
    """One tuned config path and its distribution."""

    def __init__(self, path, spec, where):
        if not isinstance(spec, dict):
            raise ConfigError(f'{where}: expected a mapping like {{type: float, low: 0.001, high: 0.1}}, got {spec!r}')
        kind = spec.get('type')
        if kind not in _TYPES:
            raise ConfigError(f'{where}.type: {kind!r} is not one of {", ".join(_TYPES)}{suggest(kind, _TYPES)}')
        for key in spec:
            if key != 'type' and key not in _TYPES[kind]:
                raise ConfigError(
                    f'{where}: unknown option {key!r} for type {kind}{suggest(key, _TYPES[kind])}'
                    f' (its options: type, {", ".join(_TYPES[kind])})'
                )
        self.path, self.kind = path, kind
        if kind == 'categorical':
            choices = spec.get('choices')
            if not isinstance(choices, list) or not choices:
                raise ConfigError(f'{where}.choices: give a non-empty list of values')
            self.choices = choices
            # optuna stores scalar choices only: a list or mapping choice travels as its YAML text
            self.encoded = [
                c if c is None or isinstance(c, (bool, int, float, str)) else value_text(c) for c in choices
            ]
            return
        number = float if kind == 'float' else int
        for key in ('low', 'high'):
            value = spec.get(key)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or (kind == 'int' and value != int(value)):
                raise ConfigError(f'{where}.{key}: expected {"an int" if kind == "int" else "a number"}, got {value!r}')
        self.low, self.high = number(spec['low']), number(spec['high'])
        self.log = bool(spec.get('log', False))
        self.step = spec.get('step')
        if self.low > self.high or (self.low == self.high and kind == 'float'):
            raise ConfigError(f'{where}: low {self.low} must be below high {self.high}')
        if self.log and self.low <= 0:
            raise ConfigError(f'{where}: log: true needs low > 0, got {self.low}')
        if self.step is not None and (
            self.log
            or not isinstance(self.step, (int, float))
            or self.step <= 0
            or (kind == 'int' and self.step != int(self.step))
        ):
            raise ConfigError(f'{where}.step: a positive {kind}, and not together with log: true; got {self.step!r}')
        if self.step is not None:
            self.step = number(self.step)

    def suggest(self, trial):
        """This parameter's value for ``trial`` (decoded back to the config's value)."""
        if self.kind == 'categorical':
            return self.choices[self.encoded.index(trial.suggest_categorical(self.path, self.encoded))]
        method = trial.suggest_float if self.kind == 'float' else trial.suggest_int
        kwargs = {'log': self.log} if self.step is None else {'step': self.step}
        return method(self.path, self.low, self.high, **kwargs)

    def grid_values(self):
        """The finite set a grid search walks (categorical, or int / float with a step)."""
        if self.kind == 'categorical':
            return list(self.encoded)
        step = self.step if self.step is not None else (1 if self.kind == 'int' else None)
        if step is None:
            raise ConfigError(f'{self.path}: SAMPLER grid needs a finite set; give it a step or make it categorical')
        count = int(math.floor((self.high - self.low) / step + 1e-9)) + 1
        return [self.low + i * step if self.kind == 'int' else round(self.low + i * step, 12) for i in range(count)]

    def describe(self):
        if self.kind == 'categorical':
            return {'type': 'categorical', 'choices': self.choices}
        out = {'type': self.kind, 'low': self.low, 'high': self.high, 'log': self.log}
        return out if self.step is None else {**out, 'step': self.step}


class SearchSpace:
    """Settings and parameters of one SPACE.yaml (``SearchSpace.load(path, cfg)``)."""

    def __init__(self, data, where='space'):
        if not isinstance(data, dict):
            raise ConfigError(f'{where}: expected a mapping of settings and config paths')
        self.settings = dict(SETTINGS)
        self.params = []
        for key, value in data.items():
            key = str(key)
            if '.' in key:
                self.params.append(Param(key, value, f'{where}: {key}'))
                continue
            if key not in SETTINGS:
                raise ConfigError(
                    f'{where}: unknown setting {key}{suggest(key, SETTINGS)} (settings: {", ".join(SETTINGS)};'
                    ' parameters are dotted config paths like SOLVER.OPTIMIZER.LEARNING_RATE)'
                )
            if key in CHOICES and value not in CHOICES[key]:
                raise ConfigError(f'{where}: {key}: {value!r} is not one of {", ".join(CHOICES[key])}')
            if key not in CHOICES and key != 'METRIC' and (not isinstance(value, int) or value < 0):
                raise ConfigError(f'{where}: {key}: expected a whole number >= 0, got {value!r}')
            self.settings[key] = value
        if not self.params:
            raise ConfigError(f'{where}: no parameters; add a config path, e.g. SOLVER.OPTIMIZER.LEARNING_RATE')
        if not isinstance(self.settings['METRIC'], str) or not self.settings['METRIC']:
            raise ConfigError(f'{where}: METRIC: name the eval metric to optimise, e.g. accuracy')

    @classmethod
    def load(cls, path, cfg):
        """Read ``path`` and check every parameter path against ``cfg`` (a loaded Config)."""
        if not path:
            raise ConfigError('--space FILE is required; give the YAML file of the search space')
        space = cls(load_yaml_with_base(path), where=os.path.basename(path))
        for param in space.params:
            check_path(cfg, param.path, f'{os.path.basename(path)}: {param.path}')
        return space

    def suggest(self, trial):
        """``{path: value}`` for ``trial``, in the order of the file."""
        return {p.path: p.suggest(trial) for p in self.params}

    def decode(self, params):
        """``{path: config value}`` from a trial's stored params (list choices are stored as text)."""
        out = {}
        for p in self.params:
            value = params[p.path]
            out[p.path] = p.choices[p.encoded.index(value)] if p.kind == 'categorical' else value
        return out

    def override_words(self, values):
        """``['A.B=value', ...]`` command-line overrides setting ``values``."""
        return [f'{path}={value_text(value)}' for path, value in values.items()]

    def grid(self):
        return {p.path: p.grid_values() for p in self.params}

    def fingerprint(self):
        """A canonical text of the whole space: a study continues only with the space it began with."""
        return json.dumps({'settings': self.settings, 'params': {p.path: p.describe() for p in self.params}})


def _declared_keys(node):
    """(keys the component at ``node`` declares, strict) or (None, False) when unknown."""
    from scepter_like.data.loader import LOADER_PARA_DICT
    from scepter_like.registry import declared_params
    from scepter_like.solver.environment import ENV_PARA_DICT
    from scepter_like.utils.registries import all_registries

    if node.path == 'ENV':
        return ENV_PARA_DICT, True
    name = node.get('NAME')
    holders = [reg for reg in all_registries().values() if isinstance(name, str) and name in reg]
    if len(holders) != 1:
        return None, False
    para, strict = declared_params(holders[0].get(name))
    if holders[0].name == 'DATASETS':
        para = {**para, **LOADER_PARA_DICT}
    return para, strict


def check_path(cfg, path, where):
    """Raise ConfigError unless ``path`` names a value the config has or its component declares."""
    parts = [int(p) if p.isdigit() else p for p in path.split('.')]
    node = cfg
    for i, part in enumerate(parts):
        so_far = '.'.join(map(str, parts[: i + 1]))
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not isinstance(part, int) or part >= len(node):
                raise ConfigError(f'{where}: {so_far} is not an index of a list of {len(node)}')
            node = node[part]
            continue
        if not isinstance(node, Config):
            raise ConfigError(f'{where}: {".".join(map(str, parts[:i]))} is a value, not a mapping')
        if part in node or (i == 0 and part == 'ENV'):  # ENV may be absent: its keys all have defaults
            node = node[part] if part in node else Config({}, path='ENV')
            continue
        declared, strict = _declared_keys(node) if i else ({}, True)
        if declared is not None and part in declared and last:
            return
        if declared is not None and not strict and last:
            return
        known = sorted(set(node.keys()) | set(declared or {}))
        raise ConfigError(
            f'{where}: unknown key {so_far}{suggest(part, known)}'
            + (f' (keys there: {", ".join(map(str, known))})' if known else '')
        )
