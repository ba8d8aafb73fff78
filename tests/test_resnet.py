"""scepter's ResNet backbone, GlobalAveragePooling neck and ClassifierHead under scepter's keys."""

import functools

import pytest
import torch

from scepter_like.config import Config
from scepter_like.errors import CheckpointError, ConfigError
from scepter_like.model.description import model_from_description
from scepter_like.model.registry import MODELS
from scepter_like.model.size_mismatch import explain
from scepter_like.utils.checkpoint import save_safetensors


def resnet(**keys):
    return MODELS.build(Config({'B': {'NAME': 'ResNet', **keys}}).B)


@functools.lru_cache
def shared_resnet(depth=18, kernel_size=7, **keys):
    """One network per set of keys for the tests that only read it (building one takes a while)."""
    return resnet(DEPTH=depth, KERNEL_SIZE=kernel_size, **keys)


@pytest.mark.parametrize(
    'keys, side, channels',
    [
        ({}, 1, 512),  # ImageNet's stem: /4, then three /2 stages: 16 -> 1
        ({'kernel_size': 3, 'USE_MAXPOOL': False}, 2, 512),  # scepter's CIFAR stem: no reduction before layer2
        ({'kernel_size': 3, 'FIRST_CONV_STRIDE': 2, 'FIRST_MAX_POOL_STRIDE': 2}, 1, 512),
        ({'depth': 50}, 1, 2048),
    ],
)
@torch.no_grad()
def test_stems_and_depths_give_the_feature_map(keys, side, channels):
    net = shared_resnet(**keys)
    assert net(torch.randn(2, 3, 16, 16)).shape == (2, channels, side, side)
    assert net.out_channels == channels


def test_parameter_counts_are_torchvisions_without_fc():
    # torchvision: resnet18 11,689,512 and resnet50 25,557,032 parameters, minus fc (512 / 2048 x 1000 + 1000)
    assert sum(p.numel() for p in shared_resnet(18).parameters()) == 11_689_512 - 513_000
    assert sum(p.numel() for p in shared_resnet(50).parameters()) == 25_557_032 - 2_049_000


def test_layers_carry_torchvisions_names_under_model():
    keys = set(shared_resnet(18).state_dict())
    for name in ('conv1.weight', 'bn1.running_var', 'layer1.0.conv1.weight', 'layer2.0.downsample.0.weight'):
        assert f'model.{name}' in keys
    assert 'model.layer4.1.bn2.num_batches_tracked' in keys and not any('fc' in k for k in keys)


def test_pretrained_loads_a_local_torchvision_file_and_drops_fc(tmp_path):
    source = shared_resnet(18)
    state = {k.removeprefix('model.'): v for k, v in source.state_dict().items()}
    state.update({'fc.weight': torch.zeros(1000, 512), 'fc.bias': torch.zeros(1000)})
    torch.save(state, tmp_path / 'resnet18.pth')
    loaded = resnet(DEPTH=18, PRETRAINED=str(tmp_path / 'resnet18.pth'))
    for key, value in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    save_safetensors(source.state_dict(), str(tmp_path / 'backbone.safetensors'))  # model.* keys
    again = resnet(DEPTH=18, PRETRAINED=str(tmp_path / 'backbone.safetensors'))
    assert torch.equal(again.model.conv1.weight, source.model.conv1.weight)
    # an earlier Classifier run's weights: backbone.model.* beside its head (dropped), as a new head finetunes
    classifier = {f'backbone.{k}': v for k, v in source.state_dict().items()}
    classifier.update({'head.fc.weight': torch.zeros(3, 512), 'head.fc.bias': torch.zeros(3)})
    save_safetensors(classifier, str(tmp_path / 'classifier.safetensors'))
    third = resnet(DEPTH=18, PRETRAINED=str(tmp_path / 'classifier.safetensors'))
    assert torch.equal(third.model.layer4[1].conv2.weight, source.model.layer4[1].conv2.weight)
    with pytest.raises(
        CheckpointError, match=r'resnet18\.pth do not fit the model — mis-shaped: conv1\.weight.*model$'
    ):
        resnet(DEPTH=18, KERNEL_SIZE=3, PRETRAINED=str(tmp_path / 'resnet18.pth'))  # a 3x3 first conv, not 7x7


