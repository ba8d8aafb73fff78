"""``scepter.modules.utils.data`` maps here: move the tensors of a nested batch between devices.

scepter's ``transfer_data_to_cuda`` calls ``.cuda()`` unconditionally; here it moves to
the current CUDA device when CUDA is available and leaves the data where it is
otherwise, so ported code runs on a CPU machine too.
"""

import torch

__all__ = ['transfer_data_to_cpu', 'transfer_data_to_cuda', 'transfer_data_to_numpy']


def _map_tensors(data, fn):
    """``data`` with ``fn`` applied to every tensor inside dicts, lists and tuples."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, dict):
        return {key: _map_tensors(value, fn) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_map_tensors(value, fn) for value in data)
    return data


def transfer_data_to_cpu(data_map):
    """Detached CPU copies of every tensor in ``data_map``."""
    return _map_tensors(data_map, lambda t: t.detach().cpu())


def transfer_data_to_numpy(data_map):
    """Every tensor in ``data_map`` as a numpy array."""
    return _map_tensors(data_map, lambda t: t.detach().cpu().numpy())


def transfer_data_to_cuda(data_map):
    """Every tensor in ``data_map`` on the current CUDA device; unchanged when CUDA is not available."""
    if not torch.cuda.is_available():
        return data_map
    device = torch.device('cuda', torch.cuda.current_device())
    return _map_tensors(data_map, lambda t: t.to(device, non_blocking=True))
