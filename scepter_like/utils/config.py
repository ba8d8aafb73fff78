"""``scepter.modules.utils.config`` maps here: the Config class lives in ``scepter_like.config``."""

from scepter_like.config import Config

__all__ = ['Config']
