"""``scepter.modules.data.sampler`` maps here: the loader's ShardedSampler, scepter's LoopSampler and SAMPLERS."""

from scepter_like.data.sampler.registry import SAMPLERS
from scepter_like.data.sampler.sharded import LoopSampler, ShardedSampler

__all__ = ['SAMPLERS', 'LoopSampler', 'ShardedSampler']
