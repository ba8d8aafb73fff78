"""Generic backbones (an MLP, a small ConvNet) and scepter's classifier parts (GlobalAveragePooling, ClassifierHead)."""

import torch
from torch import nn

from scepter_like.model.base import BaseModel
from scepter_like.model.registry import MODELS


class Sin(nn.Module):
    """sin(x): DeepXDE's 'sin' activation (SIREN-style networks for oscillating fields)."""

    def forward(self, x):
        return torch.sin(x)


ACTIVATIONS = {'relu': nn.ReLU, 'gelu': nn.GELU, 'tanh': nn.Tanh, 'silu': nn.SiLU, 'sin': Sin}
INITS = {'glorot_normal': nn.init.xavier_normal_, 'glorot_uniform': nn.init.xavier_uniform_}  # DeepXDE's names


def check_whole_sizes(cfg, key):
    """Every size in the list ``cfg[key]`` is a whole number (the registry checks the declared minimum)."""
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in cfg[key]):
        from scepter_like.errors import ConfigError

        raise ConfigError(f'{cfg.path_of(key)}: sizes must be positive integers, got {cfg[key]!r}')


@MODELS.register_class()
class MLP(BaseModel, nn.Sequential):
    """Fully connected layers ``IN_DIM -> HIDDEN_DIMS... -> OUT_DIM``; inputs are flattened.

    The layers are the module's own children (as in torchvision's MLP), so a call runs
    them directly: one module call less per step than a wrapped ``nn.Sequential``.
    """

    SIZE_KEYS = {'input': 'IN_DIM', 'output': 'OUT_DIM'}
    para_dict = {
        'IN_DIM': {'value': 64, 'description': 'input features (inputs are flattened)', 'min': 1},
        'HIDDEN_DIMS': {'value': [256, 256], 'description': 'widths of the hidden layers', 'min': 1},
        'OUT_DIM': {'value': 10, 'description': 'output features', 'min': 1},
        'ACTIVATION': {'value': 'relu', 'description': 'relu | gelu | tanh | silu | sin', 'choices': list(ACTIVATIONS)},
        'DROPOUT': {'value': 0.0, 'description': 'dropout after each hidden layer', 'min': 0.0, 'below': 1.0},
        'INIT': {
            'value': 'default',
            'description': "linear weights: 'default' (torch's) | 'glorot_normal' | 'glorot_uniform' (Xavier, zero"
            ' biases)',
            'choices': ['default', *INITS],
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        act = ACTIVATIONS[cfg.ACTIVATION]
        check_whole_sizes(cfg, 'HIDDEN_DIMS')
        dim = cfg.IN_DIM
        for width in cfg.HIDDEN_DIMS:
            self.extend([nn.Linear(dim, width), act()])
            if cfg.DROPOUT > 0:
                self.append(nn.Dropout(cfg.DROPOUT))
            dim = width
        self.append(nn.Linear(dim, cfg.OUT_DIM))
        if cfg.INIT in INITS:
            for layer in self:
                if isinstance(layer, nn.Linear):
                    INITS[cfg.INIT](layer.weight)
                    nn.init.zeros_(layer.bias)

    def forward(self, x):
        if x.dim() > 2:
            x = x.flatten(1)
        for layer in self:
            x = layer(x)
        return x


@MODELS.register_class()
class ConvNet(BaseModel):
    """Conv-BN-ReLU-pool stages and a linear head over globally pooled features."""

    SIZE_KEYS = {'input': 'IN_CHANNELS', 'output': 'OUT_DIM'}
    para_dict = {
        'IN_CHANNELS': {'value': 1, 'description': 'input image channels', 'min': 1},
        'CHANNELS': {'value': [32, 64], 'description': 'output channels of each conv stage', 'min': 1},
        'OUT_DIM': {'value': 10, 'description': 'output features', 'min': 1},
        'BATCH_NORM': {'value': True, 'description': 'BatchNorm after each conv'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        check_whole_sizes(cfg, 'CHANNELS')
        layers, ch = [], cfg.IN_CHANNELS
        for i, out in enumerate(cfg.CHANNELS):
            layers.append(nn.Conv2d(ch, out, 3, padding=1, bias=not cfg.BATCH_NORM))
            if cfg.BATCH_NORM:
                layers.append(nn.BatchNorm2d(out))
            layers.append(nn.ReLU())
            if i < len(cfg.CHANNELS) - 1:
                layers.append(nn.MaxPool2d(2))
            ch = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(ch, cfg.OUT_DIM)

    def forward(self, x):
        if x.dim() == 3:
            x = x.unsqueeze(1)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


@MODELS.register_class()
class GlobalAveragePooling(BaseModel):
    """scepter's neck: the mean over the DIM spatial axes, [B, C, ...] -> [B, C]; a [B, C] input passes as is."""

    para_dict = {'DIM': {'value': 2, 'description': 'spatial axes of the input: 1, 2 or 3', 'choices': [1, 2, 3]}}
    ARCH_KEYS = ('DIM',)  # holds no weights

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.axes = tuple(range(-cfg.DIM, 0))

    def pooled(self, x):
        return x if x.dim() == 2 else torch.flatten(x.mean(self.axes), 1)

    def forward(self, x):
        return tuple(self.pooled(t) for t in x) if isinstance(x, tuple) else self.pooled(x)


@MODELS.register_class()
class ClassifierHead(BaseModel):
    """scepter's classification head: dropout, then a linear layer ``DIM -> NUM_CLASSES``."""

    SIZE_KEYS = {'input': 'DIM', 'output': 'NUM_CLASSES'}
    para_dict = {
        'DIM': {'value': 512, 'description': 'input features', 'min': 1},
        'NUM_CLASSES': {'value': 10, 'description': 'classes (output features)', 'min': 1},
        'DROPOUT_RATE': {'value': 0.0, 'description': 'dropout before the linear layer', 'min': 0, 'below': 1},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.dropout = nn.Dropout(cfg.DROPOUT_RATE) if cfg.DROPOUT_RATE > 0 else nn.Identity()
        self.fc = nn.Linear(cfg.DIM, cfg.NUM_CLASSES)

    def forward(self, x):
        return self.fc(self.dropout(x.flatten(1) if x.dim() > 2 else x))
