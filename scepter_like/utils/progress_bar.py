"""The live progress bar of LogHook: a tqdm bar (done/total, rate, elapsed, ETA) redrawn in place.

tqdm draws and throttles the bar (at most every ``MIN_INTERVAL_S``; ``tick`` costs one
counter update per step).  This module ties it to logging: while a bar is attached to a
logger, the logger's terminal handlers drop the periodic progress lines (records with
``progress_line=True``; file handlers still write them) and clear the bar before any other
message, so log lines never land on the bar's line.  LogHook creates a bar only on a
terminal or a Jupyter notebook's output (``live_display``; or when asked to), so pipes and
log files never see one.  tqdm is imported when the first bar is made; its text bar redraws
in place in a notebook too (the output area honours carriage returns), with no widget
package needed.
"""

import logging
import os

MIN_INTERVAL_S = 0.1
FALLBACK_SIZE = (100, 24)  # columns, rows: for a terminal that does not tell its size
BAR_FORMAT = '{desc} [{bar}] {n_fmt}/{total_fmt}, {rate_fmt}, elapsed {elapsed}, eta {remaining}{postfix}'


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def live_display(stream):
    """Whether ``stream`` shows a bar redrawn in place: a terminal, or a Jupyter kernel's output stream."""
    return _is_terminal(stream) or type(stream).__module__.startswith('ipykernel.')


def _terminal_handlers(logger):
    """Console (non-file) stream handlers of ``logger`` and the loggers it propagates to, showing live."""
    found = []
    while logger is not None:
        found += [
            h
            for h in logger.handlers
            if isinstance(h, logging.StreamHandler)
            and not isinstance(h, logging.FileHandler)
            and live_display(getattr(h, 'stream', None))
        ]
        logger = logger.parent if logger.propagate else None
    return found


def _known_size(stream):
    """Whether ``stream`` is a terminal that knows its size (a bare pseudo-terminal says 0x0)."""
    try:
        return min(os.get_terminal_size(stream.fileno())) > 0
    except (AttributeError, ValueError, OSError):
        return False


def format_hms(seconds):
    """``H:MM:SS`` (hours past 24 keep counting); a few integer ops, cheap enough for a log line."""
    minutes, secs = divmod(max(round(seconds), 0), 60)
    hours, minutes = divmod(minutes, 60)
    return f'{hours}:{minutes:02d}:{secs:02d}'


def _tqdm_class():
    from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0  # no monitor thread: the loop ticks often enough

    return Bar


class ProgressBar(logging.Filter):
    """Draws ``label [#####.....] done/total, rate it/s, elapsed, eta`` on ``stream``, one bar per ``start``."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self._handlers = []
        self._bar = None
        self._postfix = ''  # kept from one epoch's bar to the next
        self._tqdm = _tqdm_class()

    # -- logging integration --------------------------------------------------------------------
    def attach(self, logger):
        self._handlers = _terminal_handlers(logger)
        for handler in self._handlers:
            handler.addFilter(self)

    def detach(self):
        for handler in self._handlers:
            handler.removeFilter(self)
        self._handlers = []
        self._close()

    def filter(self, record):
        if getattr(record, 'progress_line', False):
            return False
        if self._bar is not None:
            self._bar.clear()  # redrawn at the next tick
        return True

    # -- drawing --------------------------------------------------------------------------------
    def start(self, label, total, done=0):
        self._close()
        sized = _known_size(self.stream)
        self._bar = self._tqdm(
            total=total,
            initial=done,
            desc=label,
            file=self.stream,
            ascii='.#',
            bar_format=BAR_FORMAT,
            mininterval=MIN_INTERVAL_S,
            # follows the terminal's size as it changes; a terminal that says 0x0 gets a fixed one
            dynamic_ncols=sized,
            ncols=None if sized else FALLBACK_SIZE[0],
            nrows=None if sized else FALLBACK_SIZE[1],
            leave=True,
        )
        if self._postfix:
            self._bar.set_postfix_str(self._postfix, refresh=False)

    def tick(self, done):
        bar = self._bar
        bar.update(done - bar.n)

    def set_postfix(self, text):
        """Text after the bar, e.g. ``loss 0.53`` (shown from the next redraw)."""
        self._postfix = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def finish(self, done):
        self.tick(done)
        self._close()

    def _close(self):
        if self._bar is not None:
            self._bar.close()  # the final state stays on its own line
            self._bar = None
