"""scepter_like: a config-driven PyTorch training toolkit in the style of scepter."""

from scepter_like.about import __version__

__all__ = ['__version__', 'build_solver']


def __getattr__(name):
    """``from scepter_like import build_solver`` imports torch and the solver only when it is asked for."""
    if name == 'build_solver':
        from scepter_like.api import build_solver

        return build_solver
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
