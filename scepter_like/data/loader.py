"""DataLoader construction from a data config (TRAIN_DATA / EVAL_DATA / TEST_DATA).

A data config names a DATASETS entry and holds the loader keys below beside the
dataset's own keys, ``TRANSFORMS`` among them: the per-sample pipeline, run on each item
in the loader's workers (``transformed.py``).  The solver owns the sampler so that it can
shard, shuffle per epoch and resume mid-epoch; scepter's ``SAMPLER`` key picks how
``.dataloader`` iterates it (``SAMPLER: {NAME: LoopSampler}``: without end).
"""

import logging
import math

import torch
from torch.utils.data import DataLoader

from scepter_like.config import Config
from scepter_like.data.collate import DictCollate
from scepter_like.data.datasets import ArrayDataset
from scepter_like.data.domain import check_coordinates_agree
from scepter_like.data.registry import DATASETS
from scepter_like.data.sampler import SAMPLERS, ShardedSampler
from scepter_like.data.transformed import TransformedDataset
from scepter_like.data.worker_start import start_worker, worker_context
from scepter_like.errors import ConfigError, DataError, DistributedError, class_of, suggest
from scepter_like.registry import NAME_KEY, declared_params, resolve_params
from scepter_like.transform.registry import build_pipeline
from scepter_like.utils.distributed import current_dist_info
from scepter_like.utils.file_system import check_local_file_system
from scepter_like.utils.seed import run_seed

DATA_KEYS = {'train': 'TRAIN_DATA', 'eval': 'EVAL_DATA', 'test': 'TEST_DATA'}  # SOLVER's data config of each mode

LOADER_PARA_DICT = {
    'BATCH_SIZE': {'value': 32, 'description': 'samples per batch on each rank', 'min': 1},
    'NUM_WORKERS': {'value': 0, 'description': 'DataLoader worker processes (0: load in the main process)', 'min': 0},
    'PIN_MEMORY': {'value': False, 'description': 'pin batches in page-locked memory (CUDA only)'},
    'SHUFFLE': {'value': True, 'description': 'shuffle each pass (train data); eval / test data keep their order'},
    'DROP_LAST': {
        'value': False,
        'description': 'drop the last incomplete batch (train data; eval / test data keep every sample)',
    },
    'TRANSFORMS': {
        'value': [],
        'description': "scepter's per-sample pipeline: a list of TRANSFORMS configs, applied to each item in order",
    },
    'SAMPLER': {
        'value': None,
        'description': "scepter's sampler config: {NAME: LoopSampler} makes the train .dataloader endless (pass after"
        ' pass, for loops that draw next() MAX_STEPS times); null: one pass an iteration',
    },
}


class DataBundle:
    """A dataset with its sampler and DataLoader, and the per-epoch iteration plan."""

    def __init__(self, dataset, loader, sampler, batch_size, seed, classes=None, columns=None):
        self.dataset = dataset
        self.loader = loader
        self.sampler = sampler
        self.batch_size = batch_size
        self.seed = seed
        self.classes = classes  # class names in label order, where the dataset numbers them by name
        self.columns = columns  # batch key -> the table columns behind it, where the dataset reads a table

    def set_epoch(self, pass_index):
        """Shuffle for pass ``pass_index``, and let a dataset that redraws its samples (``set_epoch``) do so."""
        self.sampler.set_epoch(pass_index)
        if hasattr(self.dataset, 'set_epoch'):
            self.dataset.set_epoch(pass_index)

    @property
    def dataloader(self):
        """scepter's name: the torch DataLoader; iterating it yields this rank's current pass, the first time after
        ``resume_at`` from there, and with SAMPLER LoopSampler the passes after it too, without end."""
        self.sampler.open_pass()
        return self.loader

    def resume_at(self, batch):
        """The next iteration of ``dataloader`` starts at batch ``batch`` of the current pass (a resumed epoch goes on
        there; beyond the pass for a LoopSampler)."""
        self.sampler.resume_at(batch * self.batch_size)

    def num_batches(self):
        """Batches in a whole pass on this rank (equal on every rank in train mode)."""
        n = self.sampler.rank_length()
        return n // self.batch_size if self.loader.drop_last else math.ceil(n / self.batch_size)

    def batch_samples(self, index):
        """The samples in batch ``index`` of a pass on this rank: BATCH_SIZE, but fewer in a short last batch."""
        return max(0, min(self.batch_size, self.sampler.rank_length() - index * self.batch_size))

    def iterate(self, start_batch=0, stop_batch=None):
        """An iterator over batches ``[start_batch, stop_batch)`` of the current pass."""
        stop = None if stop_batch is None else stop_batch * self.batch_size
        self.sampler.set_window(start_batch * self.batch_size, stop)
        self.loader.generator.manual_seed(self.seed * 100003 + self.sampler.epoch)
        if self._direct:
            return self._direct_batches(self.sampler.window_indices().contiguous())
        return iter(self.loader)

    @property
    def _direct(self):
        """Whether batches can come straight from ArrayDataset's batched ``__getitems__``."""
        loader = self.loader
        return (
            loader.num_workers == 0
            and not loader.pin_memory
            and getattr(type(self.dataset), '__getitems__', None) is ArrayDataset.__getitems__
        )

    def _direct_batches(self, indices):
        """The batches the DataLoader would yield in this process, without its per-batch machinery.

        Each batch is one slice of the index tensor and one ``index_select`` per field, as
        a hand-written loop does (the DataLoader would turn the indices into Python ints and
        back into a tensor for every batch); the loader's ``DictCollate`` passes such a batch through as is.
        """
        n, size = len(indices), self.batch_size
        end = n - n % size if self.loader.drop_last else n
        take = self.dataset.take
        for begin in range(0, end, size):
            yield take(indices[begin : begin + size])


