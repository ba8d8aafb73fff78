"""The error file torchrun's agent reads, so that its summary of a failed job names the rank the failure began on.

torch's ``@record`` writes ``TORCHELASTIC_ERROR_FILE`` for an exception that leaves the entry
point; the tools catch theirs (``cli.run``: one line, exit 1 or 2), so ``cli.run`` records the
line it printed here, in that file's layout (torch's public API writes only an exception's
traceback).  The agent calls "root cause" the failure with the smallest timestamp, in whole
seconds (a worker without a file: the second the agent saw it exit), and on a tie the one it
saw first, often rank 0: the bystander that stopped because another rank failed.  So the rank
where the failure began records its second rounded down, and a rank that stopped because
another one did (``after_peer``) records its second rounded up: it stopped after that rank's
record was written (the peer's connections close only after it), so it sorts after it.
"""

import json
import math
import os
import time

from scepter_like.utils.checkpoint import atomic_write_text

ERROR_FILE_VARIABLE = 'TORCHELASTIC_ERROR_FILE'  # where torchrun's agent reads a worker's error (unset outside it)


def record_error(line, after_peer=False):
    """Record ``line`` (the error this process printed) for torchrun's summary, in the error file's layout that
    torch's ``ErrorHandler`` writes and its agent reads (a message and ``extraInfo.timestamp``); nothing outside
    torchrun."""
    path = os.environ.get(ERROR_FILE_VARIABLE)
    if not path:
        return
    now = time.time()
    second = math.ceil(now) if after_peer else math.floor(now)
    atomic_write_text(path, json.dumps({'message': {'message': line, 'extraInfo': {'timestamp': str(second)}}}))