def test_pretrained_true_is_an_error_not_a_download():
    with pytest.raises(ConfigError, match=r'B\.PRETRAINED: true would download ImageNet weights, and nothing is'):
        resnet(PRETRAINED=True)


def test_the_description_leaves_pretrained_out(tmp_path):
    torch.save(shared_resnet(18).model.state_dict(), tmp_path / 'r.pth')
    model = MODELS.build({'NAME': 'Classifier', 'BACKBONE': {'NAME': 'ResNet', 'PRETRAINED': str(tmp_path / 'r.pth')}})
    desc = model.describe()
    assert 'PRETRAINED' not in desc['config']['BACKBONE']
    (tmp_path / 'r.pth').unlink()  # a description rebuilds without the file
    rebuilt = model_from_description(desc, 'test')
    assert rebuilt.backbone.cfg.PRETRAINED is False


def test_global_average_pooling():
    gap = MODELS.build({'NAME': 'GlobalAveragePooling', 'DIM': 2})
    x = torch.randn(2, 5, 3, 4)
    assert torch.allclose(gap(x), x.mean((2, 3)))
    flat = torch.randn(2, 5)
    assert gap(flat) is flat
    pair = gap((x, x))
    assert isinstance(pair, tuple) and torch.allclose(pair[1], x.mean((2, 3)))
    video = MODELS.build({'NAME': 'GlobalAveragePooling', 'DIM': 3})
    assert video(torch.randn(2, 5, 2, 3, 4)).shape == (2, 5)


def test_a_head_that_does_not_fit_the_backbone_names_its_dim():
    cfg = Config(
        {
            'MODEL': {
                'NAME': 'Classifier',
                'BACKBONE': {'NAME': 'ResNet', 'DEPTH': 18},
                'NECK': {'NAME': 'GlobalAveragePooling'},
                'HEAD': {'NAME': 'ClassifierHead', 'DIM': 2048, 'NUM_CLASSES': 10},
            }
        }
    )
    model = MODELS.build(cfg.MODEL)
    batch = {'img': torch.randn(2, 3, 16, 16), 'label': torch.tensor([0, 1])}
    with pytest.raises(RuntimeError) as e:
        model(**batch)
    assert 'set MODEL.HEAD.DIM (now 2048) to fit the data' in explain(model, batch, e.value)


def test_a_checkpoint_of_another_stem_is_refused_naming_the_nested_key():
    """A stem of another stride or without the max pool has the same weights: without comparing the parts' keys
    the weights would load silently into the wrong network."""
    from scepter_like.model.description import architecture_differences, check_architecture

    backbone = {'NAME': 'ResNet', 'KERNEL_SIZE': 3, 'FIRST_CONV_STRIDE': 1, 'USE_MAXPOOL': False}
    model = MODELS.build(
        Config({'M': {'NAME': 'Classifier', 'BACKBONE': backbone, 'NECK': {'NAME': 'GlobalAveragePooling'}}}).M
    )
    saved = model.describe()
    saved['config']['BACKBONE'].update(FIRST_CONV_STRIDE=2, USE_MAXPOOL=True)
    saved['config']['NECK']['DIM'] = 1
    assert architecture_differences(saved, model) == [
        "MODEL.BACKBONE.USE_MAXPOOL: the file's True, the config's False",
        "MODEL.BACKBONE.FIRST_CONV_STRIDE: the file's 2, the config's 1",
        "MODEL.NECK.DIM: the file's 1, the config's 2",
    ]
    with pytest.raises(CheckpointError, match=r'^w\.pth holds another architecture .*: MODEL\.BACKBONE\.USE_MAXPOOL'):
        check_architecture(saved, model, 'w.pth', 'fix')
    saved['config']['NECK'] = None
    expected = "MODEL.NECK: the file's None, the config's a GlobalAveragePooling"
    assert architecture_differences(saved, model)[-1] == expected
    imagenet = model.describe()
    imagenet['config']['BACKBONE'].update(KERNEL_SIZE=7, FIRST_CONV_STRIDE=2)
    model.cfg.BACKBONE['KERNEL_SIZE'] = 7  # ImageNet's stem reads no stem key: only KERNEL_SIZE can differ
    assert architecture_differences(imagenet, model) == []
