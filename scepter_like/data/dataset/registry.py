"""``scepter.modules.data.dataset.registry`` maps here: the one DATASETS registry.

As scepter's, ``DATASETS.build`` of a data config with loader keys (``BATCH_SIZE``, ...)
returns an object with ``.dataloader`` and ``.dataset``: the loader's DataBundle; of a
dataset's own keys alone it returns the dataset.
"""

from scepter_like.data.registry import DATASETS

__all__ = ['DATASETS']
