"""How a test's torchrun worker ends: rank 0 writes its values as JSON, and every rank leaves the process group.

``conftest.torchrun_worker_values`` runs the worker and reads the file.
"""

import json

import torch.distributed as dist


def report_and_leave(out, values):
    if dist.get_rank() == 0:
        with open(out, 'w') as f:
            json.dump(values, f)
    dist.destroy_process_group()
