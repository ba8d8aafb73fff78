"""The error file torchrun's agent reads, so that its summary of a failed job names the rank the failure began on.

torch's ``@record`` writes ``TORCHELASTIC_ERROR_FILE`` for an exception that leaves the entry
point; the tools catch theirs (``cli.run``: one line, exit 1 or 2), so ``cli.run`` records the
line it printed here, through torch's ``ErrorHandler``.  The agent calls "root cause" the failure
with the smallest timestamp, in whole seconds (a worker without a file: the second the agent saw
it exit), and on a tie the one it saw first, often rank 0: the bystander that stopped because
another rank failed.  So the rank where the failure began records its second rounded down, and a
rank that stopped because another one did (``after_peer``) records its second rounded up: it
stopped after that rank's record was written (the peer's connections close only after it), so it
sorts after it.
"""

import json
import math
import time

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler


class _LineHandler(ErrorHandler):
    """torch's handler (its file path, its careful write), recording a line and a second instead of a traceback."""

    def record_line(self, line, second):
        path = self._get_error_file_path()  # TORCHELASTIC_ERROR_FILE; None outside torchrun
        if path:
            self._write_error_file(
                path, json.dumps({'message': {'message': line, 'extraInfo': {'timestamp': str(second)}}})
            )


def record_error(line, after_peer=False):
    """Record ``line`` (the error this process printed) for torchrun's summary; nothing outside torchrun."""
    now = time.time()
    _LineHandler().record_line(line, math.ceil(now) if after_peer else math.floor(now))
