"""What every command-line tool shares: ``--cfg FILE [--import M]... [--print-config]
[--debug] [KEY.PATH=VALUE ...]``, config loading, and the one-line error contract.

A ``UserError`` ends the command with ``error: ...`` on stderr and exit status 2 (the
traceback only with ``--debug``).  An exception a user's component raised (an IMPORTS
module, a dataset, a model, a hook ...) keeps its traceback, after a first line
``error: <component> raised ...``, and exit status 1.  Under torchrun the line is also the
worker's error file, so torchrun's summary names the rank where the failure began
(``utils.torchrun_error``).  The process group is always torn down.
"""

import argparse
import copy
import logging
import os
import sys
import traceback

from scepter_like.about import PACKAGE_DIR
from scepter_like.config import ROOT_KEYS, Config, apply_overrides, resolve_references
from scepter_like.errors import ComponentError, ConfigError, Preempted, UserError, suggest, user_message
from scepter_like.utils.blame import raising_component
from scepter_like.utils.distributed import destroy_distributed, lost_peer
from scepter_like.utils.failure_text import component_failure_line, first_line, peer_failure_line
from scepter_like.utils.imports import import_user_modules
from scepter_like.utils.torchrun_error import record_error

EXIT_USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """Options and KEY=VALUE overrides may mix in any order; errors are one line."""

    def parse_args(self, args=None, namespace=None):
        return self.parse_intermixed_args(args, namespace)

    def error(self, message):
        raise ConfigError(f'{message}; see {self.prog} --help')


def make_bare_parser(description):
    """A parser with only the one-line error contract, for tools that read no config."""
    return _Parser(description=description)


def make_parser(description):
    parser = _Parser(description=description)
    parser.add_argument('--cfg', help='YAML config file')
    parser.add_argument(
        '--import',
        dest='imports',
        action='append',
        default=[],
        metavar='MODULE',
        help='module or .py file to import before building (adds to IMPORTS)',
    )
    parser.add_argument('--print-config', action='store_true', help='print the resolved config and exit')
    parser.add_argument('--debug', action='store_true', help='show tracebacks of user errors')
    parser.add_argument('overrides', nargs='*', metavar='KEY.PATH=VALUE', help='config overrides')
    return parser


def add_checkpoint_argument(parser):
    """``--checkpoint`` of the tools that take weights (``utils.checkpoint.resolve_checkpoint`` reads it)."""
    parser.add_argument(
        '--checkpoint',
        required=True,
        help='.pth checkpoint, .safetensors file, a run folder (its latest checkpoint), RUN:best or RUN:last',
    )


def load_config(args):
    """The config of ``--cfg`` with the overrides applied and IMPORTS imported."""
    if not args.cfg:
        raise ConfigError('--cfg FILE is required; give the YAML config to run')
    return read_config(args.cfg, args.overrides, args.imports)


def read_config(source, overrides=(), imports=(), given_as='the --cfg path'):
    """The config of ``source`` (a YAML path, a dict or a Config) with ``overrides`` (``KEY.PATH=VALUE`` words)
    applied and its IMPORTS, then ``imports``, imported: what every tool and ``build_solver`` run.

    A dict or Config is copied: the caller's stays as it was.  ``given_as`` names where the path came from, for
    the error of a missing file (the CLI's flag, or a Python function's argument).
    """
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        if os.path.isdir(name):
            inside = sorted(n for n in os.listdir(name) if n.endswith(('.yaml', '.yml')))
            held = f' (it holds {", ".join(inside[:3])}{", ..." if len(inside) > 3 else ""})' if inside else ''
            raise ConfigError(f'{os.path.abspath(name)} is a folder, not a config file; give a YAML file{held}')
        if not os.path.isfile(name):  # relative to the working directory, which a notebook's kernel picks
            raise ConfigError(f'config file not found: {os.path.abspath(name)}; check {given_as}')
        cfg = Config(cfg_file=name)
        if not cfg.keys():  # else an override's key alone would make the error a missing SOLVER NAME
            raise ConfigError(f'{name} is empty (no keys: blank, or comments only); write the config there')
    elif isinstance(source, (dict, Config)):
        name = 'the config'
        cfg = Config(copy.deepcopy(source.to_dict() if isinstance(source, Config) else source))
    else:
        raise ConfigError(f'a config is a YAML path, a dict or a Config, got {type(source).__name__}')
    for words, what in ((overrides, 'overrides'), (imports, 'imports')):
        if isinstance(words, str) or not all(isinstance(w, str) for w in words):
            raise ConfigError(f'{what}: expected a list of strings, got {words!r}')
    for key in cfg.keys():
        if key not in ROOT_KEYS:
            raise ConfigError(
                f'{name}: unknown top-level key {key}{suggest(key, ROOT_KEYS)} (keys: {", ".join(ROOT_KEYS)})'
            )
    apply_overrides(cfg, list(overrides))
    resolve_references(cfg)
    declared = cfg.get('IMPORTS') or []
    if not isinstance(declared, list):
        raise ConfigError(f'IMPORTS: expected a list of modules or .py files, got {declared!r}')
    imports = list(declared) + list(imports)
    if imports:
        cfg['IMPORTS'] = imports
    import_modules(imports)
    if 'SOLVER' not in cfg or cfg.SOLVER is None:
        raise ConfigError(f'{name}: no SOLVER section; add SOLVER with a NAME')
    return cfg


