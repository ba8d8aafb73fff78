"""A solver for evaluation, inference or export, built from a training config and a weights file.

The tools ``run_eval``, ``run_inference`` and ``export`` take the same config as
``run_train`` and build the same solver, minus what only training needs: TRAIN_DATA,
OPTIMIZER, LR_SCHEDULER, OPTIMIZER_PHASES, LOSS_AGGREGATOR, the TRAIN_HOOKS but BackwardHook
(its AMP setting: a mixed-precision run evaluated under autocast, and so do the tools),
RESUME_FROM, the log file (and MAX_EPOCHS is 1), and MODEL.PRETRAINED_MODEL and its parts' (the given
weights replace them); ``ENV.USE_PL`` is turned off (the native loop
evaluates a Lightning run's weights to the same numbers).  The weights come from a training
checkpoint, a bare state dict or a ``.safetensors`` file, and must fit the model exactly
(and, where the file describes its model, be of the config's architecture; where it names the classes
or the table columns the model was trained on, EVAL_DATA and TEST_DATA must number and place theirs the
same).  EVAL_HOOKS and TEST_HOOKS stay, so evaluation runs exactly as it does inside training.

Without a config, ``model_from_weights`` builds the model the file describes
(``scepter_like.model.description``): inference and export need nothing else.
"""

import copy
import os

import numpy as np

from scepter_like.config import Config
from scepter_like.data.loader import DATA_KEYS
from scepter_like.data.tables import CsvInput
from scepter_like.errors import CheckpointError, DataError
from scepter_like.model.description import check_architecture, model_from_description, parse_description
from scepter_like.solver.checkpoint_state import take_data_names
from scepter_like.solver.registry import SOLVERS
from scepter_like.utils.checkpoint import atomic_write, load_state_dict_checked, load_weights_and_description
from scepter_like.utils.distributed import default_device
from scepter_like.utils.launch_env import read_launch_env

EVAL_MODES = ('eval', 'test')
_TRAINING_ONLY = {
    'MAX_EPOCHS': 1,
    'OPTIMIZER': None,
    'LR_SCHEDULER': None,
    'OPTIMIZER_PHASES': [],
    'LOSS_AGGREGATOR': None,
    'RESUME_FROM': '',
    'LOG_FILE': '',
}


def inference_config(cfg, data_modes=EVAL_MODES):
    """A copy of the whole config ``cfg`` without its training-only parts (see the module docstring).

    Data configs of modes not in ``data_modes`` are dropped too.
    """
    cfg = copy.deepcopy(cfg)
    if cfg.get('ENV') is not None and cfg.ENV.get('USE_PL'):
        cfg.ENV['USE_PL'] = False  # evaluation, inference and export run the native loop (the same numbers)
    solver_cfg = cfg.SOLVER
    backward = [
        h for h in solver_cfg.get('TRAIN_HOOKS') or [] if isinstance(h, Config) and h.get('NAME') == 'BackwardHook'
    ]
    for key, value in _TRAINING_ONLY.items():
        solver_cfg[key] = value
    solver_cfg['TRAIN_HOOKS'] = backward  # its USE_AMP: a mixed-precision run's passes ran under autocast
    for mode, key in DATA_KEYS.items():
        if mode not in data_modes:
            solver_cfg[key] = None
    _drop_pretrained(solver_cfg.get('MODEL'))
    return cfg


def _drop_pretrained(model_cfg):
    """Empty PRETRAINED_MODEL in ``model_cfg`` and in its parts' configs (a BACKBONE's): the given weights replace
    them all."""
    if isinstance(model_cfg, Config):
        if model_cfg.get('PRETRAINED_MODEL'):
            model_cfg['PRETRAINED_MODEL'] = ''
        for value in model_cfg.values():
            _drop_pretrained(value)


