"""Scalars a hook logs outside a train step: ``solver.log_scalar`` from ``before_epoch`` / ``after_epoch``.

Inside a step a scalar joins the step's outputs, which LogHook and TensorboardLogHook
average over their intervals.  Outside one (an epoch stage, ``before_all_iter`` /
``after_all_iter``) there is no interval to average over: such a scalar is an epoch
scalar, kept here until the epoch stage it was logged in (or the next one) has run all its
hooks, then written once: a log line, a ``metrics.jsonl`` line of kind ``epoch`` (with the
mode and stage), and to each listener (TensorboardLogHook: ``{mode}/{name}``).  The value
is the logging rank's; rank 0 writes.
"""

import torch

EPOCH_SCALARS_KIND = 'epoch'  # the metrics.jsonl kind of their lines


class EpochScalars:
    def __init__(self):
        self.pending = {}  # name -> float, logged since the last write
        self._listeners = []

    def add(self, name, value):
        self.pending[name] = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)

    def subscribe(self, listener):
        """Call ``listener(solver, {name: value})`` with every write (once per listener)."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def write(self, solver, stage):
        """Write what is pending, as logged by the end of ``stage`` of the solver's current mode."""
        if not self.pending:
            return
        values, self.pending = self.pending, {}
        progress, mode = solver.progress, solver.mode
        text = ', '.join(f'{name}: {value:.6g}' for name, value in values.items())
        solver.logger.info(f'{mode} {stage} of epoch {progress.epoch + 1}/{progress.max_epochs}: {text}')
        if solver.metrics_log is not None:
            solver.metrics_log.write(
                EPOCH_SCALARS_KIND, progress.total_iter, progress.epoch + 1, mode=mode, stage=stage, values=values
            )
        for listener in self._listeners:
            listener(solver, values)
