"""scepter's TRANSFORMS on real images: what each does, the per-sample generator, backends and one-line errors."""

import random
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from scepter_like.config import Config
from scepter_like.errors import ConfigError, DataError, RegistryError
from scepter_like.transform import TRANSFORMS, build_pipeline
from scepter_like.transform.image import random_resized_box


def build(name, **keys):
    return TRANSFORMS.build(Config({'T': {'NAME': name, **keys}}).T)


@pytest.fixture
def rgb():
    """A 24 x 40 (height x width) RGB image with distinct pixels."""
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, size=(24, 40, 3), dtype=np.uint8))


def test_resize_sets_the_shorter_side_or_the_exact_size(rgb):
    assert build('Resize', SIZE=12)({'img': rgb})['img'].size == (20, 12)  # PIL size is (width, height)
    assert build('Resize', SIZE=[10, 16])({'img': rgb})['img'].size == (16, 10)
    same = build('Resize', SIZE=24)({'img': rgb})['img']
    assert np.array_equal(np.asarray(same), np.asarray(rgb))


def test_center_crop_takes_the_middle(rgb):
    out = build('CenterCrop', SIZE=[10, 20])({'img': rgb})['img']
    assert np.array_equal(np.asarray(out), np.asarray(rgb)[7:17, 10:30])


def test_center_crop_offsets_are_torchvisions():
    """torchvision's center_crop pads (crop - size) // 2 before a larger crop; round(-1.5) put the image at 2."""
    small = np.arange(1, 28, dtype=np.uint8).reshape(3, 3, 3)
    out = np.asarray(build('CenterCrop', SIZE=6)({'img': Image.fromarray(small)})['img'])
    expected = np.zeros((6, 6, 3), dtype=np.uint8)
    expected[1:4, 1:4] = small
    assert np.array_equal(out, expected)
    wide = np.random.default_rng(1).integers(0, 256, size=(3, 10, 3), dtype=np.uint8)
    mixed = np.asarray(build('CenterCrop', SIZE=[6, 5])({'img': Image.fromarray(wide)})['img'])
    assert np.array_equal(mixed[1:4], wide[:, 2:7]) and not mixed[[0, 4, 5]].any()  # larger rows, smaller cols
    square = np.random.default_rng(2).integers(0, 256, size=(10, 10, 3), dtype=np.uint8)
    top = int(round((10 - 5) / 2.0))  # torchvision's formula: 2
    crop = np.asarray(build('CenterCrop', SIZE=5)({'img': Image.fromarray(square)})['img'])
    assert np.array_equal(crop, square[top : top + 5, top : top + 5])


def test_random_horizontal_flip_flips_with_probability_p(rgb):
    flipped = build('RandomHorizontalFlip', P=1.0)({'img': rgb}, random.Random(0))['img']
    assert np.array_equal(np.asarray(flipped), np.asarray(rgb)[:, ::-1])
    kept = build('RandomHorizontalFlip', P=0.0)({'img': rgb}, random.Random(0))['img']
    assert np.array_equal(np.asarray(kept), np.asarray(rgb))
    half = build('RandomHorizontalFlip', P=0.5)
    flips = [half({'img': rgb}, random.Random(i))['img'].tobytes() != rgb.tobytes() for i in range(200)]
    assert 70 < sum(flips) < 130


def test_random_resized_crop_size_and_draws_come_from_the_given_generator(rgb):
    crop = build('RandomResizedCrop', SIZE=16, SCALE=[0.3, 0.6])
    outs = [np.asarray(crop({'img': rgb}, random.Random(seed))['img']) for seed in ('a', 'a', 'b')]
    assert outs[0].shape == (16, 16, 3)
    assert np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[0], outs[2])


