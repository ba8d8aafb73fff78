"""The Lightning library itself: imported only here, and only when a run asks for it."""

from scepter_like.errors import ConfigError

EXTRA = 'lightning'  # setup.cfg's extra that installs it


def import_lightning():
    """``lightning.pytorch``, else the standalone ``pytorch_lightning``; a ConfigError naming the extra without."""
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError:
            raise ConfigError(
                f"ENV.USE_PL: PyTorch Lightning is not installed; pip install 'scepter_like[{EXTRA}]'"
                ' (or set ENV.USE_PL false)'
            ) from None
    return pl
