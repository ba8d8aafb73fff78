"""Run under torchrun (2 processes, gloo): OutputMeans over uneven ranks.

Rank 0 sees two batches (8 and 3 samples) with ``val_loss`` and ``aux``; rank 1 one batch
(5 samples) with ``val_loss`` only, then ``extra``, which rank 0 never sees.  Rank 0 writes
the reduced means to ``argv[1]`` (JSON).
"""

import sys

import torch
import torch.distributed as dist
from worker_report import report_and_leave

from scepter_like.metric.output_means import OutputMeans

STEPS = {
    0: [(8, {'val_loss': 1.0, 'aux': 2.0}), (3, {'val_loss': 4.0, 'aux': 6.0})],
    1: [(5, {'val_loss': 2.0}), (2, {'extra': 7.0})],
}


def expected():
    """The means over every rank's samples, by hand."""
    sums, counts = {}, {}
    for steps in STEPS.values():
        for samples, values in steps:
            for name, value in values.items():
                sums[name] = sums.get(name, 0.0) + samples * value
                counts[name] = counts.get(name, 0) + samples
    return {name: sums[name] / counts[name] for name in sums}


def main(out):
    dist.init_process_group('gloo')
    means = OutputMeans(read_by_metrics=['logits'])
    for samples, values in STEPS[dist.get_rank()]:
        results = {k: torch.tensor(v) for k, v in values.items()}
        means.update({**results, 'logits': torch.tensor(9.0), 'pred': torch.zeros(samples)}, samples)
    values = means.compute()
    report_and_leave(out, values)


if __name__ == '__main__':
    main(sys.argv[1])
