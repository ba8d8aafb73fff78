"""DATASETS: map-style datasets whose items are dicts, built as ``cls(cfg, logger=logger)``."""

from scepter_like.registry import Registry

DATASETS = Registry('DATASETS')
