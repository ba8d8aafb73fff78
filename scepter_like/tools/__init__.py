"""The command-line tools: each module's ``main(argv)`` runs under ``scepter_like.cli.run``.

Three ways start one: the console scripts of an installed package (``scepter-train ...``,
``COMMANDS``), ``python -m scepter_like.tools.run_train ...``, and ``python tools/run_train.py
...`` in the repository.
"""

import importlib
import sys

COMMANDS = {  # console script -> module of this package
    'scepter-train': 'run_train',
    'scepter-eval': 'run_eval',
    'scepter-infer': 'run_inference',
    'scepter-export': 'export',
    'scepter-search': 'run_search',
    'scepter-find-lr': 'find_lr',
    'scepter-plot-log': 'plot_log',
    'scepter-config-template': 'config_template',
}


def console(script):
    """The function a console script calls: run its tool's ``main`` on ``sys.argv`` and exit with its status."""
    module = COMMANDS[script]

    def start():
        from scepter_like.cli import run

        sys.exit(run(importlib.import_module(f'{__name__}.{module}').main))

    return start


# the console scripts' entry points (setup.cfg), named after the scripts: never a submodule's name
scepter_train = console('scepter-train')
scepter_eval = console('scepter-eval')
scepter_infer = console('scepter-infer')
scepter_export = console('scepter-export')
scepter_search = console('scepter-search')
scepter_find_lr = console('scepter-find-lr')
scepter_plot_log = console('scepter-plot-log')
scepter_config_template = console('scepter-config-template')
