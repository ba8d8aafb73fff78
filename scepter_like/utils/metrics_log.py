"""metrics.jsonl: one JSON object per line, appended by rank 0 as a run goes.

Lines (every one has ``kind``, ``step`` = train steps completed, ``epoch`` (1-based) and
``time`` = unix seconds):

- ``{"kind": "start", "step": S, "resumed_from": path|null}`` when training (``solve``) starts;
- ``{"kind": "train", "iter": i, "epoch_iters": n, "values": {"loss": ..., "lr": ...}}`` per
  LogHook interval (the interval means LogHook prints);
- ``{"kind": "eval" | "test", "values": {"accuracy": ...}}`` per evaluation.

The file is never rewritten. A killed run may have written lines past the checkpoint its
resume starts from; ``read_metrics`` gives the clean history: a ``start`` line at step S
drops the earlier lines with a step above S, and of lines with the same kind and step the
last one wins. A line torn by a crash is skipped.
"""

import json
import math
import os
import time

from scepter_like.utils.logger import FLUSH_SECONDS

METRICS_FILE = 'metrics.jsonl'


def _json_value(v):
    return v if math.isfinite(v) else str(v)  # NaN / inf are not JSON


class MetricsLog:
    """Appends records to ``path``; the first write seals a line a crash left torn.

    Train lines are gathered and appended together at most every FLUSH_SECONDS (a file
    write between training steps costs far more than its own time); every other line, and
    ``flush()`` (called at the end of ``solve``), writes out what is pending at once.  A
    kill loses at most the last FLUSH_SECONDS of train lines.
    """

    def __init__(self, path):
        self.path = path
        self._pending = []
        self._flushed_at = time.monotonic()
        self._checked_tail = False

    def _seal_torn_tail(self, f):
        if f.tell() == 0:
            return
        with open(self.path, 'rb') as r:
            r.seek(-1, os.SEEK_END)
            if r.read(1) != b'\n':
                f.write('\n')

    def write(self, kind, solver, **fields):
        record = {'kind': kind, 'epoch': fields.pop('epoch'), 'step': solver.total_iter, 'time': round(time.time(), 3)}
        for key, value in fields.items():
            if isinstance(value, dict):
                value = {k: _json_value(float(v)) for k, v in value.items()}
            record[key] = value
        self._pending.append(record)
        if kind != 'train' or time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self):
        """Append the pending lines to the file."""
        self._flushed_at = time.monotonic()
        if not self._pending:
            return
        with open(self.path, 'a', encoding='utf-8') as f:
            if not self._checked_tail:
                self._seal_torn_tail(f)
                self._checked_tail = True
            f.write(''.join(json.dumps(record) + '\n' for record in self._pending))
        self._pending = []

    def write_start(self, solver, resumed_from=None):
        self.write('start', solver, epoch=solver.epoch + 1, resumed_from=resumed_from)

    def write_train(self, solver, values, step_time, data_time):
        """A LogHook interval: mean scalars and lr in ``values``; seconds per step and of data loading."""
        self.write(
            'train',
            solver,
            epoch=solver.epoch + 1,
            iter=solver.iter,
            epoch_iters=solver.epoch_max_iter,
            step_time=round(step_time, 6),
            data_time=round(data_time, 6),
            values=values,
        )

    def write_epoch_outputs(self, solver, mode):
        """An eval / test line; ``epoch`` counts the train epochs completed by then."""
        self.write(mode, solver, epoch=solver.progress_state()['epoch'], values=solver.epoch_outputs.get(mode, {}))


def read_metrics(path):
    """The clean history of a metrics.jsonl file (see the module doc), in file order."""
    records = {}  # (kind, step) -> record; a repeated key moves to the end
    with open(path, encoding='utf-8') as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or 'kind' not in record or 'step' not in record:
                continue
            if record['kind'] == 'start':
                records = {k: r for k, r in records.items() if r['step'] <= record['step']}
            key = (record['kind'], record['step'])
            records.pop(key, None)
            records[key] = record
    return list(records.values())
