"""scepter's image transforms: geometry and flips on the BACKEND's image type, then ImageToTensor and Normalize.

Each reads ``INPUT_KEY`` (a key, or a list of keys each transformed on its own) and writes
``OUTPUT_KEY`` (as many keys, paired in order).  The random ones (``RANDOM = True``) draw
from the generator the pipeline passes them, the sample's own (``random`` when called
without one); each key draws its own parameters, as in scepter.
"""

import logging
import math
import random

import torch

from scepter_like.errors import ConfigError, DataError
from scepter_like.transform.backends import BACKENDS, INTERPOLATIONS, describe_value, image_backend
from scepter_like.transform.keys import key_pairs, missing_key, transform_name
from scepter_like.transform.registry import TRANSFORMS

_INTERPOLATION = {
    'value': 'bilinear',
    'description': 'resampling: bilinear | nearest | bicubic',
    'choices': list(INTERPOLATIONS),
}
_PADDING_MODES = ('constant', 'edge', 'reflect', 'symmetric')


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def size_pair(cfg, key='SIZE'):
    """``cfg[key]`` as (height, width): an int is a square, ``[height, width]`` a rectangle."""
    value = cfg[key]
    pair = [value, value] if _is_int(value) else list(value)
    if len(pair) != 2 or not all(_is_int(v) and v > 0 for v in pair):
        raise ConfigError(f'{cfg.path_of(key)}: expected a positive int or [height, width], got {value!r}')
    return tuple(pair)


def bounds_pair(cfg, key):
    """``cfg[key]`` as (low, high) with 0 < low <= high."""
    value = cfg[key]
    numbers = len(value) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not numbers or not 0 < value[0] <= value[1]:
        raise ConfigError(f'{cfg.path_of(key)}: expected [low, high] with 0 < low <= high, got {value!r}')
    return float(value[0]), float(value[1])


def random_resized_box(height, width, scale, log_ratio, rng, attempts=10):
    """(top, left, height, width) of a crop covering a ``scale`` share of the area at an aspect in ``exp(log_ratio)``.

    Draws up to ``attempts`` times (area share, then log-aspect, then position); when none
    fits, the whole image cropped centrally to the nearest allowed aspect ratio.
    """
    area = height * width
    for _ in range(attempts):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    aspect = width / height
    low, high = math.exp(log_ratio[0]), math.exp(log_ratio[1])
    h, w = height, width
    if aspect < low:
        h = round(width / low)
    elif aspect > high:
        w = round(height * high)
    return (height - h) // 2, (width - w) // 2, h, w


