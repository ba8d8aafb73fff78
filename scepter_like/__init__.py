"""scepter_like: a config-driven PyTorch training toolkit in the style of scepter."""

__version__ = '0.1.0'
