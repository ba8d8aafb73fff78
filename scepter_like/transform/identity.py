"""Identity: the transform of an empty TRANSFORMS list."""

from scepter_like.transform.registry import TRANSFORMS


@TRANSFORMS.register_class()
class Identity:
    para_dict = {}

    def __init__(self, cfg, logger=None):
        pass

    def __call__(self, item):
        return item