def import_modules(imports):
    """Import ``imports`` (module names or .py paths) the way configs' IMPORTS are: from the working directory."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    import_user_modules(imports, base_dir=os.getcwd())


def tool_command(module):
    """``(argv, env)`` that run the tool ``module`` (``scepter_like.tools.run_train``) as a child process.

    The child imports this same scepter_like, installed or not (its folder leads PYTHONPATH).
    """
    root = os.path.dirname(PACKAGE_DIR)
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in (root, env.get('PYTHONPATH')) if p)
    return [sys.executable, '-m', module], env


def refuse_config_options(args, tool):
    """For a tool run without ``--cfg``: options that only a config gives meaning to are an error."""
    if args.print_config or args.overrides:
        given = '--print-config' if args.print_config else f'override {args.overrides[0]!r}'
        raise ConfigError(f'{given} needs --cfg; without it {tool} builds the model the checkpoint describes')


def check_output(path, what, suffix=None):
    """Refuse a tool's ``--output`` before the tool does its work (a sweep, a model build), which it would otherwise
    lose at the write: ``what`` is 'file' (ending in ``suffix`` when given, the format the tool writes) or 'folder'.
    A path of the other kind, or under a file, is a ConfigError; a missing folder above it is made at the write."""
    path = os.fspath(path)
    if what == 'file' and os.path.isdir(path):
        raise ConfigError(
            f'--output {path} is a folder; give the file to write, e.g. {os.path.join(path, "out")}{suffix}'
        )
    if what == 'file' and suffix and not path.endswith(suffix):
        stem = os.path.splitext(path)[0]
        raise ConfigError(f'--output {path}: this tool writes a {suffix} file; name it {stem}{suffix}')
    if what == 'folder' and os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f'--output {path} is a file; give a folder to write into (made when missing)')
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ConfigError(f'--output {path}: {above} is a file, not a folder; give another path')


def _rank_prefix():
    rank = os.environ.get('RANK')
    return f'[rank {rank}] ' if rank not in (None, '', '0') else ''


def _say_error(line, after_peer=False):
    """``line`` on stderr (after the rank prefix) and in torchrun's error file, so that its summary names the rank
    where the failure began (``after_peer``: this process stopped because another one did; ``torchrun_error``)."""
    print(f'{_rank_prefix()}{line}', file=sys.stderr, flush=True)
    record_error(line, after_peer)


def _report_component(component, error):
    """A first line naming the component that raised ``error``, then its traceback; the exit status (1)."""
    _say_error(component_failure_line(component, error))
    traceback.print_exception(error)
    return 1


def _report_lost_peer(error, debug):
    """One line for a collective that failed because of another process of the job (its log says why; this
    process's traceback would only show where it waited); the exit status (1)."""
    if debug:
        traceback.print_exception(error)
    _say_error(peer_failure_line(error), True)
    return 1


def run(main, argv=None):
    """Run ``main(argv)`` under the error contract; returns the exit status.

    A process that joined a process group does not return: once every file is flushed it
    ends with ``os._exit(status)``.  Interpreter shutdown would otherwise race gloo's and
    nccl's threads, which DDP keeps alive and which may still release tensors, a way to
    end in ``std::terminate`` (SIGABRT) after a run that succeeded.
    """
    argv = sys.argv[1:] if argv is None else argv
    debug = '--debug' in argv
    status = 1
    try:
        status = main(argv) or 0
    except UserError as e:
        if debug:
            traceback.print_exc()
        _say_error(f'error: {user_message(e)}')
        status = EXIT_USER_ERROR
    except Preempted as e:  # a stop in training was logged by the solver (with how to resume)
        if e.checkpoint is None:  # a stop during set-up: said here
            print(f'{_rank_prefix()}{e}', file=sys.stderr, flush=True)
        status = e.exit_status
    except ComponentError as e:
        status = _report_lost_peer(e.error, debug) if lost_peer(e.error) else _report_component(e.component, e.error)
    except Exception as e:
        if lost_peer(e):
            status = _report_lost_peer(e, debug)
        elif (component := raising_component(e)) is None:  # the toolkit's own failure: the plain traceback
            record_error(first_line(e))
            raise
        else:
            status = _report_component(component, e)
    except KeyboardInterrupt:
        print('interrupted', file=sys.stderr)
        status = 130
    finally:
        joined = destroy_distributed()
    if joined:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