def test_random_resized_crop_crops_then_resizes_as_torchvision(rgb, monkeypatch):
    """torchvision's resized_crop (what scepter calls) resizes the crop; resize(box=) also filters pixels past it."""
    import scepter_like.transform.image as image_module

    top, left, h, w = 3, 5, 13, 17
    monkeypatch.setattr(image_module, 'random_resized_box', lambda *args: (top, left, h, w))
    box = (left, top, left + w, top + h)
    for interpolation, resample in (('bilinear', Image.Resampling.BILINEAR), ('bicubic', Image.Resampling.BICUBIC)):
        out = build('RandomResizedCrop', SIZE=[9, 11], INTERPOLATION=interpolation)({'img': rgb}, random.Random(0))
        expected = np.asarray(rgb.crop(box).resize((11, 9), resample))
        assert np.array_equal(np.asarray(out['img']), expected)
        assert not np.array_equal(expected, np.asarray(rgb.resize((11, 9), resample, box=box)))  # what it was


def test_random_resized_box_keeps_area_and_aspect_within_bounds():
    rng = random.Random(1)
    for _ in range(300):
        top, left, h, w = random_resized_box(50, 80, (0.2, 0.9), (np.log(0.5), np.log(2.0)), rng)
        assert 0 <= top <= 50 - h and 0 <= left <= 80 - w
        assert 0.18 * 4000 <= h * w <= 0.92 * 4000 and 0.45 <= w / h <= 2.2
    # an aspect range the image cannot hold: the central crop at the nearest allowed aspect
    assert random_resized_box(10, 100, (0.9, 1.0), (np.log(1.0), np.log(1.0)), random.Random(0)) == (0, 45, 10, 10)


def test_random_crop_pads_then_crops(rgb):
    crop = build('RandomCrop', SIZE=[24, 40], PADDING=4)
    outs = [np.asarray(crop({'img': rgb}, random.Random(i))['img']) for i in range(20)]
    assert all(o.shape == (24, 40, 3) for o in outs)
    assert any(not np.array_equal(o, np.asarray(rgb)) for o in outs)  # shifted by up to 4 pixels
    edge = build('RandomCrop', SIZE=[32, 48], PADDING=[4, 4], PADDING_MODE='edge')({'img': rgb}, random.Random(0))
    assert np.array_equal(np.asarray(edge['img']), np.pad(np.asarray(rgb), ((4, 4), (4, 4), (0, 0)), mode='edge'))
    with pytest.raises(DataError, match=r'smaller than SIZE \[30, 40\]; set PAD_IF_NEEDED: true'):
        build('RandomCrop', SIZE=[30, 40])({'img': rgb}, random.Random(0))
    padded = build('RandomCrop', SIZE=[30, 40], PAD_IF_NEEDED=True)({'img': rgb}, random.Random(0))['img']
    assert padded.size == (40, 30)


def test_normalize_with_0_255_values_warns_with_the_values_to_use(caplog):
    build('Normalize', MEAN=[0.485, 0.456, 0.406], STD=[0.229, 0.224, 0.225])
    assert 'look like 0-255' not in caplog.text
    build('Normalize', MEAN=[127.5, 127.5, 127.5], STD=[63.75, 63.75, 63.75])  # an mmcv / cv2 config's
    assert 'MEAN [127.5, 127.5, 127.5] and STD [63.75, 63.75, 63.75] look like 0-255 pixel values' in caplog.text
    assert 'divide them by 255 (MEAN [0.5, 0.5, 0.5], STD [0.25, 0.25, 0.25])' in caplog.text


def test_image_to_tensor_and_normalize(rgb):
    tensor = build('ImageToTensor')({'img': rgb})['img']
    assert tensor.dtype == torch.float32 and tensor.shape == (3, 24, 40)
    assert torch.equal(tensor, torch.from_numpy(np.array(rgb)).permute(2, 0, 1).float() / 255)
    norm = build('Normalize', MEAN=[0.5, 0.25, 0.0], STD=[0.5, 0.25, 2.0])({'img': tensor.clone()})['img']
    expected = (tensor - torch.tensor([0.5, 0.25, 0.0]).view(3, 1, 1)) / torch.tensor([0.5, 0.25, 2.0]).view(3, 1, 1)
    assert torch.allclose(norm, expected)
    # one value for every channel, as torchvision's Normalize (and so scepter's) takes it
    one = build('Normalize', MEAN=[0.5], STD=[0.25])({'img': tensor.clone()})['img']
    assert torch.allclose(one, (tensor - 0.5) / 0.25)
    with pytest.raises(DataError, match=r'3 channel\(s\) \(image files are read as RGB\), MEAN and STD give 2: give 3'):
        build('Normalize', MEAN=[0.5, 0.5], STD=[0.25, 0.25])({'img': tensor.clone()})


