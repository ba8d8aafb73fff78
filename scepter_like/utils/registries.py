"""Every registry of the toolkit by name, for tools that look a name up in all of them."""


def all_registries():
    """``{name: Registry}`` in the order a config nests them (imports register the built-ins)."""
    import scepter_like.solver  # noqa: F401  (registers every built-in component)
    from scepter_like.data.registry import COLLATES, CONDITIONS, DATASETS, GEOMETRIES
    from scepter_like.metric.registry import METRICS
    from scepter_like.model.loss_aggregators.registry import LOSS_AGGREGATORS
    from scepter_like.model.registry import LOSSES, MODELS
    from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS
    from scepter_like.solver.hooks.registry import HOOKS
    from scepter_like.solver.registry import SOLVERS
    from scepter_like.transform.registry import TRANSFORMS

    registries = (
        SOLVERS,
        HOOKS,
        MODELS,
        LOSSES,
        LOSS_AGGREGATORS,
        DATASETS,
        TRANSFORMS,
        COLLATES,
        GEOMETRIES,
        CONDITIONS,
        METRICS,
        OPTIMIZERS,
        LR_SCHEDULERS,
    )
    return {r.name: r for r in registries}
