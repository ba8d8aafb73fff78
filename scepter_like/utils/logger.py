"""Logging set-up on the standard ``logging`` module.

Rank 0 logs INFO and up to the console and the log file; other ranks show only warnings
and errors, prefixed by their rank, so a problem on any rank is still seen.
"""

import logging
import os
import sys
import time
import weakref

from scepter_like.utils.log_values import LogAgg, time_since  # scepter's names, for ported hooks

__all__ = ['LineWriter', 'LogAgg', 'add_file_handler', 'get_logger', 'time_since']

LOGGER_NAME = 'scepter_like'
FORMAT = '%(asctime)s %(levelname)s %(message)s'
DATEFMT = '%Y-%m-%d %H:%M:%S'


class _Formatter(logging.Formatter):
    """The standard formatter, making the time text once per second and each record's text once.

    On rank 0 the console and the log file share one formatter: the second handler gets
    the text the first made.  Each cache is one tuple, replaced whole, because handlers
    of a shared formatter may format from two threads at once.
    """

    def __init__(self, fmt, datefmt):
        super().__init__(fmt, datefmt)
        self._time = (None, '')  # (second, its text)
        self._last = (None, '')  # (weak reference to the last record, its text)

    def format(self, record):
        ref, text = self._last
        if ref is not None and ref() is record:
            return text
        text = super().format(record)
        self._last = (weakref.ref(record), text)
        return text

    def formatTime(self, record, datefmt=None):  # noqa: N802  (logging's name)
        if not datefmt:  # the default format shows milliseconds
            return super().formatTime(record, datefmt)
        second, text = self._time
        if int(record.created) != second:
            text = super().formatTime(record, datefmt)
            self._time = (int(record.created), text)
        return text


def is_own_handler(handler):
    """Whether ``handler`` is one this module added (the console's or a run's log file), not the program's."""
    return getattr(handler, '_scepter_console', False) or getattr(handler, '_scepter_file', False)


def get_logger(name=LOGGER_NAME, rank=0, stream=None):
    """A logger with one console handler for this rank (handlers are replaced, not added); INFO unless the program
    set a level of its own on it.  The handler carries what ``release_console`` needs to give the program the
    logger back as it was (``_scepter_before``) and the sessions holding it (``holders``), from one replaced."""
    logger = logging.getLogger(name)
    consoles = [h for h in logger.handlers if getattr(h, '_scepter_console', False)]
    handler = logging.StreamHandler(stream or sys.stdout)
    handler._scepter_console = True
    handler._scepter_before = consoles[0]._scepter_before if consoles else (logger.level, logger.propagate)
    handler.holders = consoles[0].holders if consoles else weakref.WeakSet()
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in consoles:
        logger.removeHandler(h)
    prefix = f'[rank {rank}] ' if rank else ''
    handler.setFormatter(_Formatter(f'{prefix}{FORMAT}', DATEFMT))
    handler.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.addHandler(handler)
    return logger


def console_handler(logger):
    """The console handler ``get_logger`` gave ``logger``, or None."""
    return next((h for h in logger.handlers if getattr(h, '_scepter_console', False)), None)


def release_console(logger):
    """Undo ``get_logger`` on ``logger``: its console handler removed and closed, the level (unless the program set
    another since) and ``propagate`` as they were, so the program's own logging gets the records again."""
    handler = console_handler(logger)
    if handler is None:
        return
    logger.removeHandler(handler)
    handler.close()
    level, logger.propagate = handler._scepter_before
    if logger.level == logging.INFO:  # get_logger's
        logger.setLevel(level)


def add_file_handler(logger, path):
    """Append the log to ``path`` (rank 0 only calls this); returns the handler to remove later.

    One run's file at a time (``attach_file_handler``): an earlier run of this process still open (a notebook cell
    run again without close()) has its file set aside, or it would take this run's lines too.  A level above INFO
    on ``logger`` (set to quiet a notebook) would leave the file nearly empty: that is said, with the way to quiet
    only the console.
    """
    for other in _run_files(logger):
        logger.warning(
            f'another run of this process logs to {other.baseFilename} (its session is open); that file is set aside'
            ' while this run logs, and taken back when that session runs again (close sessions you are done with)'
        )
    if not logger.isEnabledFor(logging.INFO):
        level = logging.getLevelName(logger.getEffectiveLevel())
        inherited = (  # no level of its own: logging.basicConfig() without level=INFO, most often
            f' (from the root logger: give logging.basicConfig level=logging.INFO, or set {logger.name!r} to INFO)'
            if logger.level == logging.NOTSET
            else ''
        )
        logger.warning(
            f'the {logger.name!r} logger is at level {level}{inherited}, so {path} gets no INFO lines; to quiet only'
            ' the console, keep the logger at INFO and give your console handler the higher level (docs/python_api.md,'
            ' Logging)'
        )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    handler = logging.FileHandler(path, encoding='utf-8')
    handler._scepter_file = True
    console = [h.formatter for h in logger.handlers if getattr(h, '_scepter_console', False)]
    same = console and isinstance(console[0], _Formatter) and console[0]._fmt == FORMAT  # rank 0: no prefix
    handler.setFormatter(console[0] if same else _Formatter(FORMAT, DATEFMT))
    handler.setLevel(logging.INFO)
    attach_file_handler(logger, handler)
    return handler


def attach_file_handler(logger, handler):
    """Make ``handler`` (a run's log file) the one run file on ``logger``: any other is set aside, not closed (its
    run attaches it again when it runs; its ``close`` closes it)."""
    for other in _run_files(logger):
        if other is not handler:
            logger.removeHandler(other)
    if handler not in logger.handlers:
        logger.addHandler(handler)


def _run_files(logger):
    return [h for h in logger.handlers if getattr(h, '_scepter_file', False)]


class LineWriter:
    """Writes one kind of INFO line (LogHook's) through ``logger`` for about two thirds of ``logger.info``'s cost.

    ``logger.info`` works out, for every record, what is the same for every line of one
    call site: the caller's file, line and function (a walk up the stack), the thread and
    the process.  Here they are worked out once, from the line that creates the writer;
    each line copies them into a standard ``LogRecord`` and adds its message and time, so
    handlers, filters and formatters see what ``logger.info`` would have given them.
    """

    def __init__(self, logger, **extra):
        self.logger = logger
        caller = sys._getframe(1)
        record = logger.makeRecord(
            logger.name,
            logging.INFO,
            caller.f_code.co_filename,
            caller.f_lineno,
            '',
            None,
            None,
            caller.f_code.co_name,
            extra,
        )
        self._fields = dict(record.__dict__)

    def info(self, text):
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        record = logging.LogRecord.__new__(logging.LogRecord)
        fields = record.__dict__
        fields.update(self._fields)
        now = time.time()
        fields['msg'] = text
        fields['created'] = now
        fields['msecs'] = (now - int(now)) * 1000
        fields['relativeCreated'] += (now - self._fields['created']) * 1000  # from the template's
        logger.handle(record)
