"""scepter's dataset base: ``__getitem__`` returns ``self._get(index)``, a dict of one sample."""

import torch

from scepter_like.errors import ConfigError

__all__ = ['BaseDataset']


class BaseDataset(torch.utils.data.Dataset):
    """Subclass it, declare ``para_dict`` and write ``__len__`` and ``_get(index) -> dict``.

    scepter's ``TRANSFORMS`` pipelines have no registry here: a non-empty list is a
    ConfigError; do the preprocessing in ``_get``.
    """

    para_dict = {
        'MODE': {
            'value': 'train',
            'description': 'which split: train, eval or test',
            'choices': ['train', 'eval', 'test'],
        },
        'FILE_SYSTEM': {'value': None, 'description': 'accepted for scepter configs; files are always local'},
        'TRANSFORMS': {'value': [], 'description': 'scepter transform pipelines: not supported, keep it empty'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__()
        if cfg.TRANSFORMS:
            raise ConfigError(
                f'{cfg.path_of("TRANSFORMS")}: scepter transform pipelines are not supported;'
                " preprocess in your dataset's _get and leave TRANSFORMS out"
            )
        self.cfg = cfg
        self.mode = cfg.MODE
        self.logger = logger

    def __getitem__(self, index):
        return self._get(index)

    def _get(self, index):
        raise NotImplementedError(f'{type(self).__name__} must define _get(index) -> dict of one sample')

    def worker_init_fn(self, worker_id, num_workers=1):
        """scepter's per-worker hook; worker seeding is done by the DataLoader here."""
        self.worker_id = worker_id

    def __repr__(self):
        return f'{type(self).__name__}: mode={self.mode}, len={len(self)}'
