"""``ENV.PL``: Lightning's Trainer settings, and the Trainer arguments the solver's own keys set.

``PL_PARA_DICT`` declares the keys (``resolve_env`` checks them in every config, so a typo
fails with or without ``USE_PL``).  The Trainer arguments a solver key already decides
(``OWNED_ARGUMENTS``) are refused in ``TRAINER``, naming the key to set instead; any other
argument of ``Trainer.__init__`` passes through as given.  Imports no Lightning.
"""

from scepter_like.errors import ConfigError, suggest

STRATEGIES = ('auto', 'ddp')  # what the solver's update runs under (docs/lightning.md, "Not supported")
PRECISIONS = {  # Lightning's names of what the native keys set; '' takes them from those keys
    'float32': '32-true',
    'float64': '64-true',
    'bf16': 'bf16-mixed',
    'fp16': '16-mixed',
}
_REFUSED = (  # Lightning strategies the solver does not run under: why, and what to use
    ('ddp_find_unused_parameters', 'use ddp with SOLVER.FIND_UNUSED_PARAMETERS'),
    (
        ('ddp_spawn', 'ddp_fork', 'ddp_notebook'),
        'its processes would start after the run has set up; use ddp (Lightning starts them from the command),'
        ' torchrun or srun',
    ),
    ('single_device', 'use auto'),
)
_REFUSED_OTHERWISE = (
    "the solver's update steps the optimizer of the plain model, which this strategy shards or owns; use ddp,"
    ' or ENV.USE_PL false with SOLVER.PARALLEL: fsdp'
)
_PRECISION_ALIASES = {'32': '32-true', '64': '64-true', 'bf16': 'bf16-mixed', '16': '16-mixed'}

PL_PARA_DICT = {
    'ACCELERATOR': {
        'value': '',
        'description': "Lightning's accelerator; '' as the native loop picks: ENV.DEVICE's type, else cuda"
        ' where available, else cpu',
    },
    'DEVICES': {
        'value': 'auto',
        'type': (str, int, list),
        'description': "'auto': one per process torchrun / srun started on this node, else 1; N (or a list of"
        ' device indices): Lightning starts one process per device itself',
    },
    'NUM_NODES': {
        'value': 'auto',
        'type': (str, int),
        'description': "'auto': as torchrun / srun started them, else 1",
    },
    'STRATEGY': {
        'value': 'auto',
        'description': "'auto' (DDP when several processes) or 'ddp': DDP with SOLVER.FIND_UNUSED_PARAMETERS,"
        ' ENV.BACKEND and ENV.DIST_TIMEOUT',
    },
    'PRECISION': {
        'value': '',
        'type': (str, int),
        'description': "'' from BackwardHook USE_AMP / AMP_DTYPE and SOLVER.DTYPE; or Lightning's name of the"
        ' same (32-true, bf16-mixed, 16-mixed, 64-true)',
    },
    'TRAINER': {'value': {}, 'description': 'further Trainer arguments, passed as given (docs/lightning.md)'},
}

