"""What the newcomer tests (test_python_api.py, test_newcomer_*.py) share."""

import importlib.util
import logging
import os

import pytest
from conftest import TOOLS

from scepter_like.cli import run


@pytest.fixture(autouse=True)
def own_logger_restored():
    """In-process runs give the ``scepter_like`` logger a console handler on the test's captured stdout;
    put the logger back as it was, so no later test logs into a closed capture."""
    logger = logging.getLogger('scepter_like')
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


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
