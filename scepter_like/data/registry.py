"""DATASETS: map-style datasets whose items are dicts, built as ``cls(cfg, logger=logger)``.

COLLATES: functions turning a list of such items into one batch dict, named by a data
config (e.g. graph batches whose samples differ in size).

GEOMETRIES: regions of space for physics-informed point sets (``geometry.py``), and
CONDITIONS: the boundary and initial conditions on those point sets (``conditions.py``).
"""

from scepter_like.registry import Registry

DATASETS = Registry('DATASETS')
COLLATES = Registry('COLLATES')
GEOMETRIES = Registry('GEOMETRIES')
CONDITIONS = Registry('CONDITIONS')