def test_key_transforms():
    item = {'img': np.ones((2, 2), dtype=np.float32), 'label': np.int64(3), 'meta': {'img_path': 'a.png', 'x': 1}}
    out = build('ToTensor', KEYS=['img', 'label'])(dict(item))
    assert out['img'].shape == (2, 2) and out['label'].shape == () and out['label'].dtype == torch.int64
    assert isinstance(build('ToNumpy', INPUT_KEY='img', OUTPUT_KEY='arr')(dict(out))['arr'], np.ndarray)
    selected = build('Select', KEYS=['label'], META_KEYS=['img_path'])(dict(item))
    assert selected == {'label': 3, 'meta': {'img_path': 'a.png'}}
    renamed = build('Rename', INPUT_KEY=['img'], OUTPUT_KEY=['image'])(dict(item))
    assert set(renamed) == {'image', 'label', 'meta'} and renamed['image'] is item['img']
    assert build('Identity')(item) is item


def test_a_list_of_input_keys_transforms_each(rgb):
    out = build('ImageToTensor', INPUT_KEY=['a', 'b'], OUTPUT_KEY=['x', 'y'])({'a': rgb, 'b': rgb.crop((0, 0, 4, 4))})
    assert out['x'].shape == (3, 24, 40) and out['y'].shape == (3, 4, 4)
    with pytest.raises(ConfigError, match=r'T\.OUTPUT_KEY: 1 output key\(s\) for 2 input key\(s\)'):
        build('ImageToTensor', INPUT_KEY=['a', 'b'], OUTPUT_KEY='x')


def test_the_pipeline_passes_the_generator_to_random_transforms_only(rgb):
    cfg = Config({'D': {'TRANSFORMS': [{'NAME': 'RandomResizedCrop', 'SIZE': 8}, {'NAME': 'ImageToTensor'}]}})
    pipeline = build_pipeline(cfg.D.TRANSFORMS, where='D.TRANSFORMS')
    first = pipeline({'img': rgb}, random.Random('0/0/5'))['img']
    assert torch.equal(first, pipeline({'img': rgb}, random.Random('0/0/5'))['img'])
    assert cfg.D.TRANSFORMS[0].SCALE == [0.08, 1.0]  # defaults filled in place: the run's config shows them
    assert pipeline.RANDOM and not build_pipeline([{'NAME': 'ImageToTensor'}]).RANDOM  # who needs a generator
    assert type(build_pipeline([])).__name__ == 'Identity'


def test_an_image_of_another_backend_type_is_converted(rgb):
    array = np.array(rgb)
    out = build('CenterCrop', SIZE=[10, 20])({'img': array})['img']
    assert isinstance(out, Image.Image) and np.array_equal(np.asarray(out), array[7:17, 10:30])
    chw = torch.from_numpy(array).permute(2, 0, 1)
    assert np.array_equal(np.asarray(build('Resize', SIZE=[24, 40])({'img': chw})['img']), array)


