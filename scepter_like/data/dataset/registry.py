"""``scepter.modules.data.dataset.registry`` maps here: the one DATASETS registry.

scepter's ``DATASETS.build`` returns a loader object (``.dataloader``); here it returns
the dataset, and the solver builds the loader from the data config's loader keys.
"""

from scepter_like.data.registry import DATASETS

__all__ = ['DATASETS']