def build_solver_with_weights(cfg, weights, logger, data_modes=EVAL_MODES):
    """A set-up solver of ``inference_config(cfg, data_modes)`` holding the model weights of ``weights``."""
    # a bad file fails before anything is built
    state, description = load_weights_and_description(weights, eval_weights=True)
    saved = {} if description is None else parse_description(description, weights)
    solver = SOLVERS.build(inference_config(cfg, data_modes).SOLVER, logger=logger)
    solver.weights_description = saved  # what a solver may build its model from (MeshRegressionSolver: statistics)
    solver.set_up_pre()
    solver.set_up()
    fix = 'give the config of the run that wrote it, or leave out --cfg to build the model the file describes'
    check_architecture(description, solver.unwrapped_model, weights, fix)
    take_data_names(solver, saved, weights)  # export writes them again
    load_state_dict_checked(solver.unwrapped_model, state, weights)
    logger.info(f'loaded model weights from {weights}')
    return solver


def inference_device():
    """The device a solver would pick with ENV.DEVICE '' (cuda:LOCAL_RANK where CUDA is available, else the CPU)."""
    return default_device(read_launch_env().local_rank)


def model_from_weights(weights, logger):
    """The model the file ``weights`` describes, with its weights, in eval mode on ``inference_device()``."""
    state, description = load_weights_and_description(weights, eval_weights=True)
    if description is None:
        raise CheckpointError(
            f'{weights} does not describe its model (a bare state dict, or a file written before checkpoints'
            ' described their models); give --cfg with the config of the run that wrote it'
        )
    description = parse_description(description, weights)
    model = model_from_description(description, weights)
    load_state_dict_checked(model, state, weights)
    logger.info(f'built {description["architecture"]} from the description in {weights} and loaded its weights')
    return model.to(inference_device()).eval()


def read_inputs(path):
    """The inputs of the file ``path``: a ``.csv`` table (``CsvInput``, read by column name once the model is
    known), else the arrays of an ``.npz``."""
    return CsvInput(path) if path.lower().endswith('.csv') else read_npz(path)


def model_inputs(model, inputs, source):
    """``inputs`` (of the file ``source``: ``read_inputs``) as ``model`` takes them: a table's columns by the names
    the model was trained on (``BaseModel.input_columns``); arrays by ``BaseModel.inputs_from_arrays``, else as
    they are."""
    if isinstance(inputs, CsvInput):
        return inputs.arrays(getattr(model, 'input_columns', None))
    convert = getattr(model, 'inputs_from_arrays', None)
    return convert(inputs, source) if convert is not None else inputs


def read_model_inputs(path, model):
    """The inputs of ``path`` (an .npz or a .csv) as ``model`` takes them."""
    return model_inputs(model, read_inputs(path), path)


def evaluate(solver):
    """``{mode: {metric: float}}`` over EVAL_DATA and TEST_DATA, by the loops training runs.

    Every rank must call it (metrics reduce over ranks); eval and test hooks see the
    usual before_solve / after_solve around it.
    """
    solver.failed = None
    solver.before_solve()
    try:
        solver.solve_eval()
        solver.solve_test()
    except BaseException as e:
        solver.failed = e
        raise
    finally:
        solver.after_solve()
    return {mode: dict(solver.epoch_outputs[mode]) for mode in EVAL_MODES if mode in solver.epoch_outputs}


def read_npz(path):
    """The arrays of an ``.npz`` file as ``{name: numpy array}`` (no pickled objects)."""
    if not os.path.isfile(path):
        raise DataError(f'input file not found: {path}; give an existing .npz')
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError) as e:
        raise DataError(
            f'{path} is not a readable .npz file ({str(e).splitlines()[0]}); inputs are an .npz of arrays named by'
            ' batch key, or a .csv table (named so), read by the column names the model was trained on'
        ) from None


def write_npz(path, arrays):
    """Write ``arrays`` to ``path`` as an uncompressed ``.npz``, atomically."""
    atomic_write(path, lambda f: np.savez(f, **arrays))
