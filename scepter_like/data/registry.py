"""DATASETS: map-style datasets whose items are dicts, built as ``cls(cfg, logger=logger)``.

COLLATES: functions turning a list of such items into one batch dict, named by a data
config (e.g. graph batches whose samples differ in size).
"""

from scepter_like.registry import Registry

DATASETS = Registry('DATASETS')
COLLATES = Registry('COLLATES')
