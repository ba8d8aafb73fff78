"""``scepter.modules.data.sampler.registry`` maps here: SAMPLERS, the samplers a data config's ``SAMPLER`` names.

The loader builds the sampler of every data config itself, to shard, shuffle per pass and
resume mid-pass; a data config's ``SAMPLER: {NAME: ...}`` picks how it is iterated, and
``LoopSampler`` is the one entry.  scepter's other samplers each say what to do instead.
"""

from scepter_like.registry import Registry

_OWN_ORDER = 'the loader shards, shuffles each pass and resumes itself: leave SAMPLER out'
SCEPTER_ONLY = {  # the samplers scepter registers that are left out (docs/porting_from_scepter.md)
    'MultiFoldDistributedSampler': f'{_OWN_ORDER} (SOLVER.NUM_FOLDS splits a pass into epochs)',
    'EvalDistributedSampler': f'{_OWN_ORDER} (eval and test data are sharded without padding)',
    'TorchDefault': f'{_OWN_ORDER} (each rank then gets its own share of the data)',
    **dict.fromkeys(
        ['MultiLevelBatchSampler', 'MultiLevelBatchSamplerMultiSource', 'MixtureOfSamplers', 'ResolutionBatchSampler'],
        "it draws batches from scepter's index files, which this project does not read; write a DATASETS entry that"
        ' reads them (with SAMPLER: {NAME: LoopSampler} for an endless train loader)',
    ),
}
SAMPLERS = Registry('SAMPLERS', left_out=SCEPTER_ONLY)
