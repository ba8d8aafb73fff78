"""A run that failed before its first evaluation is no earlier run to protect.

A fresh run refuses a WORK_DIR that holds another run's checkpoints (``refuse_to_mix_runs``).
When that other run was started fresh and failed before any evaluation (a wrong metric KEYS,
a broken eval step), its checkpoints are of no use, and refusing would only block the fixed
rerun of the same command.  So a failed run leaves a line of kind ``failed`` in
metrics.jsonl, and the next fresh run in that WORK_DIR moves such a run's checkpoints and
records to ``records_history/<its start time>/`` (nothing is deleted) and starts.  A run
stopped by a signal, one that evaluated, and one that resumed another stay protected.
"""

import json
import os

from scepter_like.errors import Preempted, RunPruned
from scepter_like.solver.run_records import archive_previous
from scepter_like.utils.checkpoint import CHECKPOINT_DIR
from scepter_like.utils.metrics_log import METRICS_FILE

FAILED_KIND = 'failed'  # metrics.jsonl: training failed with an exception
PRUNED_KIND = 'pruned'  # metrics.jsonl: a search pruned the run (it ended on purpose, not failed)
EVALUATED_KINDS = {'eval', 'test'}


def record_failure(solver):
    """metrics.jsonl notes that training failed, or was pruned (``solver.failed``; a stop by signal is neither)."""
    failed = solver.failed
    if solver.metrics_log is None or not isinstance(failed, Exception) or isinstance(failed, Preempted):
        return
    progress = solver.progress
    if isinstance(failed, RunPruned):
        solver.metrics_log.write(PRUNED_KIND, progress.total_iter, progress.epoch + 1, reason=str(failed))
    else:
        solver.metrics_log.write(FAILED_KIND, progress.total_iter, progress.epoch + 1, error=type(failed).__name__)
    solver.metrics_log.flush()


def failed_before_evaluation(work_dir):
    """Whether the last run metrics.jsonl records in ``work_dir`` started fresh and failed before any evaluation."""
    path = os.path.join(work_dir, METRICS_FILE)
    if not os.path.isfile(path):
        return False
    last_run = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:  # a line torn by a crash
                continue
            if isinstance(record, dict):
                last_run = [record] if record.get('kind') == 'start' else last_run + [record]
    kinds = {record.get('kind') for record in last_run}
    fresh = bool(last_run) and last_run[0].get('kind') == 'start' and not last_run[0].get('resumed_from')
    return fresh and FAILED_KIND in kinds and not EVALUATED_KINDS & kinds


def set_aside_failed_run(solver):
    """Before a fresh run (rank 0): move the checkpoints and records of a last run that failed unevaluated."""
    work_dir = solver.work_dir
    if not solver.is_main or not os.path.isdir(os.path.join(work_dir, CHECKPOINT_DIR)):
        return
    if failed_before_evaluation(work_dir):
        target = archive_previous(work_dir, extra=(CHECKPOINT_DIR,))
        solver.logger.warning(
            f'the last run in {work_dir} failed before its first evaluation: its checkpoints and records are'
            f' moved to {target}, and this run starts fresh'
        )
