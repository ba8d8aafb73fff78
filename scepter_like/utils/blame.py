"""Which of the user's components an exception came from, read off its traceback.

A dataset, model, loss, metric, hook or solver subclass that a user (or a task) wrote
may raise its own exception in the middle of a run.  The tools keep its traceback and put
a line naming the component first.  ``raising_component`` finds the innermost frame that
runs code outside this package on behalf of a component (``self`` holds its ``Config`` as
``cfg``, or the name the registry gave it when it built it); an exception a DataLoader
worker raised is re-raised in the main process by torch's iterator, whose dataset is then
the component.  It runs only after a failure.
"""

import os

from scepter_like.config import Config
from scepter_like.registry import BUILT_FROM

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _describe(obj):
    """``NAME (config path)`` of a component built from a config (kept as ``self.cfg`` or not), else None."""
    try:
        cfg = getattr(obj, 'cfg', None)
        label = getattr(obj, BUILT_FROM, None)
    except Exception:  # an object whose attribute access fails is no component
        return None
    if not isinstance(cfg, Config):
        return label if isinstance(label, str) else None
    name = cfg.get('NAME') or type(obj).__name__
    return f'{name} ({cfg.path})' if cfg.path else str(name)


def raising_component(exc):
    """``NAME (config path)`` of the component whose own code raised ``exc``, or None."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        owner = frame.f_locals.get('self')
        if owner is None:
            continue
        if not os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
            found = _describe(owner)
            if found:
                return found
        found = _describe(getattr(owner, '_dataset', None))  # torch's DataLoader iterator
        if found:
            return found
    return None


def describe_caller(frame):
    """Who runs the code of ``frame``: a component's ``NAME (config path)``, else its class or function name."""
    owner = frame.f_locals.get('self')
    if owner is None:
        return f'{frame.f_code.co_name}()'
    return _describe(owner) or type(owner).__name__
