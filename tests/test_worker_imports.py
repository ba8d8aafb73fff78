"""DataLoader workers of a spawned start method import the IMPORTS files their dataset's classes come from."""

import multiprocessing
import sys

import pytest
import torch

from scepter_like.config import Config
from scepter_like.data.loader import build_data
from scepter_like.data.registry import DATASETS
from scepter_like.utils.distributed import DistInfo
from scepter_like.utils.imports import FILE_MODULE_PREFIX, import_user_modules

DATA_FILE = """
import torch
from scepter_like.data.registry import DATASETS


@DATASETS.register_class()
class SpawnedWorkerData(torch.utils.data.Dataset):
    def __init__(self, cfg, logger=None):
        pass

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {'x': torch.tensor([float(i)])}
"""


@pytest.fixture
def spawn_start_method():
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method('spawn', force=True)  # macOS' and Windows' default
    yield
    multiprocessing.set_start_method(before, force=True)


@pytest.mark.slow  # starts a spawned worker (a fresh interpreter importing torch)
def test_a_dataset_class_of_an_imports_file_loads_in_spawned_workers(tmp_path, monkeypatch, spawn_start_method):
    # the workers died of "No module named '_scepter_user_my_data'" unpickling the dataset
    path = tmp_path / 'my_data.py'
    path.write_text(DATA_FILE)
    monkeypatch.setitem(sys.modules, FILE_MODULE_PREFIX + 'my_data', None)  # (taken out again after the test)
    monkeypatch.setitem(DATASETS._entries, 'SpawnedWorkerData', None)
    import_user_modules([str(path)])
    cfg = Config({'NAME': 'SpawnedWorkerData', 'BATCH_SIZE': 4, 'NUM_WORKERS': 1, 'SHUFFLE': False})
    bundle = build_data(cfg, 'train', DistInfo(rank=0, world_size=1), seed=0)
    (batch,) = list(bundle.iterate())
    assert torch.equal(batch['x'].flatten(), torch.arange(4.0))