def test_load_image_from_file_reads_meta_img_path(rgb, tmp_path):
    rgb.save(tmp_path / 'a.png')
    item = build('LoadImageFromFile')({'meta': {'prefix': str(tmp_path), 'img_path': 'a.png'}})
    assert np.array_equal(np.asarray(item['img']), np.asarray(rgb)) and item['meta']['rgb_order'] == 'RGB'
    bgr = build('LoadImageFromFile', RGB_ORDER='BGR')({'meta': {'img_path': str(tmp_path / 'a.png')}})['img']
    assert np.array_equal(np.asarray(bgr), np.asarray(rgb)[:, :, ::-1])
    with pytest.raises(DataError, match=r'^T \(LoadImageFromFile\): cannot read image .*nope\.png \('):
        build('LoadImageFromFile')({'meta': {'img_path': str(tmp_path / 'nope.png')}})
    with pytest.raises(DataError, match=r"the sample has no 'meta' \(its file paths\); its keys: img;"):
        build('LoadImageFromFile')({'img': rgb})


def test_transparent_pixels_read_as_white_as_scepter_lays_them(tmp_path):
    """scepter's pillow_convert pastes RGBA and palette images on white; convert('RGB') gave the hidden colour."""
    from scepter_like.data.registry import DATASETS

    rgba = np.zeros((2, 2, 4), dtype=np.uint8)  # transparent black, except one opaque red pixel
    rgba[0, 1] = [200, 10, 20, 255]
    (tmp_path / 'c').mkdir()
    Image.fromarray(rgba, 'RGBA').save(tmp_path / 'c' / 'rgba.png')
    palette = Image.new('P', (2, 2), 0)
    palette.putpalette([0, 0, 0, 30, 60, 90] + [0] * 762)
    palette.putpixel((1, 0), 1)
    palette.save(tmp_path / 'c' / 'palette.png', transparency=0)  # index 0 (black) is transparent
    assert Image.open(tmp_path / 'c' / 'palette.png').mode == 'P'
    opaque = {'rgba.png': [200, 10, 20], 'palette.png': [30, 60, 90]}
    dataset = DATASETS.build({'NAME': 'ImageFolderDataset', 'DATA_ROOT': str(tmp_path)})
    for i, (path, _) in enumerate(dataset.samples):
        loaded = build('LoadImageFromFile')({'meta': {'img_path': path}})['img']
        for img in (loaded, dataset[i]['img']):
            array = np.asarray(img)
            assert img.mode == 'RGB' and array[0, 0].tolist() == [255, 255, 255], path
            assert array[0, 1].tolist() == opaque[path.rsplit('/', 1)[-1]], path


def test_cv2_backend_matches_pillow_on_exact_operations(rgb, tmp_path):
    pytest.importorskip('cv2')
    array = np.asarray(rgb)
    crop = build('CenterCrop', SIZE=[10, 20], BACKEND='cv2')({'img': rgb})['img']
    assert isinstance(crop, np.ndarray) and np.array_equal(crop, array[7:17, 10:30])
    flip = build('RandomHorizontalFlip', P=1.0, BACKEND='cv2')({'img': array}, random.Random(0))['img']
    assert np.array_equal(flip, array[:, ::-1])
    resized = build('Resize', SIZE=[12, 20], BACKEND='cv2')({'img': array})['img']
    assert resized.shape == (12, 20, 3)
    tensor = build('ImageToTensor', BACKEND='cv2')({'img': array})['img']
    assert torch.equal(tensor, build('ImageToTensor')({'img': rgb})['img'])
    rgb.save(tmp_path / 'a.png')
    decoded = build('LoadCvImageFromFile')({'meta': {'img_path': str(tmp_path / 'a.png')}})['img']
    assert isinstance(decoded, np.ndarray) and np.array_equal(decoded, array)


