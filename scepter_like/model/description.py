"""Self-describing weights: the model description every checkpoint and ``.safetensors`` export carries.

A description is a plain dict of dicts, lists, strings and numbers, so a checkpoint still
loads with ``torch.load(weights_only=True)`` and safetensors' string metadata holds it as
JSON.  ``BaseModel.describe`` writes it:

- ``architecture``: the MODELS name of the model;
- ``imports``: the modules that register the model and its registered parts (a dotted name,
  or the path of a ``.py`` file imported by path), imported before building it, so a tool
  needs neither the training config nor its IMPORTS;
- ``config``: the model's config without the PRETRAINED* keys;
- whatever else a model needs to be rebuilt (MeshModel: ``stats``, its normalisation statistics);
- ``classes``: the class names of its outputs in index order (``BaseModel.class_names``), where the train
  data named them; a file without them (or written before they were recorded) is taken as it is;
- ``columns``: batch key -> the table columns it was read from, in order (``BaseModel.input_columns``), where
  the train data read a table (CsvDataset); likewise.

``model_from_description`` builds the model back (fresh weights: load the state dict next);
``check_architecture`` refuses weights whose architecture differs from a config's model.
"""

import json
import os

import torch

from scepter_like.errors import CheckpointError
from scepter_like.model.registry import LOSSES, MODELS
from scepter_like.registry import declared_params
from scepter_like.utils.checkpoint import MODEL_DESCRIPTION_KEY
from scepter_like.utils.imports import import_user_modules, importable_name

_REQUIRED = ('architecture', 'imports', 'config')


def architecture_name(model):
    """The MODELS name ``model`` was built by (its config's NAME), else the one its class is registered under."""
    name = model.cfg.get('NAME') if hasattr(model.cfg, 'get') else None
    return name or MODELS.name_of(type(model)) or type(model).__name__


def registering_modules(model):
    """The modules that register ``model``'s class and the classes of its registered parts, the model's first."""
    modules = []
    for part in model.modules():
        cls = type(part)
        if MODELS.name_of(cls) is not None or LOSSES.name_of(cls) is not None:
            name = importable_name(cls.__module__)
            if name not in modules:
                modules.append(name)
    return modules


def describe(model):
    """``model.describe()`` checked to be plain data (a JSON round trip), or None for a model that has none."""
    describe_fn = getattr(model, 'describe', None)
    if describe_fn is None:
        return None
    desc = describe_fn()
    if getattr(model, 'class_names', None) is not None:
        desc = {**desc, 'classes': list(model.class_names)}
    if getattr(model, 'input_columns', None) is not None:
        desc = {**desc, 'columns': dict(model.input_columns)}
    try:
        return json.loads(json.dumps(desc, allow_nan=True))
    except (TypeError, ValueError) as e:
        raise TypeError(
            f'{type(model).__name__}.describe() must return plain dicts, lists, str and numbers: {e}'
        ) from None


def description_metadata(model):
    """The safetensors metadata entry of ``model``'s description (``{}`` for a model without one)."""
    desc = describe(model)
    return {} if desc is None else {MODEL_DESCRIPTION_KEY: json.dumps(desc)}


def save_described_weights(path, state_dict, model, **metadata):
    """``state_dict`` as a ``.safetensors`` file (atomic), its metadata ``metadata`` and ``model``'s description."""
    from scepter_like.utils.checkpoint import save_safetensors

    save_safetensors(state_dict, path, metadata={'format': 'pt', **metadata, **description_metadata(model)})


def parse_description(value, source):
    """A description from a checkpoint (a dict) or safetensors metadata (JSON text); CheckpointError if malformed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise CheckpointError(f'{source}: its {MODEL_DESCRIPTION_KEY} metadata is not JSON ({e})') from None
    if not isinstance(value, dict) or any(key not in value for key in _REQUIRED):
        raise CheckpointError(
            f'{source}: {MODEL_DESCRIPTION_KEY} lacks {list(_REQUIRED)}; it was not written by describe()'
        )
    return value


def model_from_description(desc, source):
    """The model ``desc`` describes, in its dtype, built after importing its ``imports``; fresh weights.

    Only module names are imported (modules installed or under the working directory, as a
    config's IMPORTS are), and only when the architecture is not registered yet; a ``.py`` path
    the file names is not, so a file cannot make a tool run a file of its choosing: give such a
    module with ``--import``.
    """
    from scepter_like.utils.dtypes import DTYPES, default_dtype

    paths = [m for m in desc['imports'] if m.endswith('.py') or '/' in m or os.sep in m]
    name = desc['architecture']
    if name not in MODELS:  # (an --import of the same module by its path registered it already)
        import_user_modules([m for m in desc['imports'] if m not in paths])
    if name not in MODELS:
        where = (
            f'registered by {", ".join(paths)}: a .py path the file names is never imported'
            if paths
            else f'which its modules {desc["imports"]} do not register in MODELS'
        )
        raise CheckpointError(
            f'{source} describes a {name}, {where}; give the module with --import, or --cfg with the training config'
        )
    with default_dtype(DTYPES.get(desc.get('dtype'), torch.float32)):
        model = MODELS.get(name).from_description(desc)
    model.class_names, model.input_columns = desc.get('classes'), desc.get('columns')
    return model


def architecture_differences(saved, model):
    """What differs between the architecture a file describes (``saved``) and ``model``'s (``[]``: none).

    The MODELS names are compared, and the values of the config keys that a model class names
    in ``arch_keys`` (its ``ARCH_KEYS``); a key holding a part's MODELS config (a Classifier's
    BACKBONE) is compared by that part's keys in turn.  Other config keys (a loss weight, a data
    key) may differ.
    """
    own = describe(model)
    if own is None:
        return []
    if saved['architecture'] != own['architecture']:
        return [f'architecture {saved["architecture"]} (the config: {own["architecture"]})']
    return list(_config_differences(saved['config'], own['config'], type(model), 'MODEL'))


def _config_differences(saved, own, cls, where):
    """``where.KEY: the file's .., the config's ..`` for each architecture key of ``cls`` whose values differ."""
    para, _ = declared_params(cls)

    def value(config, key):  # a key the file lacks was written before it existed: it held the default
        return config.get(key, para[key]['value'] if key in para else '(not set)')

    arch_keys = getattr(cls, 'arch_keys', lambda config: ())
    for key in dict.fromkeys((*arch_keys(saved), *arch_keys(own))):
        old, new = value(saved, key), value(own, key)
        if _is_part(old) and _is_part(new) and old['NAME'] == new['NAME'] and old['NAME'] in MODELS:
            yield from _config_differences(old, new, MODELS.get(old['NAME']), f'{where}.{key}')
        elif old != new:
            yield f"{where}.{key}: the file's {_short(old)}, the config's {_short(new)}"


def _is_part(value):
    return isinstance(value, dict) and isinstance(value.get('NAME'), str)


def _short(value):
    """A part's config by its MODELS name (the parts differ in it), any other value as Python writes it."""
    return f'a {value["NAME"]}' if _is_part(value) else repr(value)


def check_architecture(saved, model, source, fix):
    """A CheckpointError naming each difference when ``saved`` (a description, or None) is not ``model``'s."""
    if saved is None:
        return
    differences = architecture_differences(parse_description(saved, source), model)
    if differences:
        raise CheckpointError(
            f"{source} holds another architecture than the config's model: {', '.join(differences)}; {fix}"
        )
