"""``scepter.modules.transform`` maps here: TRANSFORMS, ``build_pipeline`` and scepter's image and key transforms.

Importing the package registers the built-ins; none of them imports Pillow, OpenCV or
torchvision until a transform naming that backend is built.
"""

from scepter_like.transform.compose import Compose
from scepter_like.transform.identity import Identity
from scepter_like.transform.image import (
    CenterCrop,
    ImageToTensor,
    ImageTransform,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)
from scepter_like.transform.io import (
    LoadCvImageFromFile,
    LoadImageFromFile,
    LoadImageFromFileList,
    LoadPILImageFromFile,
)
from scepter_like.transform.registry import TRANSFORMS, build_pipeline
from scepter_like.transform.tensor import Rename, Select, ToNumpy, ToTensor

__all__ = [
    'TRANSFORMS',
    'CenterCrop',
    'Compose',
    'Identity',
    'ImageToTensor',
    'ImageTransform',
    'LoadCvImageFromFile',
    'LoadImageFromFile',
    'LoadImageFromFileList',
    'LoadPILImageFromFile',
    'Normalize',
    'RandomCrop',
    'RandomHorizontalFlip',
    'RandomResizedCrop',
    'Rename',
    'Resize',
    'Select',
    'ToNumpy',
    'ToTensor',
    'build_pipeline',
]
