"""``scepter.modules.data.dataset`` maps here: DATASETS and scepter's ``BaseDataset``."""

from scepter_like.data.dataset.base_dataset import BaseDataset
from scepter_like.data.dataset.registry import DATASETS

__all__ = ['DATASETS', 'BaseDataset']
