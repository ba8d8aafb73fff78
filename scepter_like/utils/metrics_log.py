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

METRICS_FILE = 'metrics.jsonl'


def _json_value(v):
    return v if math.isfinite(v) else str(v)  # NaN / inf are not JSON


class MetricsLog:
    """Appends records to ``path``; the first write seals a line a crash left torn.

    The file stays open between writes (opening it costs more than a log line) and each
    line is flushed to the OS as it is written, so readers see every finished line.
    """

    def __init__(self, path):
        self.path = path
        self._file = None

    def _open(self):
        f = open(self.path, 'a', encoding='utf-8')
        if f.tell():  # a crash may have left a torn last line
            with open(self.path, 'rb') as r:
                r.seek(-1, os.SEEK_END)
                if r.read(1) != b'\n':
                    f.write('\n')
        return f

    def write(self, kind, solver, **fields):
        record = {'kind': kind, 'epoch': fields.pop('epoch'), 'step': solver.total_iter, 'time': round(time.time(), 3)}
        for key, value in fields.items():
            if isinstance(value, dict):
                value = {k: _json_value(float(v)) for k, v in value.items()}
            record[key] = value
        if self._file is None:
            self._file = self._open()
        self._file.write(json.dumps(record) + '\n')
        self._file.flush()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

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
