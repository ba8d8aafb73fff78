"""The image types of the three BACKENDs and the few operations the image transforms run on them.

- ``pillow`` (the default; Pillow is a dependency): PIL images.
- ``cv2`` (needs ``opencv-python-headless``): numpy ``uint8`` arrays, H x W x C.
- ``torchvision`` (needs a torchvision that imports beside this torch): tensors, C x H x W.

An image transform converts an image of another backend's type to its own first (uint8
pixels either way, so nothing is lost); a float tensor, what ImageToTensor gives, is an
image for the torchvision backend only.  Each backend's package is imported when a
transform naming it is built, so ``import scepter_like`` imports none of them.
"""

import importlib

import numpy as np
import torch

from scepter_like.errors import ConfigError, DataError

BACKENDS = ('pillow', 'cv2', 'torchvision')
INTERPOLATIONS = ('bilinear', 'nearest', 'bicubic')
# backend -> (the module it imports, the package that provides it)
_REQUIREMENTS = {
    'pillow': ('PIL.Image', 'pillow'),
    'cv2': ('cv2', 'opencv-python-headless'),
    'torchvision': ('torchvision.transforms.functional', 'torchvision'),
}


def image_backend(name, where):
    """The operations of backend ``name``; a backend whose package does not import is one ConfigError naming it."""
    module, package = _REQUIREMENTS[name]
    try:
        importlib.import_module(module)
    except Exception as e:  # a torchvision built for another torch raises RuntimeError or AttributeError on import
        if isinstance(e, ModuleNotFoundError):
            state = 'is not installed'
        else:
            state = (
                f'does not import here ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ""})'
            )
        release = f' (the release built for torch {torch.__version__.split("+")[0]})' if name == 'torchvision' else ''
        raise ConfigError(
            f'{where}: BACKEND {name} needs the {package} package, which {state}; pip install {package}{release},'
            ' or use BACKEND: pillow'
        ) from None
    return _OPERATIONS[name]()


def is_pil_image(value):
    """Whether ``value`` is a PIL image, without importing Pillow to ask."""
    return type(value).__module__.startswith('PIL.')


def describe_value(value):
    """A value in words for error messages: ``a float32 tensor of shape [3, 32, 32]``, ``a PIL image (RGB, 32x32)``."""
    if isinstance(value, torch.Tensor):
        return f'a {str(value.dtype).removeprefix("torch.")} tensor of shape {list(value.shape)}'
    if isinstance(value, np.ndarray):
        return f'a {value.dtype} array of shape {list(value.shape)}'
    if is_pil_image(value):
        return f'a PIL image ({value.mode}, {value.size[0]}x{value.size[1]})'
    return f'a {type(value).__name__}'


def _not_an_image(value, backend, where):
    hint = ''
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        hint = ' (ImageToTensor gives that: put this transform before it, or use BACKEND: torchvision)'
    return DataError(
        f'{where}: the {backend} backend takes an image (a PIL image, a uint8 H x W x C array or a uint8'
        f' C x H x W tensor), got {describe_value(value)}{hint}'
    )


