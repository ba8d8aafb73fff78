"""``scepter.modules.utils.config`` maps here: ``Config`` and ``dict_to_yaml``.

The Config class lives in :mod:`scepter_like.config`; templates are rendered by the
registry from the same ``para_dict`` that fills defaults, so they never disagree.
"""

from scepter_like.config import Config
from scepter_like.registry import normalize_para, render_config_template

__all__ = ['Config', 'dict_to_yaml']


def dict_to_yaml(module_name, name, json_config, set_name=False, exclude_keys=()):
    """YAML template text of a ``para_dict`` (either form), as scepter's ``get_config_template`` returns.

    The first line is a comment naming ``module_name``; with ``set_name`` the template
    starts with ``NAME: name``.  Keys in ``exclude_keys`` are left out.
    """
    para = {k: v for k, v in normalize_para(json_config, name).items() if k not in exclude_keys}
    text = render_config_template(name, para)
    if not set_name:
        text = text.split('\n', 1)[1]
    return f'# {module_name}\n{text}'
