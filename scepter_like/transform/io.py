"""Decoding image files: ``read_image`` (what the image datasets use too) and scepter's Load*FromFile transforms.

A file that cannot be decoded (missing, not an image, truncated) is a DataError naming it;
truncated images are never padded silently (scepter sets Pillow's ``LOAD_TRUNCATED_IMAGES``; libjpeg,
under OpenCV, pads a truncated JPEG with grey and only prints a warning: ``jpeg_complete``).
Every backend gives the image as viewers show it, its EXIF orientation applied (``upright``).
16- and 32-bit integer images are scaled to 8 bits by their bit depth (``eight_bits``), not clipped;
32-bit float images, which carry no range to scale by, are a DataError.
"""

import os
import re

from scepter_like.errors import DataError
from scepter_like.transform.backends import BACKENDS, image_backend
from scepter_like.transform.keys import read_key, transform_name
from scepter_like.transform.registry import TRANSFORMS

RGB_ORDERS = ('RGB', 'BGR')
EXIF_ORIENTATION = 0x0112
# after a JPEG segment or scan, the next marker: 0xFF, fill 0xFFs, then a code that is not a stuffed 0x00 (an 0xFF
# byte of the scan's data), a restart marker inside the scan (D0-D7) or TEM (01, no length)
_NEXT_JPEG_MARKER = re.compile(rb'\xff[^\x00\x01\xd0-\xd7\xff]')


def read_image(path, backend='pillow', rgb_order='RGB'):
    """The image at ``path`` as three channels, in ``backend``'s type (``pillow``: a PIL image).

    Decoded by Pillow for the pillow and torchvision backends, by OpenCV for cv2.  As in scepter, the pillow
    backend lays a transparent (RGBA or palette) image on white (``on_white``); the torchvision backend converts
    it to RGB and cv2 drops the alpha channel, so their transparent pixels keep the colour stored under them.
    """
    if backend == 'cv2':
        return _read_cv2(path, rgb_order)
    from PIL import Image

    try:
        with Image.open(path) as opened:
            img = eight_bits(upright(opened), path)
            # decodes the whole file: a truncated one fails here
            img = on_white(img) if backend == 'pillow' else img.convert('RGB')
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as e:
        raise DataError(f'cannot read image {path} ({_first_line(e)}); replace or remove the file') from None
    if rgb_order == 'BGR':
        img = Image.merge('RGB', img.split()[::-1])
    if backend == 'torchvision':
        return image_backend('torchvision', 'read_image').coerce(img, path)
    return img


def on_white(img):
    """scepter's ``pillow_convert``: an RGBA or palette (``P``) image laid on a white background, others as RGB.

    ``convert('RGB')`` alone drops the alpha channel, so transparent pixels come out as whatever colour the file
    stores under them (usually black).  Other modes with alpha (``LA``, ``PA``) are converted, as scepter does.
    """
    from PIL import Image

    if img.mode == 'P':
        img = img.convert('RGBA')
    if img.mode != 'RGBA':
        return img.convert('RGB')
    background = Image.new('RGB', img.size, (255, 255, 255))
    background.paste(img, (0, 0), mask=img)
    return background


def upright(img):
    """``img`` as viewers show it: its EXIF orientation applied (a phone stores a portrait shot turned), as OpenCV's
    ``imread`` and mmcv's pillow backend do; ``img`` itself when it has none."""
    from PIL import ImageOps

    return ImageOps.exif_transpose(img) if img.getexif().get(EXIF_ORIENTATION, 1) != 1 else img


def eight_bits(img, path):
    """A 16-bit (``I;16``) or 32-bit integer (``I``) grey image scaled to 8 bits by its bit depth, else ``img``.

    Pillow's ``convert`` clips such values at 255 (a 12-bit scan in a 16-bit PNG turns almost white); scaled, they
    are as OpenCV reads them.  An ``I`` image from a PNG holds at most 16 bits; from another file, 31 (signed),
    negative values are 0.  A 32-bit float image (``F``, a microscope's TIFF) has no bit depth to scale by (its
    values may be 0..1 or 0..1000), so it is a DataError rather than clipped to 0..255.
    """
    if img.mode == 'F':
        raise DataError(
            f'cannot read image {path}: its pixels are 32-bit floats (Pillow mode F), which have no fixed range to'
            " scale to 8 bits; save it as 8- or 16-bit integers scaled by your data's range, or decode it in your"
            ' own dataset or LoadImageFromFile subclass'
        )
    if img.mode != 'I' and not img.mode.startswith('I;16'):
        return img
    import numpy as np
    from PIL import Image

    top = 2**16 - 1 if img.mode != 'I' or img.format == 'PNG' else 2**31 - 1
    values = np.asarray(img, dtype=np.float64) * (255 / top)
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), 'L')


