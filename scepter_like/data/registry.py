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
    scepter's builds its data object (``loader.build_bundle``)."""

    def build(self, cfg, logger=None, *, where=None, **kwargs):
        from scepter_like.data.loader import LOADER_PARA_DICT, build_bundle  # the loader builds its datasets here

        if hasattr(cfg, 'keys') and not kwargs and any(key in LOADER_PARA_DICT for key in cfg.keys()):
            return build_bundle(cfg, logger)
        return super().build(cfg, logger, where=where, **kwargs)


DATASETS = DataRegistry('DATASETS')
COLLATES = Registry('COLLATES')
GEOMETRIES = Registry('GEOMETRIES')
CONDITIONS = Registry('CONDITIONS')