_DATA = 'the data configs and SOLVER.MAX_STEPS'
OWNED_ARGUMENTS = {  # Trainer argument -> the key that decides it
    'accelerator': 'ENV.PL.ACCELERATOR',
    'devices': 'ENV.PL.DEVICES',
    'num_nodes': 'ENV.PL.NUM_NODES',
    'strategy': 'ENV.PL.STRATEGY',
    'precision': 'BackwardHook USE_AMP / AMP_DTYPE (or ENV.PL.PRECISION)',
    'plugins': 'ENV.PL (the backend gives Lightning the process group it joined)',
    'max_epochs': 'SOLVER.MAX_EPOCHS',
    'min_epochs': 'SOLVER.MAX_EPOCHS',
    'max_steps': 'SOLVER.MAX_STEPS',
    'min_steps': 'SOLVER.MAX_STEPS',
    'max_time': 'SOLVER.MAX_EPOCHS / MAX_STEPS',
    'accumulate_grad_batches': 'BackwardHook ACCUMULATE_STEP (or SOLVER.ACCU_STEP)',
    'gradient_clip_val': 'BackwardHook GRADIENT_CLIP',
    'gradient_clip_algorithm': 'BackwardHook GRADIENT_CLIP',
    'check_val_every_n_epoch': 'SOLVER.EVAL_INTERVAL',
    'val_check_interval': 'SOLVER.EVAL_INTERVAL',
    'num_sanity_val_steps': 'SOLVER.EVAL_INTERVAL',
    'limit_train_batches': _DATA,
    'limit_val_batches': _DATA,
    'limit_test_batches': _DATA,
    'limit_predict_batches': _DATA,
    'overfit_batches': _DATA,
    'fast_dev_run': _DATA,
    'reload_dataloaders_every_n_epochs': 'the solver (it reshuffles each pass itself)',
    'use_distributed_sampler': 'the solver (it shards the data itself)',
    'inference_mode': 'the solver (eval and test run under torch.no_grad, as in the native loop)',
    'enable_checkpointing': 'CheckpointHook',
    'callbacks': 'hooks (SOLVER.TRAIN_HOOKS, EVAL_HOOKS, TEST_HOOKS)',
    'logger': 'LogHook / TensorboardLogHook',
    'default_root_dir': 'SOLVER.WORK_DIR',
    'deterministic': 'ENV.DETERMINISTIC',
}


def passed_through(pl_cfg, names):
    """The ``TRAINER`` arguments of ``pl_cfg`` (ENV.PL), checked against ``names`` (``Trainer.__init__``'s)."""
    trainer_cfg = pl_cfg.TRAINER
    for key in trainer_cfg.keys():
        where = trainer_cfg.path_of(key)
        if key in OWNED_ARGUMENTS:
            raise ConfigError(
                f'{where}: under ENV.USE_PL the solver sets this Trainer argument from {OWNED_ARGUMENTS[key]};'
                ' set that instead'
            )
        if key not in names:
            raise ConfigError(
                f"{where}: Lightning's Trainer has no argument {key!r}"
                f'{suggest(key, [n for n in names if n not in OWNED_ARGUMENTS])}'
            )
    return trainer_cfg.to_dict()


def check_precision(pl_cfg, native):
    """ENV.PL.PRECISION, when given, must name ``native``: what BackwardHook's and SOLVER.DTYPE's keys set."""
    given = pl_cfg.PRECISION
    if given in ('', None):
        return
    name = _PRECISION_ALIASES.get(str(given), str(given))
    where = pl_cfg.path_of('PRECISION')
    if name not in PRECISIONS.values():
        raise ConfigError(
            f"{where}: {given!r} is not supported under ENV.USE_PL (the solver's update runs"
            f' {", ".join(PRECISIONS.values())}, as BackwardHook USE_AMP / AMP_DTYPE and SOLVER.DTYPE set them)'
        )
    if name != native:
        raise ConfigError(
            f"{where}: {given!r} disagrees with this run's {native!r} (BackwardHook USE_AMP / AMP_DTYPE and"
            ' SOLVER.DTYPE); set those keys, or leave PRECISION empty'
        )


def check_strategy(pl_cfg, registered):
    """ENV.PL.STRATEGY is one the solver runs under; ``registered``: the names Lightning's registry knows."""
    name = pl_cfg.STRATEGY
    where = pl_cfg.path_of('STRATEGY')
    if name in STRATEGIES:
        return name
    if name not in registered:
        raise ConfigError(
            f'{where}: Lightning has no strategy {name!r}{suggest(name, [*STRATEGIES, *registered])};'
            f' under ENV.USE_PL use {" or ".join(STRATEGIES)}'
        )
    reason = next((why for prefix, why in _REFUSED if str(name).startswith(prefix)), _REFUSED_OTHERWISE)
    raise ConfigError(f'{where}: {name!r} is not supported under ENV.USE_PL: {reason}')