def _read_cv2(path, rgb_order):
    import cv2

    img = cv2.imread(path, cv2.IMREAD_COLOR) if os.path.isfile(path) else None
    if img is None:
        state = 'no such file' if not os.path.isfile(path) else 'OpenCV cannot decode it'
        raise DataError(f'cannot read image {path} ({state}); replace or remove the file')
    with open(path, 'rb') as f:
        data = f.read()
    if data.startswith(b'\xff\xd8\xff') and not jpeg_complete(data):
        raise DataError(
            f'cannot read image {path} (truncated JPEG: no end-of-image marker); replace or remove the file'
        )
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if rgb_order == 'RGB' else img


def jpeg_complete(data):
    """Whether the JPEG bytes ``data`` reach their end-of-image marker (FF D9).

    Walks the segments by their lengths (an EXIF thumbnail's own FF D9 lies inside one) and each scan's data to the
    marker after it; bytes after the end (a motion photo's video) do not matter.  libjpeg pads a file that ends
    early with grey and only prints "Premature end of JPEG file", so OpenCV returns the padded image.
    """
    pos = 2  # after the start-of-image marker
    while (marker := _NEXT_JPEG_MARKER.search(data, pos)) is not None:
        if data[marker.end() - 1] == 0xD9:
            return True
        pos = marker.end() + int.from_bytes(data[marker.end() : marker.end() + 2], 'big')  # past the segment
    return False


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def meta_path(meta, key, where):
    """The file ``meta[key]`` names, under ``meta['prefix']`` when the sample gives one (scepter's layout)."""
    path = read_key(meta, key, f'{where}: meta', 'file key', fix='give each sample its image file there')
    return os.path.join(meta['prefix'], path) if 'prefix' in meta else path


@TRANSFORMS.register_class()
class LoadImageFromFile:
    """Decodes ``meta['img_path']`` (under ``meta['prefix']``) into ``img``; records ``meta['rgb_order']``."""

    para_dict = {
        'RGB_ORDER': {'value': 'RGB', 'description': 'channel order: RGB | BGR', 'choices': list(RGB_ORDERS)},
        'BACKEND': {
            'value': 'pillow',
            'description': 'image type: pillow | cv2 | torchvision',
            'choices': list(BACKENDS),
        },
    }
    FILE_KEYS = ('img_path',)

    def __init__(self, cfg, logger=None):
        self.where = transform_name(cfg, self)
        self.rgb_order = cfg.RGB_ORDER
        self.backend = cfg.BACKEND
        image_backend(self.backend, cfg.path_of('BACKEND'))  # a backend that is not installed: an error now
        self.file_keys = self.FILE_KEYS

    def __call__(self, item):
        meta = read_key(
            item, 'meta', self.where, 'file paths', fix=f"give {', '.join(self.file_keys)} in a 'meta' dict"
        )
        for key in self.file_keys:
            try:
                image = read_image(meta_path(meta, key, self.where), self.backend, self.rgb_order)
            except DataError as e:
                raise DataError(f'{self.where}: {e}') from e
            item[key.replace('_path', '')] = image
        meta['rgb_order'] = self.rgb_order
        return item


@TRANSFORMS.register_class()
class LoadImageFromFileList(LoadImageFromFile):
    """Decodes each of FILE_KEYS from meta; ``x_path`` goes to ``x``."""

    para_dict = {'FILE_KEYS': {'value': ['img_path'], 'type': (str, list), 'description': 'meta keys of image files'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.file_keys = [cfg.FILE_KEYS] if isinstance(cfg.FILE_KEYS, str) else list(cfg.FILE_KEYS)


@TRANSFORMS.register_class()
class LoadPILImageFromFile(LoadImageFromFile):
    """LoadImageFromFile with the pillow backend."""

    para_dict = {'BACKEND': {'value': 'pillow', 'description': 'always pillow', 'choices': ['pillow']}}


@TRANSFORMS.register_class()
class LoadCvImageFromFile(LoadImageFromFile):
    """LoadImageFromFile with the cv2 backend (needs opencv-python-headless)."""

    para_dict = {'BACKEND': {'value': 'cv2', 'description': 'always cv2', 'choices': ['cv2']}}
