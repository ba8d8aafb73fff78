"""Every process of a job should run one config: a check as a run sets up.

Nodes started with different overrides (a LEARNING_RATE typed on one node's command line)
train apart in silence, or fail later in a collective one of them never reaches (another
MAX_EPOCHS), and ``config.yaml`` records only rank 0's.  Each rank hashes its resolved
config; when the hashes differ, rank 0 gets the configs and says which keys differ.
"""

import hashlib

from scepter_like.config import flatten_config
from scepter_like.utils.distributed import all_gather_object

SHOWN_KEYS = 3  # differing keys a warning names (then '...')


def config_differences(solver):
    """A warning line for each rank whose resolved config differs from rank 0's (every rank calls this; the lines
    on rank 0, none elsewhere)."""
    if solver.world_size == 1:
        return []
    digests = all_gather_object(hashlib.sha256(solver.config_text.encode()).hexdigest())
    if len(set(digests)) == 1:
        return []
    configs = all_gather_object(flatten_config(solver.cfg.root.to_dict()))
    if not solver.is_main:
        return []
    ours, lines = configs[0], []
    for rank, theirs in enumerate(configs):
        if digests[rank] == digests[0]:
            continue
        keys = sorted(key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key))
        shown = ', '.join(f'{k} (rank 0: {ours.get(k)!r}, rank {rank}: {theirs.get(k)!r})' for k in keys[:SHOWN_KEYS])
        where = f'at {shown}{" ..." if len(keys) > SHOWN_KEYS else ""}' if keys else 'in how it writes its values'
        lines.append(
            f"rank {rank}'s config differs from rank 0's {where}; every process of a job must run the same config"
            " (give every node the same file and overrides; config.yaml records rank 0's)"
        )
    return lines
