"""scepter's key transforms: values to tensors or arrays, keeping some keys, renaming keys."""

import numpy as np
import torch

from scepter_like.errors import ConfigError, DataError
from scepter_like.transform.backends import describe_value, is_pil_image
from scepter_like.transform.keys import key_list, key_pairs, missing_key, read_key, transform_name
from scepter_like.transform.registry import TRANSFORMS


def to_tensor(value, where):
    """A tensor, array, number or list of numbers as a tensor (a number as a 0-d tensor, so labels batch to [B])."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    if isinstance(value, (int, float, bool, np.generic, list, tuple)):
        return torch.tensor(value)
    hint = '; use ImageToTensor for images' if is_pil_image(value) else ''
    raise DataError(f'{where}: cannot make a tensor of {describe_value(value)}{hint}')


def to_numpy(value):
    """A tensor as its array; a PIL image, number or list as an array."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


@TRANSFORMS.register_class()
class ToTensor:
    """Each key of KEYS as a tensor (arrays share memory; a Python or numpy number becomes a 0-d tensor)."""

    para_dict = {
        'KEYS': {'value': [], 'required': True, 'type': (str, list), 'description': 'the sample keys to convert'}
    }

    def __init__(self, cfg, logger=None):
        self.where = transform_name(cfg, self)
        self.keys = key_list(cfg, 'KEYS')

    def __call__(self, item):
        for key in self.keys:
            item[key] = to_tensor(read_key(item, key, self.where, 'KEYS'), f'{self.where} {key!r}')
        return item


@TRANSFORMS.register_class()
class ToNumpy:
    para_dict = {
        'INPUT_KEY': {'value': 'img', 'type': (str, list), 'description': 'sample key (or list of keys) to convert'},
        'OUTPUT_KEY': {'value': 'img', 'type': (str, list), 'description': 'key of the array, one per INPUT_KEY'},
    }

    def __init__(self, cfg, logger=None):
        self.where = transform_name(cfg, self)
        self.pairs = key_pairs(cfg)

    def __call__(self, item):
        for source, target in self.pairs:
            item[target] = to_numpy(read_key(item, source, self.where))
        return item


@TRANSFORMS.register_class()
class Select:
    """A new sample of the KEYS only (and of ``meta``, META_KEYS of it, when they are given)."""

    para_dict = {
        'KEYS': {'value': [], 'required': True, 'type': (str, list), 'description': 'the sample keys to keep'},
        'META_KEYS': {'value': [], 'description': "keys of the sample's meta dict to keep in meta"},
    }

    def __init__(self, cfg, logger=None):
        self.where = transform_name(cfg, self)
        self.keys = key_list(cfg, 'KEYS')
        self.meta_keys = list(cfg.META_KEYS)

    def __call__(self, item):
        try:
            data = {key: item[key] for key in self.keys}
        except KeyError as e:
            raise missing_key(item, e.args[0], self.where, 'KEYS') from None
        if self.meta_keys and 'meta' in item:
            meta = item['meta']
            data['meta'] = {key: read_key(meta, key, f'{self.where} meta', 'META_KEYS') for key in self.meta_keys}
        return data


@TRANSFORMS.register_class()
class Rename:
    """INPUT_KEY[i] becomes OUTPUT_KEY[i]; the other keys stay as they are."""

    para_dict = {
        'INPUT_KEY': {'value': [], 'required': True, 'type': (str, list), 'description': 'the keys to rename'},
        'OUTPUT_KEY': {
            'value': [],
            'required': True,
            'type': (str, list),
            'description': 'their new names, in the same order',
        },
    }

    def __init__(self, cfg, logger=None):
        self.where = transform_name(cfg, self)
        self.pairs = key_pairs(cfg)
        targets = [target for _, target in self.pairs]
        if len(set(targets)) != len(targets):
            raise ConfigError(f'{cfg.path_of("OUTPUT_KEY")}: a name given twice, {targets}; give each key its own')

    def __call__(self, item):
        renamed = {target: read_key(item, source, self.where) for source, target in self.pairs}
        sources = {source for source, _ in self.pairs}
        renamed.update((key, value) for key, value in item.items() if key not in sources and key not in renamed)
        return renamed
