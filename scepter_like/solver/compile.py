"""``torch.compile`` for the solver's model: SOLVER.COMPILE, off by default.

The model is compiled in place after the DDP / FSDP wrap (``nn.Module.compile``: its
``__call__`` goes through the compiled function), so ``solver.model`` stays the object
it was, DDP's ``no_sync`` works as before, and state dicts keep the plain module's keys
(no ``_orig_mod.`` prefix): checkpoints and safetensors files of compiled and eager runs
are interchangeable.  ``torch.compile`` is lazy, so a failure shows at the first forward
of a new graph: the call is then run again eagerly and the model stays eager, with one
WARNING naming the reason, or, with STRICT, the run ends with one error line.  An error
the eager forward raises too is the model's own and is raised as it is.  A model class
whose ``COMPILE_INCOMPATIBLE`` gives a reason runs eager (an error with STRICT).

With COMPILE off nothing here runs: the model's call path is untouched.
"""

import time

import torch

from scepter_like.config import Config
from scepter_like.errors import ConfigError, UserError, suggest
from scepter_like.registry import resolve_params
from scepter_like.utils.checkpoint import unwrap_model

COMPILE_MODES = (None, 'default', 'reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs')
COMPILE_PARA_DICT = {
    'ENABLED': {'value': False, 'description': 'compile the model with torch.compile'},
    'BACKEND': {'value': 'inductor', 'description': 'torch.compile backend (inductor | aot_eager | eager | ...)'},
    'MODE': {'value': None, 'type': (str, type(None)), 'choices': COMPILE_MODES, 'description': 'inductor mode'},
    'DYNAMIC': {
        'value': None,
        'type': (bool, type(None)),
        'description': 'dynamic shapes: true | false | null (dynamic once a shape changes)',
    },
    'FULLGRAPH': {'value': False, 'description': 'a graph break is an error (a compile failure)'},
    'STRICT': {'value': False, 'description': 'a compile failure or an incompatible model is an error, not eager'},
}


def compile_settings(solver_cfg):
    """SOLVER.COMPILE with its defaults filled in (in the run's config too); a bad key or BACKEND: a ConfigError."""
    path = solver_cfg.path_of('COMPILE')
    if solver_cfg.get('COMPILE') is None:  # written as a bare key
        solver_cfg['COMPILE'] = {}
    section = solver_cfg['COMPILE']
    if not isinstance(section, Config):
        raise ConfigError(f'{path}: expected a mapping of {", ".join(COMPILE_PARA_DICT)}, got {section!r}')
    settings = resolve_params(section, COMPILE_PARA_DICT, path)
    _check_backend(settings)
    return settings


def _check_backend(settings):
    """A ConfigError for a BACKEND torch.compile does not know, ENABLED or not (a typo would otherwise wait for the
    day compiling is turned on).  Listing the backends imports torch._dynamo (seconds): the default, always
    there, is taken without it."""
    if settings.BACKEND == COMPILE_PARA_DICT['BACKEND']['value']:
        return
    import torch._dynamo

    backends = torch._dynamo.list_backends(exclude_tags=())  # entry-point and user-registered ones too
    if settings.BACKEND not in backends:
        raise ConfigError(
            f'{settings.path_of("BACKEND")}: {settings.BACKEND!r} is not a torch.compile backend'
            f'{suggest(settings.BACKEND, backends)} (torch._dynamo.list_backends(exclude_tags=()) lists them)'
        )


def compile_model(model, settings, logger):
    """Compile ``model`` in place as ``settings`` (from ``compile_settings``) ask; a no-op when not ENABLED."""
    if not settings.ENABLED:
        return
    name = type(unwrap_model(model)).__name__
    reason = getattr(unwrap_model(model), 'COMPILE_INCOMPATIBLE', None)
    if reason:
        if settings.STRICT:
            raise ConfigError(
                f'{settings.path_of("ENABLED")}: {name} cannot be compiled ({reason}, its COMPILE_INCOMPATIBLE);'
                ' set SOLVER.COMPILE.STRICT=false to run it eager, or ENABLED=false'
            )
        logger.warning(f'SOLVER.COMPILE: {name} runs eager: {reason} (its COMPILE_INCOMPATIBLE)')
        return
    import torch._dynamo

    options = {'backend': settings.BACKEND, 'mode': settings.MODE, 'dynamic': settings.DYNAMIC}
    try:
        compiled = torch.compile(model._call_impl, fullgraph=settings.FULLGRAPH, **options)
    except RuntimeError as e:  # a combination torch refuses (it checks them here)
        raise ConfigError(f'{settings.path}: {_reason(e)}') from None
    dynamic_dims = (getattr(unwrap_model(model), 'DYNAMIC_DIMS', None) or {}) if settings.DYNAMIC is not False else {}
    model._compiled_call_impl = GuardedCall(model, compiled, name, settings, logger, dynamic_dims)
    logger.info(
        f'torch.compile: {name} with backend {settings.BACKEND}, mode {settings.MODE}, dynamic {settings.DYNAMIC},'
        f' fullgraph {settings.FULLGRAPH}; each new graph compiles at its first forward'
    )


def _reason(error):
    """The first paragraph of ``error``'s message on one line, after its type."""
    text = str(error).strip().split('\n\n')[0]
    return f'{type(error).__name__}: {" ".join(text.split())}'[:500]


class GuardedCall:
    """The compiled ``__call__`` of ``model``: a compile failure makes the model eager for good (STRICT: an error).

    The batch tensors the model's ``DYNAMIC_DIMS`` name are marked dynamic in those
    dimensions before each call, so the first graph compiled serves every size.
    """

    def __init__(self, model, compiled, name, settings, logger, dynamic_dims):
        self.model, self.compiled, self.name = model, compiled, name
        self.strict, self.settings, self.logger = settings.STRICT, settings, logger
        self.dynamic_dims = dynamic_dims
        self.first = True

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        for key, dim in self.dynamic_dims.items():
            if isinstance(kwargs.get(key), torch.Tensor):
                torch._dynamo.maybe_mark_dynamic(kwargs[key], dim)
        try:
            out = self.compiled(*args, **kwargs)
        except UserError:
            raise
        except Exception as e:
            return self._eager_instead(e, args, kwargs)
        if self.first:
            self.first = False
            seconds = time.perf_counter() - start
            self.logger.info(f'torch.compile: first forward of {self.name} (compile included) took {seconds:.1f} s')
        return out

    def _eager_instead(self, error, args, kwargs):
        """Run this call eagerly; the model stays eager.  An error eager raises too is the model's own."""
        self.model._compiled_call_impl = None
        out = self.model._call_impl(*args, **kwargs)
        reason = _reason(error)
        if self.strict:
            raise ConfigError(
                f'{self.settings.path}: torch.compile of {self.name} failed ({reason}); STRICT is set:'
                ' set SOLVER.COMPILE.STRICT=false to run eager, or ENABLED=false'
            )
        self.logger.warning(f'SOLVER.COMPILE: torch.compile of {self.name} failed, running eager: {reason}')
        return out
