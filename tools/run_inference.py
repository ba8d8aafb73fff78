#!/usr/bin/env python
"""``python tools/run_inference.py ...``: runs scepter_like/tools/run_inference.py (also a console script)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scepter_like.tools.run_inference import main  # noqa: E402

if __name__ == '__main__':
    from scepter_like.cli import run

    sys.exit(run(main))
