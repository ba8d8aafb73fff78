"""A one-line terminal progress bar (done/total, rate, ETA), redrawn in place with '\\r'.

``tick`` costs one clock read per step and redraws at most every ``MIN_INTERVAL_S``.
While a bar is attached to a logger, the logger's terminal handlers drop the periodic
progress lines (records with ``progress_line=True``; file handlers still write them) and
erase the bar before any other message, so log lines never land on the bar's line.
"""

import logging
import time

MIN_INTERVAL_S = 0.1
WIDTH = 30


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_handlers(logger):
    """Console (non-file) stream handlers of ``logger`` and the loggers it propagates to."""
    found = []
    while logger is not None:
        found += [
            h
            for h in logger.handlers
            if isinstance(h, logging.StreamHandler)
            and not isinstance(h, logging.FileHandler)
            and _is_terminal(getattr(h, 'stream', None))
        ]
        logger = logger.parent if logger.propagate else None
    return found


def format_hms(seconds):
    """``H:MM:SS`` (hours past 24 keep counting); a few integer ops, cheap enough for a log line."""
    minutes, secs = divmod(max(round(seconds), 0), 60)
    hours, minutes = divmod(minutes, 60)
    return f'{hours}:{minutes:02d}:{secs:02d}'


class ProgressBar(logging.Filter):
    """Draws ``label [#####.....] done/total, rate it/s, eta H:MM:SS`` on ``stream``."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self.postfix = ''  # appended to the bar, e.g. ', loss 0.53'
        self._handlers = []
        self._drawn = False
        self._reset('', 0, 0)

    def _reset(self, label, total, done):
        self.label, self.total, self.first = label, total, done
        self._start = time.perf_counter()
        self._last = float('-inf')

    # -- logging integration --------------------------------------------------------------------
    def attach(self, logger):
        self._handlers = _terminal_handlers(logger)
        for handler in self._handlers:
            handler.addFilter(self)

    def detach(self):
        for handler in self._handlers:
            handler.removeFilter(self)
        self._handlers = []

    def filter(self, record):
        if getattr(record, 'progress_line', False):
            return False
        self._erase()
        return True

    def _erase(self):
        if self._drawn:
            self.stream.write('\r\x1b[K')
            self.stream.flush()
            self._drawn = False

    # -- drawing --------------------------------------------------------------------------------
    def start(self, label, total, done=0):
        self._erase()
        self._reset(label, total, done)

    def tick(self, done):
        now = time.perf_counter()
        if now - self._last >= MIN_INTERVAL_S:
            self._draw(done, now)

    def finish(self, done):
        self._draw(done, time.perf_counter())
        self.stream.write('\n')
        self.stream.flush()
        self._drawn = False

    def _draw(self, done, now):
        self._last = now
        elapsed = now - self._start
        rate = (done - self.first) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else 0.0
        filled = WIDTH * done // self.total if self.total else WIDTH
        bar = '#' * filled + '.' * (WIDTH - filled)
        text = (
            f'{self.label} [{bar}] {done}/{self.total}, {rate:.1f} it/s, '
            f'elapsed {format_hms(elapsed)}, eta {format_hms(eta)}{self.postfix}'
        )
        self.stream.write('\r' + text + '\x1b[K')
        self.stream.flush()
        self._drawn = True
