"""Run under torchrun (2 processes, gloo): F1Metric over sharded labels, rank 1 seeing no batch at all.

Rank 0 takes every row of a fixed set of logits and labels in two uneven batches and writes
the reduced values to ``argv[1]`` (JSON): rank 1 meets ``compute`` without having seen the
class count, as a rank of a short eval shard does.
"""

import sys

import torch
import torch.distributed as dist
from worker_report import report_and_leave

from scepter_like.metric import METRICS


def scores(n=61, classes=4):
    g = torch.Generator().manual_seed(3)
    return torch.randn(n, classes, generator=g), torch.randint(0, classes, (n,), generator=g)


def main(out):
    dist.init_process_group('gloo')
    metric = METRICS.build({'NAME': 'F1Metric'})
    if dist.get_rank() == 0:
        logits, label = scores()
        for part in (slice(0, 17), slice(17, None)):
            metric.update({'logits': logits[part], 'label': label[part]})
    values = metric.compute()
    report_and_leave(out, values)


if __name__ == '__main__':
    main(sys.argv[1])
