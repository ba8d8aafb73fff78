"""Point sets for physics-informed training: collocation points drawn from a box, and a regular grid.

``CollocationPoints`` items are ``{'x': coordinates [dim], 'on_boundary': bool}``: the
interior points first, then the boundary points.  The draw is a pure function of
``SEED`` and the resample round (``pass // RESAMPLE_EVERY``), never of random state used
elsewhere, so a resumed run sees exactly the points the interrupted one saw.  Coordinates
are stored in torch's default dtype at the time of the draw (float64 when the run sets it).
Full-batch training is ``BATCH_SIZE`` = ``NUM_INTERIOR + NUM_BOUNDARY``.
"""

import numpy as np
import torch

from scepter_like.data.datasets import ArrayDataset
from scepter_like.data.geometry import Box
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError

COORD_KEY = 'x'
BOUNDARY_KEY = 'on_boundary'

_BOX_PARA_DICT = {
    'LOW': {'value': [0.0, 0.0], 'description': 'lower corner: 1 number (interval), 2 (rectangle), 3 (box)'},
    'HIGH': {'value': [1.0, 1.0], 'description': 'upper corner; each coordinate above its LOW one'},
}


def _box(cfg):
    return Box(cfg.LOW, cfg.HIGH, where=cfg.path or 'data config')


def _as_default_dtype(points):
    return torch.from_numpy(points).to(torch.get_default_dtype())


@DATASETS.register_class()
class CollocationPoints(ArrayDataset):
    """``NUM_INTERIOR`` interior and ``NUM_BOUNDARY`` boundary points of the box LOW..HIGH, uniform."""

    para_dict = {
        **_BOX_PARA_DICT,
        'NUM_INTERIOR': {'value': 1000, 'description': 'points drawn inside the box', 'min': 0},
        'NUM_BOUNDARY': {
            'value': 100,
            'description': 'points drawn on its boundary (uniform over its measure)',
            'min': 0,
        },
        'SEED': {'value': 0, 'description': 'seed of the draw (independent of ENV.SEED, which seeds the network)'},
        'RESAMPLE_EVERY': {
            'value': 0,
            'description': 'draw new points every this many passes over the data (0: one draw for the whole run)',
            'min': 0,
        },
    }

    def __init__(self, cfg, logger=None):
        if cfg.NUM_INTERIOR + cfg.NUM_BOUNDARY == 0:
            raise ConfigError(f'{cfg.path_of("NUM_INTERIOR")}: no points to draw; set NUM_INTERIOR or NUM_BOUNDARY')
        self.box = _box(cfg)
        self.num_interior, self.num_boundary = cfg.NUM_INTERIOR, cfg.NUM_BOUNDARY
        self.seed, self.resample_every = cfg.SEED, cfg.RESAMPLE_EVERY
        self.round = 0
        super().__init__(self.draw(0))

    def draw(self, round_):
        """The arrays of resample round ``round_``: a pure function of (SEED, round)."""
        rng = np.random.default_rng([self.seed, round_])
        interior = self.box.sample_interior(self.num_interior, rng)
        boundary = self.box.sample_boundary(self.num_boundary, rng)
        flags = np.repeat([False, True], [self.num_interior, self.num_boundary])
        return {
            COORD_KEY: _as_default_dtype(np.concatenate([interior, boundary])),
            BOUNDARY_KEY: torch.from_numpy(flags),
        }

    def set_epoch(self, pass_index):
        """Use the points of pass ``pass_index`` (0-based): the draw of round ``pass_index // RESAMPLE_EVERY``."""
        round_ = pass_index // self.resample_every if self.resample_every else 0
        if round_ != self.round:
            self.arrays = self.draw(round_)
            self.round = round_


@DATASETS.register_class()
class GridPoints(ArrayDataset):
    """The points of a regular grid over the box LOW..HIGH, faces included: items ``{'x': coordinates}``."""

    para_dict = {
        **_BOX_PARA_DICT,
        'RESOLUTION': {'value': [101, 101], 'description': 'points per axis (at least 2 each)'},
    }

    def __init__(self, cfg, logger=None):
        box = _box(cfg)
        super().__init__({COORD_KEY: _as_default_dtype(box.grid(list(cfg.RESOLUTION), cfg.path_of('RESOLUTION')))})