@pytest.mark.parametrize(
    'backend, module, package',
    [('torchvision', 'torchvision', 'torchvision'), ('cv2', 'cv2', 'opencv-python-headless')],
)
def test_a_backend_that_is_not_installed_is_one_error_naming_the_package(backend, module, package, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # what a missing package looks like to import
    with pytest.raises(ConfigError) as e:
        build('Resize', BACKEND=backend)
    assert str(e.value).startswith(f'T.BACKEND: BACKEND {backend} needs the {package} package, which is not installed;')
    assert f'pip install {package}' in str(e.value) and '\n' not in str(e.value)


def test_unknown_transform_name_suggests_the_close_one():
    with pytest.raises(
        RegistryError, match=r"'RandomResizeCrop' is not in registry TRANSFORMS; did you mean RandomResizedCrop"
    ):
        build('RandomResizeCrop')
    with pytest.raises(
        ConfigError, match=r'T\.SCALES: unknown key for TRANSFORMS\.RandomResizedCrop; did you mean SCALE'
    ):
        build('RandomResizedCrop', SCALES=[0.5, 1.0])


@pytest.mark.parametrize(
    'name, instead',
    [
        ('TensorToGPU', 'the solver moves whole batches to the device'),
        ('FlexibleResize', 'use Resize then CenterCrop'),
        ('RenameMeta', "do it in the dataset's _get"),
    ],
)
def test_a_transform_scepter_has_and_this_project_leaves_out_says_what_to_do_instead(name, instead):
    """Not 'did you mean ToTensor?' (TensorToGPU), 'Resize?' (FlexibleResize) or 'Rename?' (RenameMeta)."""
    with pytest.raises(RegistryError) as e:
        build(name)
    assert f"{name!r} is scepter's and not in registry TRANSFORMS here: " in str(e.value)
    assert instead in str(e.value) and 'did you mean' not in str(e.value)


def test_a_missing_input_key_names_the_keys_the_sample_has(rgb):
    with pytest.raises(DataError) as e:
        build('RandomResizedCrop', INPUT_KEY='image')({'img': rgb, 'label': 1}, random.Random(0))
    assert str(e.value) == (
        "T (RandomResizedCrop): the sample has no 'image' (its INPUT_KEY); its keys: img, label;"
        " set INPUT_KEY to one of them, or put the transform that makes 'image' before this one"
    )


def test_bad_values_are_config_errors():
    with pytest.raises(ConfigError, match=r'T\.SCALE: expected \[low, high\] with 0 < low <= high'):
        build('RandomResizedCrop', SCALE=[0.9, 0.1])
    with pytest.raises(ConfigError, match=r'T\.SIZE: expected a positive int or \[height, width\]'):
        build('CenterCrop', SIZE=[1, 2, 3])
    with pytest.raises(ConfigError, match=r'T\.STD: a standard deviation of 0'):
        build('Normalize', MEAN=[0.5], STD=[0])
    with pytest.raises(ConfigError, match=r"T\.INTERPOLATION: must be one of 'bilinear', 'nearest', 'bicubic'"):
        build('Resize', INTERPOLATION='lanczos')


def test_wrong_image_types_are_one_line(rgb):
    with pytest.raises(DataError, match=r'Normalize takes a float C x H x W tensor, got a PIL image \(RGB, 40x24\)'):
        build('Normalize', MEAN=[0.5] * 3, STD=[0.5] * 3)({'img': rgb})
    floats = torch.zeros(3, 4, 4)
    with pytest.raises(DataError, match=r'got a float32 tensor of shape \[3, 4, 4\] \(ImageToTensor gives that'):
        build('Resize', SIZE=2)({'img': floats})
    with pytest.raises(DataError, match=r'cannot make a tensor of a PIL image .*; use ImageToTensor for images'):
        build('ToTensor', KEYS=['img'])({'img': rgb})


def test_the_config_template_of_a_transform():
    from scepter_like.tools.config_template import template
    from scepter_like.utils.registries import all_registries

    text = template(all_registries(), 'RandomResizedCrop')
    assert text.startswith('# TRANSFORMS.RandomResizedCrop\nNAME: RandomResizedCrop\n')
    assert 'SCALE: [0.08, 1.0]  # bounds of the crop area' in text and 'BACKEND: pillow' in text


def test_a_transform_that_returns_no_dict_is_named():
    class Forgetful:
        def __call__(self, item):
            item['x'] = 1  # and no return

    from scepter_like.transform.compose import Compose

    with pytest.raises(
        DataError, match=r'^TRANSFORMS Forgetful returned NoneType; a transform returns the sample dict'
    ):
        Compose.of([build('Identity'), Forgetful()])({'img': 0})
