"""Compose: a TRANSFORMS list applied in order to one sample (what a data config's ``TRANSFORMS`` becomes)."""

from scepter_like.errors import DataError
from scepter_like.transform.registry import TRANSFORMS, build_transform


@TRANSFORMS.register_class()
class Compose:
    """Applies ``TRANSFORMS`` in order; ``RANDOM`` transforms get the sample's generator, the others the item only."""

    para_dict = {'TRANSFORMS': {'value': [], 'description': 'transform configs, applied in order'}}

    def __init__(self, cfg, logger=None):
        self._set([build_transform(t, logger=logger, where=cfg.path_of('TRANSFORMS')) for t in cfg.TRANSFORMS])

    @classmethod
    def of(cls, transforms):
        """A Compose of transforms already built."""
        compose = cls.__new__(cls)
        compose._set(transforms)
        return compose

    def _set(self, transforms):
        self.transforms = list(transforms)
        self._steps = [(t, bool(getattr(t, 'RANDOM', False))) for t in self.transforms]
        self.RANDOM = any(random for _, random in self._steps)  # takes a generator to pass on, when any one draws

    def __call__(self, item, rng=None):
        for transform, random in self._steps:
            item = transform(item, rng) if random else transform(item)
            if not isinstance(item, dict):
                raise DataError(
                    f'TRANSFORMS {type(transform).__name__} returned {type(item).__name__}; a transform returns'
                    ' the sample dict it was given'
                )
        return item

    def __repr__(self):
        return f'Compose({", ".join(type(t).__name__ for t in self.transforms)})'
