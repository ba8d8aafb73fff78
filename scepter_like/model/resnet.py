"""scepter's ResNet backbone (He et al., 2015) in plain torch: image [B, 3, H, W] -> feature map [B, C, h, w].

C is 512 for DEPTH 18 / 34 and 2048 for 50 / 101 / 152 (HEAD.DIM must match).  The stem
is ImageNet's for KERNEL_SIZE 7 (7x7 conv stride 2, ReLU, 3x3 max pool stride 2: the
other stem keys are not read, as in scepter); KERNEL_SIZE 3 gives a 3x3 conv of stride
FIRST_CONV_STRIDE, then a ReLU (USE_RELU) and a 3x3 max pool of stride
FIRST_MAX_POOL_STRIDE (USE_MAXPOOL): the CIFAR stem of scepter's example is 3 / stride 1 /
no max pool.  The layers carry torchvision's names under ``model.`` (scepter's layout), so
torchvision's ImageNet files and scepter's checkpoints load.  PRETRAINED names a local
file: nothing is downloaded.
"""

from torch import nn

from scepter_like.errors import ConfigError
from scepter_like.model.base import BaseModel
from scepter_like.model.registry import BACKBONES
from scepter_like.utils.checkpoint import load_state_dict_checked, load_weights_file


class BasicBlock(nn.Module):
    """Two 3x3 convs and a shortcut (ResNet-18 / 34)."""

    expansion = 1

    def __init__(self, in_channels, channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample = shortcut(in_channels, channels, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    """1x1, 3x3 (strided: torchvision's ResNet v1.5) and 1x1 convs with 4x the channels out (ResNet-50 and deeper)."""

    expansion = 4

    def __init__(self, in_channels, channels, stride=1):
        super().__init__()
        out_channels = channels * self.expansion
        self.conv1 = nn.Conv2d(in_channels, channels, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv3 = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = shortcut(in_channels, out_channels, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


def shortcut(in_channels, out_channels, stride):
    """None (the identity) when the shapes agree, else a strided 1x1 conv and batch norm."""
    if stride == 1 and in_channels == out_channels:
        return None
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels))


# DEPTH -> (block, blocks per stage)
DEPTHS = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class ResNetLayers(nn.Module):
    """The stem and four stages, named as torchvision names them (conv1, bn1, layer1 ... layer4)."""

    def __init__(self, depth, kernel_size, use_relu, use_maxpool, conv_stride, pool_stride):
        super().__init__()
        block, blocks = DEPTHS[depth]
        if kernel_size == 7:
            kernel_size, conv_stride, use_relu, use_maxpool, pool_stride = 7, 2, True, True, 2
        self.conv1 = nn.Conv2d(3, 64, kernel_size, conv_stride, kernel_size // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True) if use_relu else nn.Identity()
        self.maxpool = nn.MaxPool2d(3, pool_stride, 1) if use_maxpool else nn.Identity()
        channels = 64
        for stage, (width, count) in enumerate(zip((64, 128, 256, 512), blocks), 1):
            layers = []
            for i in range(count):
                layers.append(block(channels, width, 2 if stage > 1 and i == 0 else 1))
                channels = width * block.expansion
            self.add_module(f'layer{stage}', nn.Sequential(*layers))
        self.out_channels = channels
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


@BACKBONES.register_class('ResNet')
class ResNet(BaseModel):
    para_dict = {
        'DEPTH': {'value': 18, 'description': 'layers: 18 | 34 | 50 | 101 | 152', 'choices': list(DEPTHS)},
        'KERNEL_SIZE': {
            'value': 7,
            'description': "first conv: 7 (ImageNet's stem; the 4 keys below unread) or 3 (the keys below shape it)",
            'choices': [3, 7],
        },
        'USE_RELU': {'value': True, 'description': 'ReLU after the first conv (KERNEL_SIZE 3)'},
        'USE_MAXPOOL': {'value': True, 'description': 'max pool after the first conv (KERNEL_SIZE 3)'},
        'FIRST_CONV_STRIDE': {'value': 1, 'description': 'stride of the first conv (KERNEL_SIZE 3)', 'choices': [1, 2]},
        'FIRST_MAX_POOL_STRIDE': {
            'value': 1,
            'description': 'stride of the first max pool (KERNEL_SIZE 3)',
            'choices': [1, 2],
        },
        'PRETRAINED': {
            'value': False,
            'type': (bool, str, type(None)),
            'description': "false, or a local .pth / .safetensors of the layers (torchvision's ImageNet files too;"
            ' fc.* is dropped); nothing is downloaded',
        },
    }

    # the stem keys change the network but no weight's shape: a checkpoint would load into another stem silently
    ARCH_KEYS = ('DEPTH', 'KERNEL_SIZE', 'USE_RELU', 'USE_MAXPOOL', 'FIRST_CONV_STRIDE', 'FIRST_MAX_POOL_STRIDE')

    @classmethod
    def arch_keys(cls, config):
        """ImageNet's stem (KERNEL_SIZE 7) reads none of the stem keys."""
        return cls.ARCH_KEYS[:2] if config.get('KERNEL_SIZE', 7) == 7 else cls.ARCH_KEYS

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.model = ResNetLayers(
            cfg.DEPTH, cfg.KERNEL_SIZE, cfg.USE_RELU, cfg.USE_MAXPOOL, cfg.FIRST_CONV_STRIDE, cfg.FIRST_MAX_POOL_STRIDE
        )
        self.out_channels = self.model.out_channels
        if cfg.PRETRAINED is True:
            raise ConfigError(
                f'{cfg.path_of("PRETRAINED")}: true would download ImageNet weights, and nothing is downloaded here;'
                f' give the path of a local file instead (e.g. resnet{cfg.DEPTH}-*.pth from download.pytorch.org)'
            )
        if cfg.PRETRAINED:
            self.load_layers(cfg.PRETRAINED)

    def load_layers(self, path):
        """Load the layers' state dict: torchvision's keys (``conv1.weight``, ...; ``fc.*`` dropped), ``model.*``
        (this backbone's own), or a Classifier's ``backbone.model.*`` (an earlier run's checkpoint; its head
        dropped)."""
        state = {k: v for k, v in load_weights_file(path).items() if not k.startswith('fc.')}
        for prefix in ('backbone.model.', 'model.'):
            if any(k.startswith(prefix) for k in state):
                state = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
                break
        load_state_dict_checked(self.model, state, path)
        if self.logger is not None:
            self.logger.info(f'ResNet-{self.cfg.DEPTH}: loaded pretrained layers from {path}')

    def forward(self, x):
        return self.model(x)
