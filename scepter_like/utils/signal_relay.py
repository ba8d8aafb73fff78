"""Passing stop signals on to the training processes a tool starts (a multirun's runs, a search's workers).

Each child starts in a session of its own, so a signal meant for the whole process group (a
terminal's Ctrl-C) reaches it once, through the parent: a child that is a training run stops
at its next step boundary on the first and at once on a second Ctrl-C, as a run started alone
does.  ``kill PID`` of the parent alone reaches the children the same way.  A third Ctrl-C
kills them: a run hung where no signal is acted on cannot hold its parent.
"""

import signal
import subprocess
import threading

from scepter_like.utils.launch_env import STOP_SIGNALS

KILL_AFTER_SIGINTS = 3


class SignalRelay:
    """Starts child processes (``start``) and passes stop signals on to those still running.

    While entered (main thread only), the stop signals this process gets are recorded
    (``signum``: the first, 0 for none) and passed on; ``send`` passes one on by hand (the
    parent was stopped while something else held the handlers: a trial's solver).  With no
    child it only records them: what it encloses runs to its end (a search trial's close).
    """

    def __init__(self):
        self.signum = 0
        self.children = []
        self._sigints = 0
        self._previous = {}

    def start(self, cmd, **popen_kwargs):
        """``subprocess.Popen(cmd, ...)`` in a session of its own (on the main thread: elsewhere no handler can pass
        signals on, so it stays in this group); a signal already recorded is passed on at once."""
        own_session = threading.current_thread() is threading.main_thread()
        child = subprocess.Popen(cmd, start_new_session=own_session, **popen_kwargs)
        self.children.append(child)
        if self.signum:
            child.send_signal(self.signum)
        return child

    def send(self, signum):
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signum)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        return False

    def _handle(self, signum, frame):
        self.signum = self.signum or signum
        self._sigints += signum == signal.SIGINT
        if self._sigints >= KILL_AFTER_SIGINTS:
            for child in self.children:
                if child.poll() is None:
                    child.kill()
            return
        self.send(signum)
