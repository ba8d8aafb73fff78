"""Placing the model on its device and wrapping it for data parallelism."""

from torch.nn.parallel import DistributedDataParallel

from scepter_like.errors import ConfigError

PARALLEL_MODES = ('ddp',)


def wrap_model(model, dist_info, parallel='ddp', find_unused_parameters=False):
    """Move ``model`` to this rank's device; wrap it in DDP when more than one process runs."""
    model.to(dist_info.device)
    if not dist_info.distributed:
        return model
    if parallel not in PARALLEL_MODES:
        raise ConfigError(f'SOLVER.PARALLEL: {parallel!r} is not one of {", ".join(PARALLEL_MODES)}')
    device_ids = [dist_info.device.index] if dist_info.device.type == 'cuda' else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)
