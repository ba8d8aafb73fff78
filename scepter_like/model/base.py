"""BaseModel: the keys every model accepts, whatever its own are."""

import torch


class BaseModel(torch.nn.Module):
    """``nn.Module`` built from a config: ``cls(cfg, logger=logger)``.

    The contract with the solver: ``model(**batch)`` is called with a batch's dict (its
    keys are the model's ``forward`` arguments) and returns a dict.  In train mode it
    holds ``loss`` (a scalar tensor), or ``loss_<term>`` scalars that the solver sums with
    SOLVER.LOSS_WEIGHTS; any other scalar in it is logged.  In eval and test mode it holds
    the tensors that the METRICS name in their ``KEYS``.

    ``PRETRAINED_MODEL`` is read by the solver, which loads the weights (strict) right
    after building the model, so finetuning is one config key.
    """

    para_dict = {
        'PRETRAINED_MODEL': {'value': '', 'description': '.safetensors or .pth weights to load before training'},
        'PRETRAINED_STRICT': {'value': True, 'description': 'require the weights to fit the model exactly'},
    }
    # None, or the reason torch.compile must not be applied to this model (the solver then runs it eager)
    COMPILE_INCOMPATIBLE = None
    # {'input' | 'output': config key} of the sizes that must fit the data, named when a forward fails on them
    SIZE_KEYS = {}

    def __init__(self, cfg, logger=None):
        super().__init__()
        self.cfg = cfg
        self.logger = logger
