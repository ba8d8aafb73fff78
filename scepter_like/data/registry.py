"""DATASETS: map-style datasets whose items are dicts, built as ``cls(cfg, logger=logger)`` (a data config with
loader keys builds the loader's DataBundle).

COLLATES: functions turning a list of such items into one batch dict, named by a data
config (e.g. graph batches whose samples differ in size).

GEOMETRIES: regions of space for physics-informed point sets (``geometry.py``), and
CONDITIONS: the boundary and initial conditions on those point sets (``conditions.py``).
"""

from scepter_like.registry import Registry


class DataRegistry(Registry):
    """DATASETS builds a dataset from its own keys; from a data config holding loader keys too (scepter's
    ``DATASETS.build(cfg.TRAIN_DATA)``), the loader's DataBundle, with ``.dataloader`` and ``.dataset``, as
    scepter's builds its data object.  data/loader.py hands over its builder (``bundle_with``) when it is imported,
    as components register themselves: this registry does not import the loader that imports it."""

    def __init__(self, name):
        super().__init__(name)
        self._bundle = (frozenset(), None)  # (the loader keys, the builder of a config holding one)

    def bundle_with(self, loader_keys, builder):
        self._bundle = (frozenset(loader_keys), builder)

    def build(self, cfg, logger=None, *, where=None, **kwargs):
        keys, builder = self._bundle
        if builder is not None and hasattr(cfg, 'keys') and not kwargs and not keys.isdisjoint(cfg.keys()):
            return builder(cfg, logger)
        return super().build(cfg, logger, where=where, **kwargs)


DATASETS = DataRegistry('DATASETS')
COLLATES = Registry('COLLATES')
GEOMETRIES = Registry('GEOMETRIES')
CONDITIONS = Registry('CONDITIONS')