def refuse_empty(dataset, source, mode, ds_cfg):
    """A DataError when the split holds no samples: an empty eval / test pass would score 0 (an error of 0, a
    "new best"), and an empty train split would read as too many processes."""
    if len(dataset) > 0:
        return
    path = f' (PATH: {ds_cfg.PATH})' if ds_cfg.get('PATH') else ''
    fix = 'give it samples' if mode == 'train' else f'give it samples, or leave {ds_cfg.path} out'
    raise DataError(f'{source}{path}: the {mode} split has no samples; {fix}')


def _dataset_name(dataset, cfg):
    return f'{cfg.path}: DATASETS.{cfg.get("NAME")} ({class_of(dataset)})'


def resolve_loader_keys(cfg, mode):
    """The loader keys of ``cfg`` (a data config) with defaults filled; eval / test data never shuffle.

    Evaluation keeps the data's order, so the recorded config (and ``--print-config``) says
    ``SHUFFLE: false`` there whatever the file wrote.  A dataset whose items are whole batches
    (``ITEM_IS_BATCH``, e.g. PointSets) is loaded one item a step, in its own order: BATCH_SIZE
    1, SHUFFLE false (a config that writes otherwise is an error).
    """
    written = {k: cfg[k] for k in LOADER_PARA_DICT if k in cfg}
    loader_cfg = Config(dict(written), path=cfg.path)
    resolve_params(loader_cfg, LOADER_PARA_DICT, 'the data loader', strict=False)
    if mode != 'train':
        loader_cfg['SHUFFLE'] = False
    name = cfg.get('NAME')
    if isinstance(name, str) and name in DATASETS and getattr(DATASETS.get(name), 'ITEM_IS_BATCH', False):
        for key, fixed in (('BATCH_SIZE', 1), ('SHUFFLE', False)):
            if written.get(key, fixed) != fixed:
                raise ConfigError(
                    f'{cfg.path_of(key)}: {name} makes the batch of each step itself (each point set has its own'
                    f' BATCH_SIZE); leave {key} out'
                )
            loader_cfg[key] = fixed
    return loader_cfg


def sampler_class(loader_cfg, mode):
    """The sampler class of a data config's loader keys: ShardedSampler, or the SAMPLERS entry SAMPLER names
    (LoopSampler only for train data: an eval / test pass has to end)."""
    if loader_cfg.SAMPLER is None:
        return ShardedSampler
    where = loader_cfg.path_of('SAMPLER')
    cls, sampler_cfg = SAMPLERS.resolve(loader_cfg.SAMPLER, where)
    if cls.loops and mode != 'train':
        raise ConfigError(
            f'{where}: {sampler_cfg.NAME} makes the train loader endless, and {mode} passes end; leave SAMPLER out here'
        )
    return cls


