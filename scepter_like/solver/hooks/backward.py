"""BackwardHook: the keys of the optimisation step (accumulation, clipping, AMP, non-finite losses).

It carries configuration only.  The step itself -- backward, unscale, ``after_backward``,
clip, optimizer step or skip -- is ``WeightUpdater.update`` (solver/optimization.py), which
reads these keys when the solver builds its hooks.  scepter's configs list this hook, so
it stays under scepter's name and keys; a BackwardHook that is not this class (scepter's
own, imported by a user) does the step itself and the built-in update stands aside.

Accumulation: each group of ACCUMULATE_STEP micro-batches is averaged into one optimizer
step; the last group of an epoch may be shorter and is averaged over its own length.
NONFINITE_POLICY 'stop' (the default) ends the run when LogHook's line (which reads the
loss anyway: no extra sync) shows a NaN or inf loss; 'skip' drops the optimizer step of a
group whose loss is not finite on any rank (one decision for all ranks, one host sync per
optimizer step) and stops after MAX_NONFINITE_STEPS in a row; 'off' only warns.
"""

from scepter_like.solver.hooks.hook import PRIORITY_BACKWARD, Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.optimization import AMP_DTYPES, NONFINITE_POLICIES


@HOOKS.register_class()
class BackwardHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_BACKWARD, 'description': "scepter's place in the hook order (no work here)"},
        'GRADIENT_CLIP': {'value': -1.0, 'description': 'max global L2 norm of all gradients; <= 0: off'},
        'ACCUMULATE_STEP': {'value': 1, 'description': 'micro-batches per optimizer step', 'min': 1},
        'EMPTY_CACHE_STEP': {'value': -1, 'description': 'torch.cuda.empty_cache() every N steps on CUDA; <= 0: off'},
        'USE_AMP': {'value': False, 'description': 'autocast the forward pass'},
        'AMP_DTYPE': {
            'value': 'bf16',
            'description': 'bf16 (CPU and CUDA) | fp16 (CUDA, with a GradScaler)',
            'choices': list(AMP_DTYPES),
        },
        'NONFINITE_POLICY': {
            'value': 'stop',
            'description': "'stop': error at the first logged NaN/inf loss | 'skip' such steps | 'off': warn",
            'choices': list(NONFINITE_POLICIES),
        },
        'MAX_NONFINITE_STEPS': {'value': 10, 'description': "with 'skip': stop after this many in a row", 'min': 1},
    }
