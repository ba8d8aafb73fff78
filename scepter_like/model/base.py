"""BaseModel: the keys every model accepts, whatever its own are, and how a model describes itself."""

import torch

from scepter_like.config import Config
from scepter_like.errors import ConfigError
from scepter_like.registry import normalize_para
from scepter_like.utils.checkpoint import load_pretrained


def _without_pretrained(value):
    """A plain config (dicts, lists) without the PRETRAINED* keys at any level: what fixes a model, not its start."""
    if isinstance(value, dict):
        return {k: _without_pretrained(v) for k, v in value.items() if not str(k).startswith('PRETRAINED')}
    if isinstance(value, (list, tuple)):
        return [_without_pretrained(v) for v in value]
    return value


class BaseModel(torch.nn.Module):
    """``nn.Module`` built from a config: ``cls(cfg, logger=logger)``.

    The contract with the solver: ``model(**batch)`` is called with a batch's dict (its
    keys are the model's ``forward`` arguments) and returns a dict.  In train mode it
    holds ``loss`` (a scalar tensor), or ``loss_<term>`` scalars that the solver sums with
    SOLVER.LOSS_WEIGHTS; any other scalar in it is logged.  In eval and test mode it holds
    the tensors that the METRICS name in their ``KEYS``.

    ``PRETRAINED_MODEL`` is read by the solver, which loads the weights (strict) right
    after building the model, so finetuning is one config key (a subclass declaring the key
    itself loads them itself, scepter's way); then it freezes the parameters ``FREEZE``
    names (``prepare_model``).  A part built from a config of its own (a BACKBONE) gets its own.

    Every checkpoint and ``.safetensors`` export carries ``describe()``, from which
    ``from_description`` builds the model again without the training config (see
    ``scepter_like.model.description``).
    """

    para_dict = {
        'PRETRAINED_MODEL': {'value': '', 'description': '.safetensors or .pth weights to load before training'},
        'PRETRAINED_STRICT': {'value': True, 'description': 'require the weights to fit the model exactly'},
        'FREEZE': {
            'value': [],
            'description': 'parameter name prefixes (as named_parameters() names them, e.g. backbone.model.layer1)'
            ' whose parameters stay as they are in training (BatchNorm statistics still update: FREEZE_BN)',
        },
    }
    # None, or the reason torch.compile must not be applied to this model (the solver then runs it eager)
    COMPILE_INCOMPATIBLE = None
    # the class names of the outputs in index order (the train data's, set by the solver; None: unnamed):
    # descriptions record them, and the tools refuse data that numbers its classes otherwise
    class_names = None
    # batch key -> the table columns it was read from, in order (the train data's where it read a table, set by the
    # solver; None: no table): descriptions record them, the tools refuse data placing them otherwise, and
    # predict() and run_inference take a table's columns by these names
    input_columns = None
    # None: a checkpoint fits a config naming the same architecture; else the config keys that fix the
    # architecture too (a checkpoint whose values differ is refused, naming them; a key holding a part's MODELS
    # config is compared by that part's keys); above all those that change the network but no weight's shape
    ARCH_KEYS = None
    # how predict() and tools/run_inference.py batch the arrays given to them: 'rows' (every array has one
    # sample axis first, cut into batches) or 'whole' (the arrays are one batch as they stand, e.g. a graph's
    # features [V, F] and edge_index [2, E]: one forward)
    INPUT_BATCHING = 'rows'
    # {'input' | 'output': config key} of the sizes that must fit the data, named when a forward fails on them
    SIZE_KEYS = {}
    # {batch key: dimension} of the sizes that vary from batch to batch (a graph's vertex count): SOLVER.COMPILE
    # marks them dynamic before each compiled forward, so the first graph compiled serves every size
    DYNAMIC_DIMS = {}

    def __init__(self, cfg, logger=None):
        super().__init__()
        self.cfg = cfg
        self.logger = logger
        self._probe_data = {}  # register_probe's, until taken (probe_data, or the solver's for ProbeDataHook)

    def metrics_hint(self):
        """The METRICS an evaluation of this model would start from, as YAML: the warning about EVAL_DATA without
        METRICS suggests it (None: a regression's and a classifier's, for the user to choose)."""
        return None

    # -- scepter's probe API: what a forward hands to ProbeDataHook ----------------------------------------
    def register_probe(self, probe_data):
        """Keep ``{name: value}`` (a tensor, array, number, text, ProbeImage or ProbeData) until the solver takes
        it (``probe_data``), as scepter's; tensors detached, so a kept one holds no autograd graph."""
        self._probe_data.update({k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in probe_data.items()})

    def collect_probe(self):
        """This model's probes and, as ``{child}/{name}``, those of its BaseModel children (scepter's)."""
        probes = dict(self._probe_data)
        for name, child in self.named_children():
            if isinstance(child, BaseModel):
                probes.update({f'{name}/{k}': v for k, v in child.collect_probe().items()})
        return probes

    def probe_data(self):
        """The probes of ``collect_probe`` as scepter's ``ProbeData``, handed over once."""
        from scepter_like.utils.probe import as_probe_data

        probes = {k: as_probe_data(v) for k, v in self.collect_probe().items()}
        self.clear_probe()
        return probes

    def clear_probe(self):
        """Drop this model's probes and its BaseModel children's."""
        for module in self.modules():
            if isinstance(module, BaseModel):
                module._probe_data.clear()

    def logged_state(self):
        """``{name: number}`` each train log line shows as it is at that line, not as a mean over the interval (a
        PINN's identified PDE parameters): none here."""
        return {}

    @classmethod
    def arch_keys(cls, config):
        """The ARCH_KEYS that fix the architecture of a model of ``config`` (a plain dict; all of them here)."""
        return cls.ARCH_KEYS or ()

    def describe(self):
        """A plain dict (JSON-able): the MODELS name, the modules that register it, its config without PRETRAINED*.

        A subclass adds what else rebuilding needs (MeshModel: its normalisation statistics)
        and overrides ``from_description`` to match.
        """
        from scepter_like.model.description import architecture_name, registering_modules

        config = self.cfg.to_dict() if hasattr(self.cfg, 'to_dict') else dict(self.cfg or {})
        config.pop('NAME', None)
        floating = next((p.dtype for p in self.parameters() if p.is_floating_point()), torch.float32)
        return {
            'architecture': architecture_name(self),
            'imports': registering_modules(self),
            'config': _without_pretrained(config),
            'dtype': str(floating).removeprefix('torch.'),  # SOLVER.DTYPE: what to rebuild it in
        }

    @classmethod
    def from_description(cls, desc):
        """The model ``desc`` (a ``describe()`` dict) describes, with fresh weights; load its state dict next."""
        from scepter_like.model.registry import MODELS

        return MODELS.build({'NAME': desc['architecture'], **desc['config']})

    def inputs_from_arrays(self, arrays, source='the input'):
        """The batch keys ``forward`` takes, from the arrays of an input file (``run_inference --input``) or of
        ``predict`` (``solver.predict``), which may already be named by batch key.

        The default takes the arrays as they are (named by batch key); a model whose users hold
        samples in another layout (MeshModel: the dataset's sample files) converts them here.
        """
        return arrays

    def pretrained_loaded(self, path, logger):
        """Called once PRETRAINED_MODEL's weights ``path`` are loaded: a model whose config also gives starting values
        the file replaced says so here (a PINN's learned PARAMETERS); the default has none."""


