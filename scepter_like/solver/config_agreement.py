"""Every process of a job should run one config: a check as training starts.

Nodes started with different overrides (a LEARNING_RATE typed on one node's command line)
train apart in silence, or fail later in a collective one of them never reaches (another
MAX_EPOCHS), and ``config.yaml`` records only rank 0's.  Each rank hashes its resolved
config; when the hashes differ, rank 0 gets the texts and warns naming the differing keys.
"""

import hashlib

import yaml

from scepter_like.utils.distributed import all_gather_object

SHOWN_KEYS = 3  # differing keys a warning names (then '...')


def warn_if_configs_differ(solver):
    """A warning on rank 0 for each rank whose resolved config differs from rank 0's (every rank calls this)."""
    if solver.world_size == 1:
        return
    text = solver.config_text
    if len(set(all_gather_object(hashlib.sha256(text.encode()).hexdigest()))) == 1:
        return
    texts = all_gather_object(text)
    if not solver.is_main:
        return
    ours = dict(_leaves(yaml.safe_load(texts[0])))
    for rank, other in enumerate(texts[1:], 1):
        theirs = dict(_leaves(yaml.safe_load(other)))
        keys = sorted(key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key))
        if not keys:
            continue
        shown = ', '.join(f'{k} (rank 0: {ours.get(k)!r}, rank {rank}: {theirs.get(k)!r})' for k in keys[:SHOWN_KEYS])
        more = ' ...' if len(keys) > SHOWN_KEYS else ''
        solver.logger.warning(
            f"rank {rank}'s config differs from rank 0's at {shown}{more}; every process of a job must run the same"
            " config (give every node the same file and overrides; config.yaml records rank 0's)"
        )


def _leaves(value, path=''):
    """``(dotted path, value)`` of each leaf of a config read as YAML (list items by index, as overrides name
    them)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f'{path}.{key}' if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f'{path}.{index}')
    else:
        yield path, value
