"""Hook base class and the named priority levels.

The solver's loop, with the stage each hook may implement::

    before_solve
    for epoch:      before_epoch, before_all_iter
        for batch:  before_iter, run_step_*, after_iter  (after_backward: inside BackwardHook's after_iter)
                    after_all_iter, after_epoch
    after_solve

Hooks run in ascending PRIORITY (ties keep config order).  A hook implements only the
stages it needs: the solver calls a stage only on hooks that override it (and that, asked
through ``implements`` after ``before_solve``, have work there), so an unused stage costs
nothing per step.  ``before_save_checkpoint`` / ``after_load_checkpoint``
let a hook add to and read back the checkpoint; ``state_dict`` / ``load_state_dict``
carry its own state across a resume.  ``after_backward`` runs between the backward pass and
the optimizer step, on optimizer steps only: gradients are present (all-reduced under DDP,
unscaled under fp16) and not yet clipped.

Hooks read the solver's state and change it only through its named methods
(``request_stop``, ``request_probes``, ``log_scalar``); a hook that needs the loop to run
its steps differently (accumulation, autocast) says so in ``loop_settings``.
"""

PRIORITY_BACKWARD = 0
PRIORITY_LOG = 100
PRIORITY_LR = 200
PRIORITY_PROBE = 200
PRIORITY_SAFETENSORS = 200
PRIORITY_CHECKPOINT = 300
PRIORITY_SAMPLER = 400
PRIORITY_NORMAL = 500

STAGES = (
    'before_solve',
    'after_solve',
    'before_epoch',
    'after_epoch',
    'before_all_iter',
    'after_all_iter',
    'before_iter',
    'after_iter',
    'after_backward',
    'before_save_checkpoint',
    'after_load_checkpoint',
)


class Hook:
    para_dict = {'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'lower runs first; ties keep config order'}}

    def __init__(self, cfg, logger=None):
        self.cfg = cfg
        self.logger = logger
        self.priority = cfg.get('PRIORITY', PRIORITY_NORMAL) if cfg is not None else PRIORITY_NORMAL

    def before_solve(self, solver):
        pass

    def after_solve(self, solver):
        pass

    def before_epoch(self, solver):
        pass

    def after_epoch(self, solver):
        pass

    def before_all_iter(self, solver):
        pass

    def after_all_iter(self, solver):
        pass

    def before_iter(self, solver):
        pass

    def after_iter(self, solver):
        pass

    def after_backward(self, solver):
        pass

    def before_save_checkpoint(self, solver, checkpoint):
        pass

    def after_load_checkpoint(self, solver, checkpoint):
        pass

    def state_dict(self):
        """State to carry across a resume (plain values and tensors only)."""
        return {}

    def load_state_dict(self, state):
        pass

    @classmethod
    def implements(cls, stage):
        """Whether the solver should call this hook at ``stage``: the class overrides it.

        A hook may narrow this per instance; the solver asks again after ``before_solve``,
        once every hook has settled its configuration.
        """
        return getattr(cls, stage) is not getattr(Hook, stage)


def check_eval_metric(hook, solver, key, job):
    """For a hook that reads an eval metric: it is in EVAL_HOOKS, and the metric ``cfg[key]`` names exists.

    ``job`` says what the hook does with evaluations (for the error).  Metric names not known
    before a first pass (scepter's metrics) are checked when read (``eval_metric``).
    """
    from scepter_like.errors import ConfigError

    if hook not in solver.hooks_dict['eval']:
        raise ConfigError(f'{hook.cfg.path}: {type(hook).__name__} {job}; list it in SOLVER.EVAL_HOOKS')
    names = solver.metric_names('eval')
    if names is not None and hook.cfg[key] not in names:
        raise ConfigError(
            f'{hook.cfg.path_of(key)}: no eval metric is called {hook.cfg[key]!r}; the metrics give {names}'
            + ('' if names else ' (give the config EVAL_DATA and METRICS)')
        )


def eval_metric(solver, name, where):
    """The latest evaluation's ``name``, or None before any; a ConfigError naming ``where`` (a config path)
    when an evaluation ran without it (metric names a first pass makes known: scepter's metrics)."""
    outputs = solver.epoch_outputs.get('eval') or {}
    if name in outputs:
        return outputs[name]
    if outputs:
        from scepter_like.errors import ConfigError

        raise ConfigError(f'{where}: no eval metric is called {name!r}; the evaluation gave {sorted(outputs)}')
    return None
