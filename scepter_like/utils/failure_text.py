"""The one line that says why a run ended with an error, for the console (``cli.run``) and the run's log file
(``run_records.close_work_dir_log``) alike: a reader of either sees the same words.

A user's mistake is its ``error:`` line; a collective that failed because another process of the job
stopped is the line that says so (its traceback would only show where this process waited); an
exception a user's component raised is named with its component, and its traceback follows the
line (on the console, and in the log file after the line); the toolkit's own failure likewise.
"""

import re

from scepter_like.errors import UserError, user_message
from scepter_like.utils.blame import raising_component
from scepter_like.utils.distributed import lost_peer

PEER_FAILURES = {  # lost_peer's reasons, as the line says them
    'lost': "another process of the job stopped, so this one cannot go on; the cause is in that process's log",
    'late': (
        'a collective waited ENV.DIST_TIMEOUT for another process of the job in vain (it stopped, hangs or is far'
        " behind); that process's log may say why"
    ),
}


def first_line(error):
    lines = str(error).strip().splitlines()
    return f'{type(error).__name__}: {lines[0]}' if lines else type(error).__name__


def peer_failure_line(error):
    """The line of a collective that failed because of another process of the job (``lost_peer(error)``)."""
    said = re.sub(r'^\[[^\]]*\]\s*', '', str(error).strip()).split('. ')[0].splitlines()  # gloo's source place off
    return f'error: {PEER_FAILURES[lost_peer(error)]} ({said[0] if said else type(error).__name__})'


def component_failure_line(component, error):
    return f'error: {component} raised {first_line(error)} (its traceback follows)'


def failure_line(error):
    """``(line, whether the error's traceback follows it)`` for an exception that ended a run."""
    if isinstance(error, UserError):
        return f'error: {user_message(error)}', False
    if lost_peer(error):
        return peer_failure_line(error), False
    component = raising_component(error)
    if component is not None:
        return component_failure_line(component, error), True
    return f'the run ended with {first_line(error)} (its traceback follows)', True
