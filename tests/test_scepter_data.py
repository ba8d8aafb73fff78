"""scepter's data idioms after the rename: its SAMPLER key (LoopSampler), loops of a solver's own that draw from
``.dataloader`` (and resume mid-pass), and ``DATASETS.build`` of a data config with loader keys."""

import numpy as np
import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.config import Config
from scepter_like.data.sampler import SAMPLERS, LoopSampler, ShardedSampler
from scepter_like.errors import ConfigError, RegistryError
from scepter_like.solver import SOLVERS, BaseSolver


class NextDrawingSolver(BaseSolver):
    """diffusion_solver.py's run_train after the rename: ``next(data_iter)`` MAX_STEPS times, the stage methods
    called with hook lists; it keeps the first feature of each sample it trained on."""

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger=logger)
        self.seen = []

    def run_train(self):
        self.train_mode()
        self.before_all_iter(self.hooks_dict[self._mode])
        data_iter = iter(self.datas[self._mode].dataloader)
        for step in range(self.max_steps):
            batch_data = next(data_iter)
            self.before_iter(self.hooks_dict[self._mode])
            self.seen.append(batch_data['img'][:, 0].clone())
            results = self.run_step_train(batch_data, step, step=self.total_iter, rank=0)
            self._iter_outputs[self._mode] = self._reduce_scalar(results)
            self.after_iter(self.hooks_dict[self._mode])
        self.after_all_iter(self.hooks_dict[self._mode])


@pytest.fixture
def next_solver():
    SOLVERS.register_class('DataNextDrawingSolver')(NextDrawingSolver)
    yield 'DataNextDrawingSolver'
    SOLVERS._entries.pop('DataNextDrawingSolver', None)


def _passes(npz, *epochs, seed=0):
    """The first features of the train samples of passes ``epochs``, in the loader's order (one rank)."""
    x = torch.from_numpy(np.load(npz)['x'][:, 0])
    sampler = ShardedSampler(len(x), seed=seed)
    return torch.cat([x[sampler._indices(epoch)] for epoch in epochs])


def _weights(solver):
    return {k: v.clone() for k, v in solver.unwrapped_model.state_dict().items()}


def test_loop_sampler_makes_the_train_dataloader_endless_pass_after_pass(tmp_path, next_solver):
    """scepter's SAMPLER: {NAME: LoopSampler} (the data config's key) makes ``.dataloader`` endless: 14 steps of
    a 6-batch pass train on passes 0, 1 and the start of 2, each shuffled anew.  Without it, next() past the pass
    is one error line naming the key (was: 'NpzDataset raised StopIteration')."""
    npz = write_blobs(tmp_path / 'b.npz')  # 96 samples: 6 batches of 16
    cfg = blob_solver_cfg(npz, tmp_path / 'loop', NAME=next_solver, MAX_STEPS=14, MAX_EPOCHS=-1, EVAL_DATA=None)
    cfg['SOLVER']['TRAIN_DATA']['SAMPLER'] = {'NAME': 'LoopSampler'}
    solver = build_solver(cfg)
    assert isinstance(solver.datas['train'].sampler, LoopSampler)
    solver.solve()
    assert solver.progress.total_iter == 14
    assert torch.equal(torch.cat(solver.seen), _passes(npz, 0, 1, 2)[: 14 * 16])
    solver.close()

    del cfg['SOLVER']['TRAIN_DATA']['SAMPLER']
    cfg['SOLVER']['WORK_DIR'] = str(tmp_path / 'one_pass')
    solver = build_solver(cfg)
    with pytest.raises(ConfigError) as error:
        solver.solve()
    assert str(error.value) == (
        "SOLVER.TRAIN_DATA: NextDrawingSolver.run_train asked for a batch after its loader's pass ended (6 batches"
        ' on this rank; step 7 was next); a loop drawing its steps with next() needs an endless loader: add SAMPLER:'
        " {NAME: LoopSampler} to SOLVER.TRAIN_DATA (scepter's key; passes then follow one another)"
    )
    solver.close()