def _hwc_array(value, backend, where):
    """A uint8 array or tensor image as a uint8 H x W x C array (a view where it can be)."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() in (2, 3):
        value = (value.unsqueeze(0) if value.dim() == 2 else value).permute(1, 2, 0).numpy()
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim in (2, 3):
        return value[:, :, None] if value.ndim == 2 else value
    raise _not_an_image(value, backend, where)


def _array_to_tensor(array):
    """An H x W (x C) array as a float32 C x H x W tensor; uint8 pixels scaled to [0, 1].

    The scaling runs in numpy, on the new array: on an image this small numpy's per-call
    cost is a fraction of torch's (the result is the same float32 division).
    """
    if array.ndim == 2:
        array = array[:, :, None]
    chw = np.ascontiguousarray(array.transpose(2, 0, 1), dtype=np.float32)
    if array.dtype == np.uint8:
        np.divide(chw, 255, out=chw)
    return torch.from_numpy(chw)


def _crop_array(array, top, left, height, width):
    """``array[top:top+height, left:left+width]``, zeros where the box reaches past the image."""
    rows, cols = array.shape[:2]
    if top >= 0 and left >= 0 and top + height <= rows and left + width <= cols:
        return array[top : top + height, left : left + width]
    out = np.zeros((height, width, *array.shape[2:]), dtype=array.dtype)
    r0, c0 = max(top, 0), max(left, 0)
    r1, c1 = min(top + height, rows), min(left + width, cols)
    if r1 > r0 and c1 > c0:
        out[r0 - top : r1 - top, c0 - left : c1 - left] = array[r0:r1, c0:c1]
    return out


def _pad_array(array, left, top, right, bottom, fill, mode):
    """numpy's pad of an H x W x C array; its mode names are torchvision's (constant, edge, reflect, symmetric)."""
    widths = ((top, bottom), (left, right)) + ((0, 0),) * (array.ndim - 2)
    if mode == 'constant':
        return np.pad(array, widths, mode='constant', constant_values=fill)
    return np.pad(array, widths, mode=mode)


class PillowImages:
    """PIL images, operated on by Pillow."""

    name = 'pillow'

    def __init__(self):
        from PIL import Image

        self.image_type = Image.Image
        self.flip = Image.Transpose.FLIP_LEFT_RIGHT
        self.resample = {
            'bilinear': Image.Resampling.BILINEAR,
            'nearest': Image.Resampling.NEAREST,
            'bicubic': Image.Resampling.BICUBIC,
        }

    def coerce(self, value, where):
        if isinstance(value, self.image_type):
            return value
        from PIL import Image

        array = _hwc_array(value, self.name, where)
        return Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)

    def size(self, img):
        return img.height, img.width

    def crop(self, img, top, left, height, width):
        return img.crop((left, top, left + width, top + height))  # zeros past the image

    def resize(self, img, height, width, interpolation):
        return img.resize((width, height), self.resample[interpolation])

    def resized_crop(self, img, box, height, width, interpolation):
        # crop, then resize, as torchvision's resized_crop: resize's box= would let the filter read past the box
        return self.resize(self.crop(img, *box), height, width, interpolation)

    def hflip(self, img):
        return img.transpose(self.flip)

    def pad(self, img, left, top, right, bottom, fill, mode):
        from PIL import Image

        array = _pad_array(np.asarray(img), left, top, right, bottom, fill, mode)
        return Image.fromarray(array)

    def to_tensor(self, img):
        return _array_to_tensor(np.asarray(img))


class Cv2Images:
    """uint8 H x W x C arrays, operated on by OpenCV and numpy."""

    name = 'cv2'

    def coerce(self, value, where):
        if is_pil_image(value):
            value = np.asarray(value)
        return _hwc_array(value, self.name, where)

    def size(self, img):
        return img.shape[0], img.shape[1]

    def crop(self, img, top, left, height, width):
        return _crop_array(img, top, left, height, width)

    def resize(self, img, height, width, interpolation):
        import cv2

        flags = {'bilinear': cv2.INTER_LINEAR, 'nearest': cv2.INTER_NEAREST, 'bicubic': cv2.INTER_CUBIC}
        out = cv2.resize(img, (width, height), interpolation=flags[interpolation])
        return out[:, :, None] if out.ndim == 2 else out  # OpenCV drops a single channel's axis

    def resized_crop(self, img, box, height, width, interpolation):
        return self.resize(self.crop(img, *box), height, width, interpolation)

    def hflip(self, img):
        return np.ascontiguousarray(img[:, ::-1])

    def pad(self, img, left, top, right, bottom, fill, mode):
        return _pad_array(img, left, top, right, bottom, fill, mode)

    def to_tensor(self, img):
        return _array_to_tensor(img)


class TorchvisionImages:
    """C x H x W tensors (uint8 or float), operated on by ``torchvision.transforms.functional``."""

    name = 'torchvision'

    def coerce(self, value, where):
        if isinstance(value, torch.Tensor) and value.dim() in (2, 3):
            return value.unsqueeze(0) if value.dim() == 2 else value
        if is_pil_image(value):
            value = np.asarray(value)
        return torch.from_numpy(np.ascontiguousarray(_hwc_array(value, self.name, where).transpose(2, 0, 1)))

    def size(self, img):
        return img.shape[-2], img.shape[-1]

    def crop(self, img, top, left, height, width):
        from torchvision.transforms import functional

        return functional.crop(img, top, left, height, width)

    def resize(self, img, height, width, interpolation):
        from torchvision.transforms import functional

        return functional.resize(img, [height, width], interpolation=_tv_mode(interpolation), antialias=True)

    def resized_crop(self, img, box, height, width, interpolation):
        from torchvision.transforms import functional

        mode = _tv_mode(interpolation)
        return functional.resized_crop(img, *box, [height, width], interpolation=mode, antialias=True)

    def hflip(self, img):
        from torchvision.transforms import functional

        return functional.hflip(img)

    def pad(self, img, left, top, right, bottom, fill, mode):
        from torchvision.transforms import functional

        return functional.pad(img, [left, top, right, bottom], fill=fill, padding_mode=mode)

    def to_tensor(self, img):
        from torchvision.transforms import functional

        return functional.convert_image_dtype(img, torch.float32)


def _tv_mode(interpolation):
    from torchvision.transforms import InterpolationMode

    return InterpolationMode(interpolation)


_OPERATIONS = {'pillow': PillowImages, 'cv2': Cv2Images, 'torchvision': TorchvisionImages}
