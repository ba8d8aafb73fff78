"""A minimal DDP job that ends through the tools' exit path (``scepter_like.cli.run``).

One DDP step of a linear layer on gloo, then ``main`` returns 0 and ``cli.run`` tears the
process group down and ends the process, as every tool does after a run, without the
cost of a solver.  The job leaves one last all-reduce in flight as it returns (as a
collective nobody waited for would), so gloo's thread may drop that tensor's last
reference while the process exits: the moment the interpreter-shutdown race needs.
Without ``cli.run``'s ``os._exit`` about half the launches of 8 workers have a worker
that aborts (``terminate called without an active exception``, SIGABRT; docs/clusters.md),
and every worker prints its atexit line (``interpreter shutdown``), which only a process
that goes through interpreter shutdown runs; ``tests/test_preemption.py`` requires exit 0
from every worker and no such line.
"""

import atexit
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from scepter_like.cli import run  # noqa: E402
from scepter_like.utils.distributed import init_distributed  # noqa: E402


def main(argv):
    atexit.register(print, 'interpreter shutdown', flush=True)  # skipped by os._exit
    torch.set_num_threads(1)
    info = init_distributed(backend='gloo', timeout_s=60, device='cpu')
    model = DistributedDataParallel(torch.nn.Linear(4, 2))  # keeps the group (and gloo's threads) alive
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()  # DDP's gradient all-reduce
    optimizer.step()
    print(f'rank {info.rank} of {info.world_size} done', flush=True)
    dist.all_reduce(torch.ones(1), async_op=True)  # still in flight as the process ends
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