def test_a_loop_sampler_shards_each_pass_over_the_ranks():
    """Each rank's endless stream is its shard of pass after pass: together the ranks cover each pass once."""
    streams = []
    for rank in range(2):
        sampler = LoopSampler(10, num_replicas=2, rank=rank, seed=3)
        sampler.open_pass()
        stream = iter(sampler)
        streams.append([next(stream) for _ in range(15)])  # 3 passes of 5 on each rank
    for epoch in range(3):
        both = streams[0][epoch * 5 : epoch * 5 + 5] + streams[1][epoch * 5 : epoch * 5 + 5]
        assert sorted(both) == list(range(10))
        assert both != [*range(10)]  # shuffled
    assert streams[0][:5] != streams[0][5:10]  # each pass anew


@pytest.mark.parametrize('sampler, steps, at', [(None, 6, 4), ('LoopSampler', 14, 8)])
def test_an_own_loop_resumed_mid_pass_goes_on_at_the_next_batch(tmp_path, next_solver, sampler, steps, at):
    """A run of the own loop resumed from its step-``at`` checkpoint trains on the batches the uninterrupted run
    trained on next, and ends with its weights (was: the pass from its batch 0 again; the weights differed)."""
    npz = write_blobs(tmp_path / 'b.npz')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'INTERVAL': 0, 'STEP_INTERVAL': at}]

    def cfg(name, **keys):
        c = blob_solver_cfg(npz, tmp_path / name, hooks, NAME=next_solver, MAX_STEPS=steps, EVAL_DATA=None, **keys)
        if sampler:
            c['SOLVER']['TRAIN_DATA']['SAMPLER'] = {'NAME': sampler}
        return c

    whole = build_solver(cfg('whole', MAX_EPOCHS=-1))
    whole.solve()
    whole.close()
    resumed = build_solver(cfg('resumed', MAX_EPOCHS=-1, RESUME_FROM=str(tmp_path / 'whole' / 'checkpoints')))
    resumed.solve()  # without LoopSampler its next() after the pass ends the loop: the steps are done
    assert resumed.progress.total_iter == steps
    assert torch.equal(torch.cat(resumed.seen), torch.cat(whole.seen[at:]))
    for key, value in _weights(whole).items():
        assert torch.equal(value, _weights(resumed)[key]), key
    resumed.close()


def test_samplers_are_scepters_registry_path_and_other_names_say_what_to_do(tmp_path):
    """``from scepter_like.data.sampler import SAMPLERS`` (and ``.registry``) as in scepter; a sampler of scepter's
    this project leaves out, a key LoopSampler lacks, or LoopSampler on eval data is one error line."""
    from scepter_like.config_check import checked_config
    from scepter_like.data.sampler.registry import SAMPLERS as registry_path

    assert registry_path is SAMPLERS and SAMPLERS.names() == ['LoopSampler']
    npz = write_blobs(tmp_path / 'b.npz')
    cases = [
        ('TRAIN_DATA', {'NAME': 'MultiLevelBatchSampler'}, RegistryError, "'MultiLevelBatchSampler' is scepter's"),
        ('TRAIN_DATA', {'NAME': 'LopSampler'}, RegistryError, 'did you mean LoopSampler'),
        ('TRAIN_DATA', {'NAME': 'LoopSampler', 'SEED': 3}, ConfigError, 'SAMPLER.SEED: unknown key'),
        ('EVAL_DATA', {'NAME': 'LoopSampler'}, ConfigError, 'makes the train loader endless, and eval passes end'),
    ]
    for key, sampler, kind, words in cases:
        cfg = blob_solver_cfg(npz, tmp_path / 'w')
        cfg['SOLVER'][key]['SAMPLER'] = sampler
        with pytest.raises(kind, match=words) as error:
            checked_config(Config(cfg))  # --print-config checks it before any run
        assert str(error.value).startswith(f'SOLVER.{key}.SAMPLER')


@pytest.fixture
def numbers_dataset():
    """A dataset written scepter's way (BaseDataset, MODE): item i is ``{'x': i}``, N of them."""
    from scepter_like.data.dataset import DATASETS, BaseDataset

    @DATASETS.register_class('DataNumbers')
    class Numbers(BaseDataset):
        para_dict = {'N': {'value': 40, 'description': 'items'}}
        para_dict.update(BaseDataset.para_dict)

        def __len__(self):
            return self.cfg.N

        def _get(self, index):
            return {'x': index}

    yield 'DataNumbers'
    DATASETS._entries.pop('DataNumbers', None)


