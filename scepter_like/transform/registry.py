"""TRANSFORMS: the per-sample transforms of a data config's ``TRANSFORMS`` list, and ``build_pipeline``.

Importing this module imports its package first, which registers the built-in transforms.

A transform is built as ``cls(cfg, logger=logger)`` and called on one sample, a dict:
``transform(item) -> item``.  A transform whose ``RANDOM`` is true is called
``transform(item, rng)`` instead, with the sample's own ``random.Random``, so that its draws
depend on the sample alone (``scepter_like/data/transformed.py``).
"""

from scepter_like.errors import ConfigError
from scepter_like.registry import Registry

_FLEXIBLE = "it sizes each sample from meta['image_size'] (scepter's aspect-ratio buckets); use Resize then CenterCrop"
_VIDEO = 'this project decodes no video'
SCEPTER_ONLY = {  # the transforms scepter registers that are left out (docs/porting_from_scepter.md, Transforms)
    'FlexibleResize': _FLEXIBLE,
    'FlexibleCenterCrop': _FLEXIBLE,
    'FlexibleCropXL': _FLEXIBLE,
    'TensorToGPU': 'the solver moves whole batches to the device; leave it out',
    'RenameMeta': "do it in the dataset's _get, or register a transform",
    'TemplateStr': "do it in the dataset's _get, or register a transform",
    'ColorJitterGeneral': 'register a RANDOM transform (docs/image_data.md)',
    **dict.fromkeys(
        [
            'RandomResizedCropVideo',
            'CenterCropVideo',
            'RandomHorizontalFlipVideo',
            'NormalizeVideo',
            'VideoToTensor',
            'AutoResizedCropVideo',
            'ResizeVideo',
            'LoadVideoFromFile',
            'LoadVideoFromFrameList',
            'DecodeVideoToTensor',
        ],
        _VIDEO,
    ),
}
TRANSFORMS = Registry('TRANSFORMS', left_out=SCEPTER_ONLY)


def build_pipeline(pipeline, registry=TRANSFORMS, logger=None, where='TRANSFORMS'):
    """scepter's builder: a list of transform configs as one ``Compose``, one config as its transform.

    An empty list or None gives ``Identity``.  ``where`` names the list in errors about an
    entry that is not a mapping (a mapping's own config path names it otherwise).
    """
    from scepter_like.config import Config

    if pipeline is None or (isinstance(pipeline, list) and not pipeline):
        return registry.build({'NAME': 'Identity'}, logger=logger)
    if isinstance(pipeline, (dict, Config)):
        return registry.build(pipeline, logger=logger)
    if not isinstance(pipeline, list):
        raise ConfigError(f'{where}: expected a list of transform configs, got {type(pipeline).__name__}')
    transforms = [build_transform(entry, registry, logger, f'{where}[{i}]') for i, entry in enumerate(pipeline)]
    return registry.get('Compose').of(transforms)


def build_transform(cfg, registry=TRANSFORMS, logger=None, where='TRANSFORMS[0]'):
    """The transform of one config (a mapping with NAME); anything else is a ConfigError naming ``where``."""
    _check_mapping(cfg, where)
    return registry.build(cfg, logger=logger)


def resolve_pipeline(pipeline, where='TRANSFORMS'):
    """Check each config of the list ``pipeline`` and fill its defaults in place, building nothing (--print-config)."""
    for i, entry in enumerate(pipeline):
        _check_mapping(entry, f'{where}[{i}]')
        TRANSFORMS.resolve(entry)


def _check_mapping(cfg, where):
    from scepter_like.config import Config

    if not isinstance(cfg, (dict, Config)):
        raise ConfigError(f'{where}: a transform is a mapping with NAME, got {cfg!r}')
