"""A checkpoint every rank reads is one file: the one a run resumes from, the one its test takes weights from.

Rank 0 names the file and every rank reads it from its own disk.  On nodes that do not share
WORK_DIR a rank would then fail alone (the file is only on rank 0's node) or, holding an older
copy under the same name, go on with other weights than the others: a test whose all-reduced
result mixes two models.  So every rank checks that it sees the file, and that it holds the
same bytes as rank 0's.
"""

import hashlib
import os

from scepter_like.errors import ConfigError
from scepter_like.utils.distributed import all_gather_object

SHARED = 'put WORK_DIR on a filesystem every node sees'
CHUNK = 1 << 20


def check_every_rank_reads(path, what):
    """ConfigError on every rank unless ``path`` is a file on each and the same bytes on each (a collective).

    ``what`` leads the message (``SOLVER.RESUME_FROM: checkpoint``)."""
    seen = all_gather_object(os.path.isfile(path))
    missing = [rank for rank, found in enumerate(seen) if not found]
    if missing:
        on_some = f' on rank(s) {missing}; {SHARED}' if len(missing) < len(seen) else ''
        raise ConfigError(f'{what} {path} does not exist{on_some}; fix the path')
    if len(seen) == 1:
        return
    digests = all_gather_object(_digest(path))
    other = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
    if other:
        raise ConfigError(
            f'{what} {path} holds other bytes on rank(s) {other} than on rank 0 (each node reads its own copy);'
            f' {SHARED}'
        )


def _digest(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