def check_data_keys(ds_cfg):
    """Every key of a data config (its loader keys taken out) is the dataset's; a ConfigError with the closest
    declared words, loader keys included, otherwise.

    A dataset that declares no ``para_dict`` takes any key (scepter's way), but not one that
    reads as a misspelled loader key (``BATCH_SZE``); SAMPLER is not among those, since a
    dataset's own ``SAMPLES`` or ``NUM_SAMPLES`` would read as it.
    """
    name = ds_cfg.get(NAME_KEY)
    if not isinstance(name, str) or name not in DATASETS:
        return  # the registry says what is wrong with the NAME
    para, strict = declared_params(DATASETS.get(name))
    known = sorted({*para, *LOADER_PARA_DICT})
    for key in ds_cfg.keys():
        if key != NAME_KEY and key not in para and (strict or suggest(key, set(LOADER_PARA_DICT) - {'SAMPLER'})):
            raise ConfigError(
                f'{ds_cfg.path_of(key)}: unknown key for DATASETS.{name} and the data loader{suggest(key, known)}'
                f' (their keys: {", ".join(known)})'
            )


def check_splits_agree(bundles, where, recorded=None, logger=None):
    """A ConfigError when the data number their classes, or place their table columns, otherwise than the model
    was trained on (``bundles``: mode -> DataBundle; ``where``: mode -> config path).  The classes and columns
    are those ``recorded``, a pair (the names a weights file records: its description's ``classes`` and
    ``columns``, ``BaseModel.class_names`` / ``input_columns``; that file), where the file records them, else the
    train data's.  A split lacking a class numbers the others anew by name; a file whose header orders the
    columns otherwise (or COLUMNS listing them in another order) stacks the features in that order: either way
    the model would be measured on inputs or labels it was not trained on.  Labels given as numbers (a list
    file) beside classes given by name cannot be checked: ``logger`` says so, with the order they must follow.
    Point data (PointSets, GridPoints) have the train data's coordinates (``check_coordinates_agree``)."""
    train = bundles.get('train')
    named = {mode: b.dataset.coordinate_names for mode, b in bundles.items() if hasattr(b.dataset, 'coordinate_names')}
    check_coordinates_agree(named, where)
    names, source = recorded if recorded is not None else ({}, None)
    classes, whose_classes = _names_or_train(names.get('classes'), source, train.classes if train else None)
    columns, whose_columns = _names_or_train(names.get('columns'), source, train.columns if train else None)
    for mode, bundle in bundles.items():
        if classes is not None and bundle.classes is None and mode != 'train' and logger is not None:
            numbered = ', '.join(f'{i}: {name}' for i, name in enumerate(classes))
            logger.warning(
                f'{where[mode]}: its labels are class numbers, which cannot be checked against the class names the'
                f' model learns; they must follow that order ({numbered})'
            )
        if None not in (classes, bundle.classes) and list(bundle.classes) != list(classes):
            unknown = [name for name in bundle.classes if name not in classes]
            fix = (  # CLASSES cannot number a class the model never learnt
                f'it has {unknown}, which the model does not know: leave those out, or train on them too'
                if unknown
                else f'give it CLASSES: {list(classes)}'
            )
            raise ConfigError(
                f'{where[mode]}: its classes {list(bundle.classes)} are numbered otherwise than {whose_classes}'
                f' {list(classes)} (a split lacking a class, or another order); {fix}'
            )
        for key, names_of_key in (bundle.columns or {}).items():
            trained = (columns or {}).get(key)
            if trained is not None and names_of_key != trained:
                configs = 'both data configs' if names.get('columns') is None else 'it'
                raise ConfigError(
                    f'{where[mode]}: its {key!r} is read from the columns {names_of_key}, otherwise than'
                    f' {whose_columns} {trained} (features are matched by place); give {configs} COLUMNS:'
                    f' {{{key}: {trained}}}'
                )


def _names_or_train(recorded, source, trained):
    """``(recorded, "those SOURCE was trained on")`` where a weights file records the names, else the train
    data's ``(trained, "the train data's")``."""
    return (trained, "the train data's") if recorded is None else (recorded, f'those {source} was trained on')


def warn_scepter_train_order(cfg, mode, logger):
    """scepter shuffles a dataset whose MODE is train and never reads SHUFFLE (its DATASETS template writes
    ``SHUFFLE: False``); here SHUFFLE decides: a ported train config that writes both is named in one line."""
    if mode == 'train' and cfg.get('MODE') == 'train' and cfg.get('SHUFFLE', True) is False:
        (logger or logging.getLogger('scepter_like')).warning(
            f'{cfg.path_of("SHUFFLE")}: false keeps the train data in order here; scepter shuffles every MODE: train'
            ' dataset whatever SHUFFLE says: leave SHUFFLE out (or true) to shuffle as scepter does'
        )


