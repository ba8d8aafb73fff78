"""The whole config checked and completed without building anything (``--print-config``).

Each component config is resolved by its registry (unknown NAME or key, wrong type, a value
out of its declared range: the usual one-line errors) and gets every default filled in,
so the printed config is what a run would use.  Nested model parts (BACKBONE, LOSS, ...)
are resolved by MODELS or LOSSES, whichever holds their NAME; a NAME neither holds is the
error a run gives when it builds the part.
"""

import copy

from scepter_like.config import Config


def _registries():
    import scepter_like.solver  # noqa: F401  (registers the built-ins)
    from scepter_like.metric.registry import METRICS
    from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS
    from scepter_like.model.registry import LOSSES, MODELS
    from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS
    from scepter_like.solver.hooks.registry import HOOKS
    from scepter_like.solver.registry import SOLVERS

    lists = {'TRAIN_HOOKS': HOOKS, 'EVAL_HOOKS': HOOKS, 'TEST_HOOKS': HOOKS, 'METRICS': METRICS}
    singles = {'OPTIMIZER': OPTIMIZERS, 'LR_SCHEDULER': LR_SCHEDULERS, 'LOSS_AGGREGATOR': LOSS_AGGREGATORS}
    return SOLVERS, lists, singles, (MODELS, LOSSES)


def _resolve_model(cfg, model_registries, where):
    """Resolve ``cfg`` (at ``where``) and, inside it, every mapping with a NAME, by the registry holding it."""
    registry = next((r for r in model_registries if isinstance(cfg, Config) and cfg.get('NAME') in r), None)
    (registry or model_registries[0]).resolve(cfg, where)
    for key, value in cfg.items():
        if isinstance(value, Config) and 'NAME' in value:
            _resolve_model(value, model_registries, cfg.path_of(key))


def _resolve_data(cfg, mode):
    from scepter_like.data.loader import (
        LOADER_PARA_DICT,
        check_data_keys,
        check_data_mapping,
        resolve_loader_keys,
        sampler_class,
    )
    from scepter_like.data.registry import DATASETS
    from scepter_like.transform.registry import resolve_pipeline

    check_data_mapping(cfg, mode)
    loader = resolve_loader_keys(cfg, mode)
    resolve_pipeline(loader.TRANSFORMS, loader.path_of('TRANSFORMS'))
    sampler_class(loader, mode)
    dataset = Config({k: v for k, v in cfg.items() if k not in LOADER_PARA_DICT}, path=cfg.path)
    check_data_keys(dataset)
    DATASETS.resolve(dataset)
    for source in (loader, dataset):
        for key, value in source.items():
            cfg[key] = value


def checked_config(cfg):
    """A copy of ``cfg`` (a root Config) with every component resolved; raises the usual ConfigErrors."""
    from scepter_like.data.loader import DATA_KEYS
    from scepter_like.solver.compile import compile_settings
    from scepter_like.solver.environment import resolve_env
    from scepter_like.solver.optimization import OptimizerPhases

    cfg = copy.deepcopy(cfg)  # keeps what each place wrote, for the errors
    solvers, lists, singles, model_registries = _registries()
    _, solver_cfg = solvers.resolve(cfg.SOLVER)
    resolve_env(solver_cfg)
    compile_settings(solver_cfg)
    for key, registry in lists.items():
        for index, entry in enumerate(solver_cfg.get(key) or []):
            registry.resolve(entry, f'{solver_cfg.path_of(key)}[{index}]')
    for key, registry in singles.items():
        if solver_cfg.get(key) is not None:
            registry.resolve(solver_cfg[key], solver_cfg.path_of(key))
    phases = OptimizerPhases(solver_cfg)  # each later phase's keys, then its optimizer and scheduler
    for owner, optimizer, scheduler in list(zip(phases.owners, phases.optimizers, phases.schedulers))[1:]:
        singles['OPTIMIZER'].resolve(optimizer, owner.path_of('OPTIMIZER'))
        if scheduler is not None:
            singles['LR_SCHEDULER'].resolve(scheduler, owner.path_of('LR_SCHEDULER'))
    if solver_cfg.get('MODEL') is not None:
        _resolve_model(solver_cfg.MODEL, model_registries, solver_cfg.path_of('MODEL'))
    for mode, key in DATA_KEYS.items():
        if solver_cfg.get(key) is not None:
            _resolve_data(solver_cfg[key], mode)
    return cfg