def test_datasets_build_of_a_data_config_with_loader_keys_gives_scepters_data_object(numbers_dataset):
    """scepter's ``DATASETS.build(cfg.DATA)`` (a hook building its own data, ValLossHook's) of a config with loader
    keys gives the DataBundle: ``.dataloader``, ``.dataset``, ``.batch_size`` (was: 'BATCH_SIZE: unknown key');
    train data where it sits at SOLVER.TRAIN_DATA or writes MODE: train, else eval (in order, no padding)."""
    from scepter_like.data.dataset import DATASETS
    from scepter_like.data.loader import DataBundle

    data = {'NAME': numbers_dataset, 'MODE': 'eval', 'BATCH_SIZE': 16}
    hook_data = DATASETS.build(Config({'DATA': data}, path='SOLVER.TRAIN_HOOKS[2]').DATA)
    assert isinstance(hook_data, DataBundle) and hook_data.batch_size == 16 and len(hook_data.dataset) == 40
    assert [b['x'].tolist() for b in hook_data.dataloader] == [[*range(16)], [*range(16, 32)], [*range(32, 40)]]
    at_train_data = Config({'TRAIN_DATA': {**data, 'MODE': 'eval'}}, path='SOLVER').TRAIN_DATA
    for cfg in (at_train_data, {**data, 'MODE': 'train'}):
        assert DATASETS.build(cfg).sampler.shuffle  # train data: shuffled each pass
    assert not isinstance(DATASETS.build({'NAME': numbers_dataset}), DataBundle)  # no loader key: the dataset


def test_a_construct_data_of_scepters_builds_through_datasets_and_trains(tmp_path, next_solver):
    """diffusion_solver.py's construct_data (``DATASETS.build(self.cfg.TRAIN_DATA)``, ``len(.dataloader)``) builds
    the data; the run trains as with the solver's own construct_data (was: an error; then no step at all)."""
    from scepter_like.data.dataset import DATASETS

    @SOLVERS.register_class('DataOwnConstructSolver')
    class OwnConstruct(NextDrawingSolver):
        def construct_data(self):  # scepter's, after the rename
            if self.cfg.have('TRAIN_DATA'):
                train_data = DATASETS.build(self.cfg.TRAIN_DATA, logger=self.logger)
                self.datas['train'] = train_data
                self._epoch_max_iter['train'] = len(train_data.dataloader)
                self._mode_set.add('train')

    npz = write_blobs(tmp_path / 'b.npz')
    try:
        weights = []
        for name in (next_solver, 'DataOwnConstructSolver'):
            cfg = blob_solver_cfg(npz, tmp_path / name, NAME=name, MAX_STEPS=9, MAX_EPOCHS=-1, EVAL_DATA=None)
            cfg['SOLVER']['TRAIN_DATA']['SAMPLER'] = {'NAME': 'LoopSampler'}
            solver = build_solver(cfg)
            solver.solve()
            assert solver.progress.total_iter == 9
            weights.append(_weights(solver))
            solver.close()
        for key, value in weights[0].items():
            assert torch.equal(value, weights[1][key]), key
    finally:
        SOLVERS._entries.pop('DataOwnConstructSolver', None)


def test_a_dataset_without_a_para_dict_keeps_its_own_sample_keys():
    """A dataset that declares no keys of its own takes any (scepter's way): its NUM_SAMPLES or SAMPLES does not
    read as a misspelt SAMPLER (a loader key now), while BATCH_SZE still reads as BATCH_SIZE."""
    from scepter_like.data.dataset import DATASETS
    from scepter_like.data.loader import check_data_keys

    @DATASETS.register_class('DataLenient')
    class Lenient(torch.utils.data.Dataset):
        def __init__(self, cfg, logger=None):
            self.cfg = cfg

    try:
        check_data_keys(Config({'NAME': 'DataLenient', 'NUM_SAMPLES': 10, 'SAMPLES': 3}, path='SOLVER.TRAIN_DATA'))
        with pytest.raises(ConfigError, match='BATCH_SZE: unknown key.*did you mean BATCH_SIZE'):
            check_data_keys(Config({'NAME': 'DataLenient', 'BATCH_SZE': 8}, path='SOLVER.TRAIN_DATA'))
    finally:
        DATASETS._entries.pop('DataLenient', None)
