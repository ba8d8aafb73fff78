"""Shared test helpers: the repo root, running tools (as subprocesses or in this process), small configs;
and the test tiers: a test that starts a process is marked ``slow`` by itself.

``make test-fast`` runs ``pytest -m "not slow"``: the tests that run in this process.
A test is ``slow`` when it, a fixture it uses, or a function either calls (followed
through the test module, this file and ``helpers.py``) names one of ``PROCESS_STARTERS``;
a test may also carry ``@pytest.mark.slow`` itself (a long run in this process).
"""

import contextlib
import importlib.util
import io
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import traceback
import types
from typing import NamedTuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(REPO, 'tools')
DIGITS_CFG = os.path.join(REPO, 'configs', 'cate_recognition', 'digits_mlp.yaml')

if REPO not in sys.path:
    sys.path.insert(0, REPO)


def tool_env(**extra):
    env = dict(os.environ)
    env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
    env.setdefault('OMP_NUM_THREADS', '1')
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        env.pop(key, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


PORTS_PER_WORKER = 500
_next_port = itertools.count()


def free_port():
    """A port of 127.0.0.1 that nothing listens on, for a test's torchrun, rendezvous or server.

    Drawn from a block of its own for each pytest-xdist worker (``make test`` runs two), below
    the kernel's ephemeral range (32768 on): no port the kernel hands a socket of the other
    worker's processes (gloo's) can be the one a test is about to give torchrun.
    """
    worker = int(os.environ.get('PYTEST_XDIST_WORKER', 'gw0')[2:])
    first = 20000 + worker * PORTS_PER_WORKER
    for _ in range(PORTS_PER_WORKER):
        port = first + next(_next_port) % PORTS_PER_WORKER
        with socket.socket() as s:
            try:
                s.bind(('127.0.0.1', port))
            except OSError:  # in use (or in TIME_WAIT): the next one
                continue
            return port
    raise RuntimeError(f'no free port in {first}..{first + PORTS_PER_WORKER - 1}')


def run_tool(tool, *args, cwd=None, timeout=300, env=None):
    """Run ``tools/<tool>`` with this Python; returns the CompletedProcess (text)."""
    cmd = [sys.executable, os.path.join(TOOLS, tool), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd or REPO, env=env or tool_env(), capture_output=True, text=True, timeout=timeout)


def run_train_killed_at(kill_at, *args):
    """``run_train.py`` with ``args`` in a process of its own that SIGKILLs itself at ``kill_at`` (ckpt_support's
    KillHook: ``train:N``, ``eval:N``); with no ``kill_at``, a run to its end in this process (no start-up cost)."""
    if not kill_at:
        return run_cli('run_train.py', *args)
    return run_tool('run_train.py', *args, env=tool_env(SCEPTER_TEST_KILL_AT=kill_at))


class CliResult(NamedTuple):
    """What a command-line run left: its exit status, stdout and stderr (as ``subprocess.run`` gives them)."""

    returncode: int
    stdout: str
    stderr: str


_TOOL_MODULES = {}


def load_tool(tool):
    """``tools/<tool>`` loaded afresh as a module: its ``main`` runs the tool in this process under ``cli.run``."""
    spec = importlib.util.spec_from_file_location(f'_tool_{tool[:-3]}', os.path.join(TOOLS, tool))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tool_module(tool):
    if tool not in _TOOL_MODULES:
        _TOOL_MODULES[tool] = load_tool(tool)
    return _TOOL_MODULES[tool]


def run_cli(tool, *args, cwd=None):
    """Run ``tools/<tool>`` in this process as its command line does (``cli.run``: the error contract, the exit
    status) from ``cwd``; returns a ``CliResult``.  An error the contract does not catch (the toolkit's own
    failure) is status 1 with its traceback on stderr, as in a process.  Costs no interpreter start-up.

    What a run changes in the process is put back: the working directory, ``sys.path``, the modules its
    IMPORTS brought in, the registries' entries and the toolkit logger's handlers.
    """
    from scepter_like.cli import run

    with _process_state_restored():
        out, err = io.StringIO(), io.StringIO()
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = run(_tool_module(tool).main, [str(a) for a in args])
            except Exception:
                traceback.print_exc()
                status = 1
    return CliResult(status, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _process_state_restored():
    """Put back what a run changed: cwd, sys.path, the toolkit logger, the registries.  A module the run imported
    that registered something (its package too) is forgotten, so that the next import registers it again."""
    from scepter_like.utils.registries import all_registries

    for name, module in list(sys.modules.items()):  # another test's own files: a process would not have them
        if 'pytest-of-' in (getattr(module, '__file__', None) or ''):
            del sys.modules[name]
    registries = all_registries()
    entries = {name: dict(r._entries) for name, r in registries.items()}
    modules, path, cwd = set(sys.modules), list(sys.path), os.getcwd()
    logger = logging.getLogger('scepter_like')
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        registering = set()
        for name, registry in registries.items():
            for key, entry in registry._entries.items():
                if entries[name].get(key) is not entry:
                    registering.add(getattr(entry, '__module__', ''))
            registry._entries.clear()
            registry._entries.update(entries[name])
        registered_from = [sys.modules[name] for name in registering if name in sys.modules]
        for name in set(sys.modules) - modules:  # the names it was entered under too (a file's plain name)
            if any(sys.modules[name] is module for module in registered_from):
                del sys.modules[name]
        for module in registering:  # it, and the packages above it that the run imported too
            while module and module not in modules:
                sys.modules.pop(module, None)
                module = module.rpartition('.')[0]
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


PROCESS_STARTERS = {'run_tool', 'subprocess', 'Popen', 'torchrun', 'launch', 'spawn', 'start_process'}


def _names_used(fn, module, seen, depth=4):
    """The global names ``fn``'s code uses, followed into the functions of ``module``, conftest and helpers."""
    code = getattr(fn, '__code__', None)
    if code is None or code in seen or depth < 0:
        return set()
    seen.add(code)
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(const for const in c.co_consts if isinstance(const, types.CodeType))
    found = set(names)
    spaces = [vars(module), globals()] + ([vars(sys.modules['helpers'])] if 'helpers' in sys.modules else [])
    for name in names:
        for space in spaces:
            target = space.get(name)
            if isinstance(target, types.FunctionType):
                found |= _names_used(target, module, seen, depth - 1)
    return found


def _starts_processes(item):
    module, seen = item.module, set()
    names = _names_used(getattr(item, 'function', None), module, seen)
    for defs in item._fixtureinfo.name2fixturedefs.values():
        names |= _names_used(defs[-1].func, module, seen)
    return bool(names & PROCESS_STARTERS)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _starts_processes(item):
            item.add_marker(pytest.mark.slow)


def torchrun_worker_values(worker, tmp_path):
    """Run ``tests/<worker>.py`` in 2 torchrun processes; the values its rank 0 wrote (``worker_report``)."""
    out = tmp_path / f'{worker}.json'
    proc = torchrun_pair(os.path.join(REPO, 'tests', f'{worker}.py'), out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def torchrun_pair(*args, options=(), cwd=REPO, timeout=120):
    """``python -m torch.distributed.run`` with 2 processes on a free port, torchrun's ``options``, then ``args``."""
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}']
    cmd += [*options, *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(autouse=True)
def own_logger_restored():
    """Runs in this process give the ``scepter_like`` logger a console handler on the test's captured output (and
    tests set its level); put the logger back as it was after every test, so no later test logs into a closed
    capture or under another test's level."""
    logger = logging.getLogger('scepter_like')
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


@pytest.fixture(autouse=True)
def torch_settings_restored():
    """Runs in this process set torch's process-wide settings from their ENV (DETERMINISTIC, NUM_THREADS): put them
    back after every test, so no later test starts from another test's."""
    from scepter_like.solver.environment import ProcessSettings

    saved = ProcessSettings()
    yield
    saved.apply()


@pytest.fixture
def digits_args(tmp_path):
    """Overrides that make the digits job short and write into tmp_path."""
    return [
        '--cfg',
        DIGITS_CFG,
        f'SOLVER.WORK_DIR={tmp_path / "run"}',
        'SOLVER.MAX_EPOCHS=2',
        'SOLVER.LR_SCHEDULER.T_MAX=2',
    ]