def center_offset(size, crop):
    """Where a centred ``crop`` of ``size`` pixels starts, as torchvision's ``center_crop`` (scepter's) has it.

    A larger crop: torchvision pads ``(crop - size) // 2`` zeros before (the odd one after), so the image starts
    there.  Otherwise ``int(round((size - crop) / 2.0))``, Python's round (half to even) as torchvision writes it.
    """
    if crop > size:
        return -((crop - size) // 2)
    return int(round((size - crop) / 2.0))


class ImageTransform:
    """scepter's base of the image transforms: the keys every one of them takes, and the loop over the keys."""

    para_dict = {
        'INPUT_KEY': {
            'value': 'img',
            'type': (str, list),
            'description': 'sample key of the image (or a list of keys)',
        },
        'OUTPUT_KEY': {'value': 'img', 'type': (str, list), 'description': 'key of the result, one per INPUT_KEY'},
        'BACKEND': {
            'value': 'pillow',
            'description': 'image type and library: pillow | cv2 (opencv-python-headless) | torchvision',
            'choices': list(BACKENDS),
        },
    }
    RANDOM = False

    def __init__(self, cfg, logger=None):
        self.where = transform_name(cfg, self)
        self.pairs = key_pairs(cfg)
        self.ops = image_backend(cfg.BACKEND, cfg.path_of('BACKEND'))

    def __call__(self, item, rng=None):
        if rng is None:
            rng = random
        for source, target in self.pairs:
            try:  # read_key's work, inline: this runs for every image of every sample
                value = item[source]
            except KeyError:
                raise missing_key(item, source, self.where) from None
            item[target] = self.apply(self.image(value), rng)
        return item

    def image(self, value):
        """``value`` as this backend's image type."""
        return self.ops.coerce(value, self.where)

    def apply(self, img, rng):
        raise NotImplementedError


@TRANSFORMS.register_class()
class Resize(ImageTransform):
    para_dict = {
        'SIZE': {
            'value': 224,
            'type': (int, list),
            'description': 'an int: the shorter side becomes SIZE, the aspect kept; [height, width]: exactly that',
        },
        'INTERPOLATION': _INTERPOLATION,
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.size = cfg.SIZE if _is_int(cfg.SIZE) and cfg.SIZE > 0 else size_pair(cfg)
        self.interpolation = cfg.INTERPOLATION

    def output_size(self, height, width):
        if isinstance(self.size, tuple):
            return self.size
        if height <= width:
            return self.size, int(self.size * width / height)
        return int(self.size * height / width), self.size

    def apply(self, img, rng):
        size = self.ops.size(img)
        out = self.output_size(*size)
        return img if out == tuple(size) else self.ops.resize(img, *out, self.interpolation)


@TRANSFORMS.register_class()
class CenterCrop(ImageTransform):
    """The central SIZE of the image; zeros where SIZE exceeds the image (placed as torchvision pads it)."""

    para_dict = {'SIZE': {'value': 224, 'type': (int, list), 'description': 'crop size: an int or [height, width]'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.size = size_pair(cfg)

    def apply(self, img, rng):
        height, width = self.ops.size(img)
        crop_height, crop_width = self.size
        if (height, width) == self.size:
            return img
        top, left = center_offset(height, crop_height), center_offset(width, crop_width)
        return self.ops.crop(img, top, left, crop_height, crop_width)


@TRANSFORMS.register_class()
class RandomResizedCrop(ImageTransform):
    """A random crop (SCALE of the area, aspect within RATIO) resized to SIZE: the usual training augmentation."""

    para_dict = {
        'SIZE': {'value': 224, 'type': (int, list), 'description': 'output size: an int or [height, width]'},
        'SCALE': {'value': [0.08, 1.0], 'description': 'bounds of the crop area, as a share of the image area'},
        'RATIO': {'value': [3.0 / 4.0, 4.0 / 3.0], 'description': 'bounds of the crop aspect ratio (width / height)'},
        'INTERPOLATION': _INTERPOLATION,
    }
    RANDOM = True

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.size = size_pair(cfg)
        self.scale = bounds_pair(cfg, 'SCALE')
        self.log_ratio = tuple(math.log(r) for r in bounds_pair(cfg, 'RATIO'))
        self.interpolation = cfg.INTERPOLATION

    def apply(self, img, rng):
        box = random_resized_box(*self.ops.size(img), self.scale, self.log_ratio, rng)
        return self.ops.resized_crop(img, box, *self.size, self.interpolation)


@TRANSFORMS.register_class()
class RandomCrop(ImageTransform):
    """A random SIZE crop, after PADDING (and, with PAD_IF_NEEDED, padding to SIZE): e.g. CIFAR's pad-4 crop."""

    para_dict = {
        'SIZE': {'value': 224, 'type': (int, list), 'description': 'crop size: an int or [height, width]'},
        'PADDING': {
            'value': None,
            'type': (int, list, type(None)),
            'description': 'pixels added first: n (all sides), [left/right, top/bottom] or [left, top, right, bottom]',
        },
        'PAD_IF_NEEDED': {'value': False, 'description': 'pad an image smaller than SIZE up to SIZE'},
        'FILL': {'value': 0, 'description': 'pixel value of constant padding', 'min': 0, 'max': 255},
        'PADDING_MODE': {
            'value': 'constant',
            'description': 'constant | edge | reflect | symmetric',
            'choices': list(_PADDING_MODES),
        },
    }
    RANDOM = True

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.size = size_pair(cfg)
        self.padding = self._padding(cfg)
        self.pad_if_needed, self.fill, self.mode = cfg.PAD_IF_NEEDED, cfg.FILL, cfg.PADDING_MODE

    @staticmethod
    def _padding(cfg):
        """PADDING as (left, top, right, bottom), or None."""
        value = cfg.PADDING
        if value is None:
            return None
        sides = [value] * 4 if _is_int(value) else list(value) * (2 if len(value) == 2 else 1)
        if len(sides) != 4 or not all(_is_int(v) and v >= 0 for v in sides):
            raise ConfigError(
                f'{cfg.path_of("PADDING")}: expected n, [left/right, top/bottom] or [left, top, right, bottom]'
                f' of whole numbers >= 0, got {value!r}'
            )
        return tuple(sides)

    def apply(self, img, rng):
        if self.padding is not None:
            img = self.ops.pad(img, *self.padding, self.fill, self.mode)
        crop_height, crop_width = self.size
        height, width = self.ops.size(img)
        if self.pad_if_needed and (height < crop_height or width < crop_width):
            dh, dw = max(crop_height - height, 0), max(crop_width - width, 0)
            img = self.ops.pad(img, dw, dh, dw, dh, self.fill, self.mode)
            height, width = self.ops.size(img)
        if height < crop_height or width < crop_width:
            raise DataError(
                f'{self.where}: the image ({height}x{width} after padding) is smaller than SIZE'
                f' {list(self.size)}; set PAD_IF_NEEDED: true or a smaller SIZE'
            )
        top, left = rng.randint(0, height - crop_height), rng.randint(0, width - crop_width)
        return self.ops.crop(img, top, left, crop_height, crop_width)


@TRANSFORMS.register_class()
class RandomHorizontalFlip(ImageTransform):
    para_dict = {'P': {'value': 0.5, 'description': 'probability of flipping', 'min': 0.0, 'max': 1.0}}
    RANDOM = True

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.p = cfg.P

    def apply(self, img, rng):
        return self.ops.hflip(img) if rng.random() < self.p else img


@TRANSFORMS.register_class()
class ImageToTensor(ImageTransform):
    """The image as a float32 C x H x W tensor; uint8 pixels scaled to [0, 1]."""

    para_dict = {}

    def apply(self, img, rng):
        return self.ops.to_tensor(img)


@TRANSFORMS.register_class()
class Normalize(ImageTransform):
    """``(image - MEAN) / STD`` per channel, on the float tensor ImageToTensor gives (whatever the BACKEND)."""

    para_dict = {
        'MEAN': {
            'value': [],
            'required': True,
            'description': 'per-channel means (as many as the image has channels, or one for all, as torchvision)',
        },
        'STD': {'value': [], 'required': True, 'description': 'per-channel standard deviations, none zero (or one)'},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        mean, std = list(cfg.MEAN), list(cfg.STD)
        if not mean or len(mean) != len(std) or not all(isinstance(v, (int, float)) for v in mean + std):
            raise ConfigError(
                f'{cfg.path_of("MEAN")}: MEAN and STD need one number per channel each, got {mean} and {std}'
            )
        if any(s == 0 for s in std):
            raise ConfigError(f'{cfg.path_of("STD")}: a standard deviation of 0 divides by zero, got {std}')
        if max(abs(v) for v in mean + std) > 1:  # mmcv / cv2 configs give them on the 0-255 scale
            (logger or logging.getLogger(__name__)).warning(
                f'{cfg.path_of("MEAN")}: MEAN {mean} and STD {std} look like 0-255 pixel values, but ImageToTensor'
                f' gives [0, 1] floats: divide them by 255 (MEAN {[round(v / 255, 4) for v in mean]},'
                f' STD {[round(v / 255, 4) for v in std]})'
            )
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def image(self, value):
        if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() == 3):
            raise DataError(
                f'{self.where}: Normalize takes a float C x H x W tensor, got {describe_value(value)};'
                ' put ImageToTensor before it'
            )
        if value.shape[0] != self.mean.shape[0] and self.mean.shape[0] != 1:  # one value: every channel
            raise DataError(
                f'{self.where}: the image has {value.shape[0]} channel(s) (image files are read as RGB), MEAN and STD'
                f' give {self.mean.shape[0]}: give {value.shape[0]} values each, or one for all'
            )
        return value

    def apply(self, img, rng):
        return img.sub(self.mean).div_(self.std)
