"""metrics.jsonl: one JSON object per line, appended by rank 0 as a run goes.

Lines (every one has ``kind``, ``step`` = train steps completed, ``epoch`` (1-based) and
``time`` = unix seconds):

- ``{"kind": "start", "step": S, "resumed_from": path|null}`` when training (``solve``) starts;
- ``{"kind": "train", "iter": i, "epoch_iters": n, "values": {"loss": ..., "lr": ...}}`` per
  LogHook interval (the interval means LogHook prints);
- ``{"kind": "eval", "values": {"accuracy": ...}}`` per evaluation; one after MAX_STEPS or a stop cut an epoch
  short has ``iter`` and ``epoch_iters`` too, and ``epoch`` is the cut epoch (the log's ``eval epoch 2/4 at iter
  3/7 (cut short)``): it is no evaluation of that epoch, which a resumed run evaluates when the epoch ends;
- ``{"kind": "test", "weights": "last" | "checkpoints/....pth", "values": {...}}`` per test of this run's
  weights: the model's own (``last``, EMA / SWA average swapped in where the run evaluates with it), or a
  file in WORK_DIR (its path in WORK_DIR).  A test of weights outside WORK_DIR (another run's) writes
  no line: it is no result of this run;
- ``{"kind": "epoch", "mode": "train", "stage": "after_epoch", "values": {...}}``: scalars a hook
  logged outside a step (``solver/epoch_scalars.py``);
- ``{"kind": "failed", "error": "ValueError"}`` when training failed (``solver/failed_runs.py``);
- ``{"kind": "pruned", "reason": "pruned after epoch 2: accuracy 0.31"}`` when a search pruned the run (no failure).

Whatever mirrors the history elsewhere (an experiment tracker) subscribes with
``add_listener`` and gets each batch of records as it reaches the file, so it holds the
same points as the file.

The file is never rewritten. A killed run may have written lines past the checkpoint its
resume starts from; ``read_metrics`` gives the clean history: a ``start`` line at step S
drops the earlier lines with a step above S, and of lines with the same kind, step (and mode,
stage and weights, where given) the last one wins. A line torn by a crash is skipped.
"""

import contextlib
import json
import math
import os
import time

METRICS_FILE = 'metrics.jsonl'
FLUSH_SECONDS = 1.0  # train lines wait at most this long in memory


def _json_value(v):
    return v if math.isfinite(v) else str(v)  # NaN / inf are not JSON


class MetricsLog:
    """Appends records to ``path``; the first write seals a line a crash left torn.

    Train lines are appended in batches (one file append per batch, not per line): with
    the first train line FLUSH_SECONDS after the last append, before every other line, at
    a checkpoint and at the end of ``solve``.
    """

    def __init__(self, path):
        self.path = path
        self._pending = []
        self._checked_tail = False
        self._flushed_at = time.monotonic()
        self._listeners = []
        self._test_weights = 'last'  # what a test line records it ran with; None: it writes none

    @contextlib.contextmanager
    def testing(self, weights):
        """Test lines written inside record ``weights``; None: none is written (weights of no part of this run)."""
        before, self._test_weights = self._test_weights, weights
        try:
            yield
        finally:
            self._test_weights = before

    def add_listener(self, fn):
        """Call ``fn(records)`` with every batch of records once it is in the file (records: read-only dicts)."""
        self._listeners.append(fn)

    def remove_listener(self, fn):
        self._listeners.remove(fn)

    def _seal_torn_tail(self, f):
        if f.tell() == 0:
            return
        with open(self.path, 'rb') as r:
            r.seek(-1, os.SEEK_END)
            if r.read(1) != b'\n':
                f.write('\n')

    def write(self, kind, step, epoch, wall=None, **fields):
        """One line; ``wall``: the unix time it describes (default now)."""
        record = {'kind': kind, 'epoch': epoch, 'step': step, 'time': round(time.time() if wall is None else wall, 3)}
        for key, value in fields.items():
            if isinstance(value, dict):
                value = {k: _json_value(float(v)) for k, v in value.items()}
            record[key] = value
        self._pending.append(record)
        if kind != 'train' or time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self):
        """Append the pending lines to the file."""
        if not self._pending:
            return
        with open(self.path, 'a', encoding='utf-8') as f:
            if not self._checked_tail:
                self._seal_torn_tail(f)
                self._checked_tail = True
            f.write(''.join(json.dumps(record) + '\n' for record in self._pending))
        records, self._pending = self._pending, []
        self._flushed_at = time.monotonic()
        for fn in list(self._listeners):
            fn(records)

    def write_start(self, solver, resumed_from=None):
        self.write('start', solver.progress.total_iter, solver.progress.epoch + 1, resumed_from=resumed_from)

    def write_train(self, solver, step_time, data_time, values):
        """A LogHook line: the interval's mean scalars and lr in ``values``."""
        self.write(
            'train',
            solver.progress.total_iter,
            solver.progress.epoch + 1,
            iter=solver.progress.iters[solver.mode],
            epoch_iters=solver.epoch_max_iter,
            step_time=round(step_time, 6),
            data_time=round(data_time, 6),
            values=values,
        )

    def write_epoch_outputs(self, solver, mode):
        """An eval / test line; ``epoch`` counts the train epochs completed by then.  An evaluation of an epoch cut
        short (MAX_STEPS, a stop) is of that epoch at ``iter`` of its ``epoch_iters``, as the log says."""
        progress, values = solver.progress, solver.epoch_outputs.get(mode, {})
        epoch = progress.epochs_completed()
        if mode == 'eval' and progress.epoch_cut:
            at = {'iter': progress.iters['train'], 'epoch_iters': progress.epoch_iters['train']}
            self.write(mode, progress.total_iter, progress.epoch + 1, values=values, **at)
        elif mode != 'test':
            self.write(mode, progress.total_iter, epoch, values=values)
        elif self._test_weights is not None:
            self.write(mode, progress.total_iter, epoch, weights=self._test_weights, values=values)


def read_metrics(path):
    """The clean history of a metrics.jsonl file (see the module doc), in file order."""
    records = {}  # (kind, step, mode, stage) -> record; a repeated key moves to the end
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
            key = (record['kind'], record['step'], record.get('mode'), record.get('stage'), record.get('weights'))
            records.pop(key, None)
            records[key] = record
    return list(records.values())
