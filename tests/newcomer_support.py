"""What the newcomer tests (test_python_api.py, test_newcomer_*.py, test_tables.py) share: tool mains run in this
process and their one error line (conftest puts the logger back after every test)."""

import importlib.util
import os

from conftest import TOOLS

from scepter_like.cli import run


def run_cli(main, *argv):
    """``main`` (a tool's) as the command line runs it, in this process; its exit status."""
    return run(main, [str(word) for word in argv])


def one_error_line(capsys):
    """The single ``error: ...`` line the last command wrote to stderr."""
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith('error: '), err
    return err[0]


def tool_main(name):
    """The ``main(argv)`` of ``tools/<name>.py``, loaded as the repository's file (the command line's way in)."""
    spec = importlib.util.spec_from_file_location(f'newcomer_tool_{name}', os.path.join(TOOLS, f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main