def prepare_model(model, model_cfg, logger):
    """What a MODEL config asks of the model once built: PRETRAINED_MODEL's weights, then FREEZE; returns the
    description the weights file carries (its class names and table columns: the solver checks the data against
    them), or None.

    A part built from a MODELS config of its own (``SOLVER.MODEL.BACKBONE``) gets its own PRETRAINED_MODEL and
    FREEZE first, inner parts before outer ones, as a scepter backbone loads its weights when built: the model's
    own weights, loaded last, win where both hold a parameter."""
    for part, part_cfg in reversed(list(_configured_parts(model, model_cfg))):
        _prepare(part, part_cfg, logger)
    return _prepare(model, model_cfg, logger)


def _configured_parts(model, model_cfg):
    """The BaseModel parts of ``model`` (``model.modules()`` order: each before its own parts) whose config, not
    ``model_cfg``, sets PRETRAINED_MODEL or FREEZE."""
    seen = {id(model_cfg)}
    for part in model.modules():
        cfg = getattr(part, 'cfg', None)
        if isinstance(part, BaseModel) and isinstance(cfg, Config) and id(cfg) not in seen:
            seen.add(id(cfg))
            if cfg.get('PRETRAINED_MODEL') or cfg.get('FREEZE'):
                yield part, cfg


def _prepare(model, model_cfg, logger):
    """PRETRAINED_MODEL, then FREEZE, of one model or part.

    The weights are loaded here only when PRETRAINED_MODEL is BaseModel's key: a model class that declares it in
    its own ``para_dict`` loads them itself, scepter's way (LatentDiffusion and the embedders, with their
    IGNORE_KEYS), and a second, strict load here would undo what it left out."""
    owner = _declared_by(type(model), 'PRETRAINED_MODEL')
    description = None
    if owner in (None, BaseModel):
        description = load_pretrained(model, model_cfg, logger)
        if model_cfg.get('PRETRAINED_MODEL') and isinstance(model, BaseModel):
            model.pretrained_loaded(model_cfg.PRETRAINED_MODEL, logger)
    elif model_cfg.get('PRETRAINED_MODEL'):
        logger.info(
            f'{model_cfg.path_of("PRETRAINED_MODEL")}: {owner.__name__} declares PRETRAINED_MODEL itself and loads it'
            " (scepter's way): the solver does not load it again"
        )
    freeze_parameters(model, model_cfg)
    return description


def _declared_by(cls, key):
    """The first class of ``cls``'s MRO whose own ``para_dict`` declares ``key``, or None."""
    return next((k for k in cls.__mro__ if key in normalize_para(k.__dict__.get('para_dict'), k.__qualname__)), None)


def freeze_parameters(model, model_cfg):
    """Turn off the gradients of the parameters under each prefix of ``model_cfg.FREEZE`` (the optimizer then leaves
    them out, and the run summary counts them frozen); a prefix naming no parameter (a typo) is a ConfigError.

    A bool FREEZE (scepter's embedders declare one) is scepter's meaning: true freezes the whole model."""
    prefixes = model_cfg.get('FREEZE') or []
    named = dict(model.named_parameters())
    if prefixes is True:
        prefixes = sorted({name.split('.')[0] for name in named})
    for prefix in prefixes:
        under = [p for name, p in named.items() if name == prefix or name.startswith(f'{prefix}.')]
        if not under:
            tops = sorted({name.split('.')[0] for name in named})
            raise ConfigError(
                f'{model_cfg.path_of("FREEZE")}: {prefix!r} names no parameter of the model (its parameters are'
                f' under {", ".join(tops)}; list them with model.named_parameters())'
            )
        for parameter in under:
            parameter.requires_grad_(False)