def check_data_mapping(cfg, mode):
    """A data config is a mapping: a word or a list is a ConfigError (a run's and ``--print-config``'s)."""
    if not isinstance(cfg, Config):
        raise ConfigError(
            f'SOLVER.{DATA_KEYS[mode]}: a data config is a mapping with NAME (a DATASETS entry), got {cfg!r}'
        )


def build_bundle(cfg, logger=None):
    """scepter's ``DATASETS.build(data_cfg)`` of a data config with loader keys (a ``construct_data`` of a solver's
    own, a hook building its own data): the DataBundle, with scepter's ``.dataloader`` and ``.dataset``.

    Its mode is the solver's whose data key the config sits at (``SOLVER.TRAIN_DATA``: train),
    else train where it writes scepter's ``MODE: train`` (scepter's loader shuffles only then),
    else eval; sharded over the process group and shuffled from ENV.SEED, as the solver's own.
    """
    cfg = cfg if isinstance(cfg, Config) else Config(dict(cfg))
    mode = next((m for m, key in DATA_KEYS.items() if cfg.path == f'SOLVER.{key}'), None)
    mode = mode or ('train' if cfg.get('MODE') == 'train' else 'eval')
    return build_data(cfg, mode, current_dist_info(), run_seed(), logger)


DATASETS.bundle_with(LOADER_PARA_DICT, build_bundle)


def build_data(cfg, mode, dist_info, seed, logger=None):
    """Build the DataBundle of ``cfg`` (a data config) for ``mode`` on this rank."""
    check_data_mapping(cfg, mode)
    warn_scepter_train_order(cfg, mode, logger)
    loader_cfg = resolve_loader_keys(cfg, mode)
    for key in LOADER_PARA_DICT:
        cfg[key] = loader_cfg[key]
    ds_cfg = Config({k: v for k, v in cfg.items() if k not in LOADER_PARA_DICT}, path=cfg.path)
    check_data_keys(ds_cfg)
    check_local_file_system(ds_cfg.get('FILE_SYSTEM'), ds_cfg.path_of('FILE_SYSTEM'))
    dataset = DATASETS.build(ds_cfg, logger=logger)
    classes, columns = getattr(dataset, 'classes', None), getattr(dataset, 'columns', None)
    for key, value in ds_cfg.items():  # keep resolved dataset defaults visible in the run's config
        cfg[key] = value
    if classes is not None and 'CLASSES' in cfg:  # and the class numbering (CLASSES: [] numbers by sorted name)
        cfg['CLASSES'] = list(classes)
    source = _dataset_name(dataset, ds_cfg)
    refuse_empty(dataset, source, mode, ds_cfg)
    if cfg.TRANSFORMS:
        pipeline = build_pipeline(cfg.TRANSFORMS, logger=logger, where=cfg.path_of('TRANSFORMS'))
        dataset = TransformedDataset(dataset, pipeline, seed, source)
    train = mode == 'train'
    sampler = sampler_class(loader_cfg, mode)(
        len(dataset),
        num_replicas=dist_info.world_size,
        rank=dist_info.rank,
        shuffle=train and loader_cfg.SHUFFLE,
        seed=seed,
        pad=train,
        drop_last=train and loader_cfg.DROP_LAST,
    )
    if train and sampler.rank_length() < (loader_cfg.BATCH_SIZE if loader_cfg.DROP_LAST else 1):
        raise DistributedError(
            f'{cfg.path}: {len(dataset)} samples cannot give each of {dist_info.world_size} ranks one batch of'
            f' {loader_cfg.BATCH_SIZE}; use fewer processes, a smaller BATCH_SIZE or DROP_LAST: false'
        )
    workers = loader_cfg.NUM_WORKERS
    loader = DataLoader(
        dataset,
        batch_size=loader_cfg.BATCH_SIZE,
        sampler=sampler,
        num_workers=workers,
        pin_memory=loader_cfg.PIN_MEMORY and dist_info.device.type == 'cuda',
        drop_last=loader_cfg.DROP_LAST if train else False,
        collate_fn=DictCollate(source, torch.get_default_dtype()),  # SOLVER.DTYPE here
        worker_init_fn=start_worker if workers > 0 else None,
        multiprocessing_context=worker_context(workers),
        generator=torch.Generator(),
    )
    return DataBundle(dataset, loader, sampler, loader_cfg.BATCH_SIZE, seed, classes, columns)
