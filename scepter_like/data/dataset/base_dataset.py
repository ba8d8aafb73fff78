"""scepter's dataset base: ``__getitem__`` returns ``self._get(index)``, a dict of one sample."""

import torch

__all__ = ['BaseDataset']


class BaseDataset(torch.utils.data.Dataset):
    """Subclass it, declare ``para_dict`` and write ``__len__`` and ``_get(index) -> dict``.

    scepter's ``TRANSFORMS`` belong to the data config here: the loader runs them on what
    ``__getitem__`` returns, each sample with its own generator (``data/transformed.py``).
    ``self.pipeline`` is therefore the identity, so a ported ``__getitem__`` that ends in
    ``return self.pipeline(item)`` keeps working (the pipeline then runs once, after it).
    """

    para_dict = {
        'MODE': {
            'value': 'train',
            'description': 'which split: train, eval or test',
            'choices': ['train', 'eval', 'test'],
        },
        'FILE_SYSTEM': {'value': None, 'description': 'accepted for scepter configs; files are always local'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__()
        self.cfg = cfg
        self.mode = cfg.MODE
        self.logger = logger

    def __getitem__(self, index):
        return self._get(index)

    def _get(self, index):
        raise NotImplementedError(f'{type(self).__name__} must define _get(index) -> dict of one sample')

    @staticmethod
    def pipeline(item):
        """The identity: the data config's TRANSFORMS run in the loader, after ``__getitem__``."""
        return item

    def worker_init_fn(self, worker_id, num_workers=1):
        """scepter's per-worker hook; worker seeding is done by the DataLoader here."""
        self.worker_id = worker_id

    def __repr__(self):
        return f'{type(self).__name__}: mode={self.mode}, len={len(self)}'
