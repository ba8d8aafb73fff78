"""Reading a transform's keys from a sample: a key the sample lacks is one error naming the keys it has."""

from scepter_like.errors import ConfigError, DataError


def read_key(item, key, where, role='INPUT_KEY', fix=None):
    """``item[key]``; when absent, ``missing_key``'s error."""
    try:
        return item[key]
    except KeyError:
        raise missing_key(item, key, where, role, fix) from None


def missing_key(item, key, where, role='INPUT_KEY', fix=None):
    """The DataError for a sample without ``key``, naming the transform (``where``), the key and the keys there are."""
    fix = fix or f'set {role} to one of them, or put the transform that makes {key!r} before this one'
    return DataError(f'{where}: the sample has no {key!r} (its {role}); its keys: {", ".join(map(str, item))}; {fix}')


def key_list(cfg, key):
    """``cfg[key]`` as a list of keys: scepter writes one key as a string and several as a list."""
    value = cfg[key]
    keys = [value] if isinstance(value, str) else list(value)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ConfigError(f'{cfg.path_of(key)}: expected a key name or a list of them, got {value!r}')
    return keys


def key_pairs(cfg):
    """``[(input key, output key), ...]`` from INPUT_KEY and OUTPUT_KEY (paired in order; equally many)."""
    inputs, outputs = key_list(cfg, 'INPUT_KEY'), key_list(cfg, 'OUTPUT_KEY')
    if len(inputs) != len(outputs):
        raise ConfigError(
            f'{cfg.path_of("OUTPUT_KEY")}: {len(outputs)} output key(s) for {len(inputs)} input key(s)'
            f' ({inputs}); give one OUTPUT_KEY per INPUT_KEY'
        )
    return list(zip(inputs, outputs))


def transform_name(cfg, transform):
    """How errors name a transform: its config path and class, e.g. ``SOLVER.TRAIN_DATA.TRANSFORMS[2] (Normalize)``."""
    name = type(transform).__name__
    return f'{cfg.path} ({name})' if cfg.path else f'TRANSFORMS {name}'
