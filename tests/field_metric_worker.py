"""Run under torchrun (2 processes, gloo): RelativeL2Error and MaxAbsError over sharded data.

Each rank takes rows ``rank, rank + W, ...`` (as the eval sampler does) of a fixed random
field in two uneven batches, and rank 0 writes the reduced values to ``argv[1]`` (JSON).
"""

import sys

import torch
import torch.distributed as dist
from worker_report import report_and_leave

from scepter_like.metric import METRICS


def field(n=203):
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, 1, generator=g), torch.randn(n, 1, generator=g)


def main(out):
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    pred, ref = field()
    mine = slice(rank, None, world)
    pred, ref = pred[mine], ref[mine]
    metrics = [METRICS.build({'NAME': name}) for name in ('RelativeL2Error', 'MaxAbsError')]
    cut = 17 + rank  # uneven batches
    for metric in metrics:
        for part in (slice(0, cut), slice(cut, None)):
            metric.update({'u': pred[part], 'u_exact': ref[part]})
    values = {k: v for metric in metrics for k, v in metric.compute().items()}
    report_and_leave(out, values)


if __name__ == '__main__':
    main(sys.argv[1])
