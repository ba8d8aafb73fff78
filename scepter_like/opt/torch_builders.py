"""Register every ``torch.optim`` optimizer and ``torch.optim.lr_scheduler`` scheduler.

Each gets a builder whose ``para_dict`` is read off the real signature: argument
``lr`` is the key ``LEARNING_RATE``, every other argument its upper-cased name
(``WEIGHT_DECAY``, ``T_MAX``, ...), defaults as torch states them.  Arguments without a
default are required.  Tuples (``betas``) are written as YAML lists of the default's
length, and an argument annotated as a list without a default (``milestones``) takes a YAML list only.
``LEARNING_RATE`` must be a finite number, at least 0, and the schedulers' lengths and counts
(``_LEAST``) integers of at least their lowest working value: torch checks few of them, and
``T_MAX: -1`` swings the rate between 0 and full every epoch, ``T_MAX: 0`` divides by zero
after the first epoch.

Not offered: ``LambdaLR`` / ``MultiplicativeLR`` (they take Python callables) and
``SequentialLR`` / ``ChainedScheduler`` (they take scheduler objects); compose warmup
with any scheduler through LrHook instead.
"""

import inspect

import torch

from scepter_like.errors import ConfigError
from scepter_like.opt.registry import LR_SCHEDULERS, OPTIMIZERS

_SKIP_ARGS = {'self', 'params', 'optimizer', 'verbose'}
_LIST_ANNOTATIONS = ('Iterable[', 'Sequence[', 'list', 'tuple', "<class 'list'>", "<class 'tuple'>")
_NOT_OFFERED = {'LambdaLR', 'MultiplicativeLR', 'SequentialLR', 'ChainedScheduler', 'LRScheduler', '_LRScheduler'}
_LEAST = {  # scheduler argument -> its least working value (an int); periods and step counts are at least 1
    **dict.fromkeys(('T_max', 'T_0', 'T_mult', 'step_size', 'step_size_up', 'step_size_down', 'total_iters'), 1),
    **dict.fromkeys(('total_steps', 'epochs', 'steps_per_epoch'), 1),  # OneCycleLR
    **dict.fromkeys(('patience', 'cooldown'), 0),  # ReduceLROnPlateau
}


def key_of(arg):
    return 'LEARNING_RATE' if arg == 'lr' else arg.upper()


def _plain_default(value):
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, torch.Tensor):
        return value.item()
    return value


def signature_params(cls, least=None):
    """(para_dict, {KEY: arg name}) from ``cls.__init__``'s signature; ``least`` (arg name -> int) makes those
    arguments ints of at least that value."""
    para, names = {}, {}
    for arg, p in inspect.signature(cls.__init__).parameters.items():
        if arg in _SKIP_ARGS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        key = key_of(arg)
        spec = {'description': f'torch.optim argument `{arg}`'}
        annotation = '' if p.annotation is inspect.Parameter.empty else str(p.annotation)
        if p.default is inspect.Parameter.empty:
            spec.update(value=None, required=True)
        else:
            spec['value'] = _plain_default(p.default)
        value = spec['value']
        if 'float' in annotation:
            if isinstance(value, int) and not isinstance(value, bool):
                spec['value'] = float(value)
            if value is None and 'int' not in annotation:
                spec['type'] = (int, float)
        elif value is None and annotation in ('int', "<class 'int'>"):
            spec['type'] = (int,)
        elif value is None and annotation.startswith(_LIST_ANNOTATIONS):
            spec['type'] = (list,)  # MultiStepLR's milestones: a string would pass on as its characters
        if key == 'LEARNING_RATE':  # torch accepts inf (the run then trains to NaN): refused here
            spec['min'] = 0.0
        if arg in (least or {}):
            spec.update(type=(int,), min=least[arg])
        para[key] = spec
        names[key] = arg
    return para, names


def _make_builder(cls, kind, least=None):
    para, names = signature_params(cls, least)
    # a bare list default (betas) becomes the tuple torch expects
    tuple_args = {k for k, s in para.items() if isinstance(s.get('value'), list)}

    def build(cfg, logger=None, **kwargs):
        if 'parameters' in kwargs:  # scepter's keyword: OPTIMIZERS.build(cfg, logger=..., parameters=...)
            kwargs['params'] = kwargs.pop('parameters')
        args = {}
        for key, arg in names.items():
            value = cfg[key]
            if key in tuple_args and isinstance(value, list):
                size = len(para[key]['value'])
                if len(value) != size:  # torch would fail at its first step (betas=(0.9,)), or never say
                    raise ConfigError(
                        f'{cfg.path_of(key)}: {cls.__name__} takes {size} values here (like {para[key]["value"]}),'
                        f' got {len(value)}: {value}'
                    )
                value = tuple(value)
            args[arg] = value
        try:
            return cls(**kwargs, **args)
        except (TypeError, ValueError) as e:
            raise ConfigError(f'{cfg.path or kind}: torch rejected the arguments of {cls.__name__}: {e}') from None

    build.para_dict = para
    build.__name__ = cls.__name__
    build.__doc__ = f'Build torch.optim {cls.__name__} from a config.'
    build.torch_class = cls
    return build


def _register_all():
    for name, cls in vars(torch.optim).items():
        if inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            OPTIMIZERS.register_function(name)(_make_builder(cls, 'OPTIMIZER'))
    sched = torch.optim.lr_scheduler
    for name, cls in vars(sched).items():
        if name in _NOT_OFFERED or name.startswith('_') or not inspect.isclass(cls):
            continue
        if issubclass(cls, sched.LRScheduler) or cls is sched.ReduceLROnPlateau:
            LR_SCHEDULERS.register_function(name)(_make_builder(cls, 'LR_SCHEDULER', _LEAST))


_register_all()
