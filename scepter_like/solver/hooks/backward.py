"""BackwardHook: backward, gradient accumulation, clipping, AMP and the optimizer step."""

import torch

from scepter_like.errors import ConfigError, TrainingError
from scepter_like.solver.hooks.hook import PRIORITY_BACKWARD, Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.parallel import full_tensor
from scepter_like.utils.distributed import all_reduce_max, all_reduce_sum, get_world_size

_AMP_DTYPES = {'bf16': torch.bfloat16, 'fp16': torch.float16}


@HOOKS.register_class()
class BackwardHook(Hook):
    """Runs after each train step (``after_iter``).

    Accumulation: each group of ACCUMULATE_STEP micro-batches is averaged into one
    optimizer step; the last group of an epoch may be shorter and is averaged over its
    own length, so k equal micro-batches of b give the update of one batch of k*b.  The
    loop plans the groups (``solver.step``: ``group_size``, ``steps_optimizer``) and, under
    DDP, runs the non-final micro-steps' forward under ``no_sync``.

    On an optimizer step: unscale (fp16), the ``after_backward`` stage, clip, step.  A closure
    optimizer (L-BFGS) is stepped with a closure whose first evaluation is the step's own
    forward and backward (already done); later ones recompute the same batch's loss
    (``solver.train_forward``), backward and clip it.  Under DDP the closure returns the loss
    averaged over ranks, so every rank's line search takes the same path.  A loss aggregator
    that differentiates each term itself (PCGrad) replaces ``loss.backward()``.

    Non-finite losses: NONFINITE_POLICY 'stop' (the default) ends the run with a
    TrainingError when LogHook's line (which reads the loss anyway: no extra sync) shows a
    NaN or inf loss; the last checkpoint stays ``latest``.  'skip' drops the optimizer step of a group whose
    loss is NaN or inf on any rank (decided together, so no rank waits on another) and
    stops after MAX_NONFINITE_STEPS such steps in a row.  It costs one host sync per
    optimizer step (and a scalar all-reduce under DDP), so it is off by default; the
    log still warns when the logged loss is not finite.
    """

    para_dict = {
        'PRIORITY': {'value': PRIORITY_BACKWARD, 'description': 'runs first in after_iter'},
        'GRADIENT_CLIP': {'value': -1.0, 'description': 'max global L2 norm of all gradients; <= 0: off'},
        'ACCUMULATE_STEP': {'value': 1, 'description': 'micro-batches per optimizer step', 'min': 1},
        'EMPTY_CACHE_STEP': {'value': -1, 'description': 'torch.cuda.empty_cache() every N steps on CUDA; <= 0: off'},
        'USE_AMP': {'value': False, 'description': 'autocast the forward pass'},
        'AMP_DTYPE': {
            'value': 'bf16',
            'description': 'bf16 (CPU and CUDA) | fp16 (CUDA, with a GradScaler)',
            'choices': list(_AMP_DTYPES),
        },
        'NONFINITE_POLICY': {
            'value': 'stop',
            'description': "'stop': error at the first logged NaN/inf loss | 'skip' such steps | 'off': warn",
            'choices': ['stop', 'skip', 'off'],
        },
        'MAX_NONFINITE_STEPS': {'value': 10, 'description': "with 'skip': stop after this many in a row", 'min': 1},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.gradient_clip = cfg.GRADIENT_CLIP
        self.accumulate = cfg.ACCUMULATE_STEP
        self.empty_cache_step = cfg.EMPTY_CACHE_STEP
        self.amp_dtype = _AMP_DTYPES[cfg.AMP_DTYPE] if cfg.USE_AMP else None
        self.skip_nonfinite = cfg.NONFINITE_POLICY == 'skip'
        self.max_nonfinite = cfg.MAX_NONFINITE_STEPS
        self.scaler = None
        self._scaler_state = None
        self.nonfinite_in_a_row = 0
        self.nonfinite_total = 0
        self._bad = None
        self._params = []
        self._empty_cache_every = 0  # EMPTY_CACHE_STEP, on CUDA only (before_solve)

    def loop_settings(self):
        settings = {'accumulate_steps': self.accumulate, 'autocast_dtype': self.amp_dtype}
        if self.cfg.NONFINITE_POLICY == 'stop':
            settings['stop_on_nonfinite_loss'] = True
        return settings

    def before_solve(self, solver):
        self._params = [p for p in solver.unwrapped_model.parameters() if p.requires_grad]
        self._empty_cache_every = max(self.empty_cache_step, 0) if solver.device.type == 'cuda' else 0
        if solver.optimizer is None:
            raise ConfigError('BackwardHook needs SOLVER.OPTIMIZER; add an optimizer config')
        if self.amp_dtype is not None:
            if self.amp_dtype is torch.float16 and solver.device.type != 'cuda':
                raise ConfigError(
                    f'{self.cfg.path_of("AMP_DTYPE")}: fp16 needs CUDA (this run is on {solver.device.type}); use bf16'
                )
            if self.amp_dtype is torch.float16:
                self.scaler = torch.amp.GradScaler('cuda')
                if self._scaler_state is not None:
                    self.scaler.load_state_dict(self._scaler_state)
            solver.logger.info(f'mixed precision: autocast to {self.amp_dtype} on {solver.device.type}')

    def after_iter(self, solver):
        step = solver.step
        loss = step.take_loss()
        if loss is None:
            return
        if self.skip_nonfinite:
            bad = ~torch.isfinite(loss.detach())
            self._bad = bad if self._bad is None else self._bad | bad
        # no_sync, where due, was applied to the forward (solver.forward_context)
        self._backward(solver, loss, step.terms, step.group_size)
        if not step.steps_optimizer:
            return
        self._optimizer_step(solver, loss)
        if self._empty_cache_every and solver.progress.total_iter % self._empty_cache_every == 0:
            torch.cuda.empty_cache()

    def _backward(self, solver, loss, terms, group_size=1):
        """Add the gradients of ``loss / group_size`` (scaled under fp16) to ``.grad``."""

        def prepared(value):
            value = value / group_size if group_size > 1 else value
            return self.scaler.scale(value) if self.scaler is not None else value

        aggregator = solver.loss_aggregator
        if terms and aggregator.performs_backward:  # PCGrad: each term's gradient, projected
            aggregator.backward({k: prepared(v) for k, v in terms.items()}, solver.step.index, self._params)
        else:
            prepared(loss).backward()

    def _clip(self, solver):
        if self.gradient_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self._params, self.gradient_clip)
            solver.log_scalar('grad_norm', full_tensor(norm))  # a DTensor under FSDP

    def _optimizer_step(self, solver, loss):
        optimizer = solver.optimizer
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)  # after_backward hooks and clipping see the true gradients
        solver.after_backward()
        self._clip(solver)
        if self.skip_nonfinite and self._skip_this_step(solver):
            optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.update()  # unscale_ ran; update() closes that step for the scaler
            return
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        elif solver.optimizer_takes_closure:
            optimizer.step(self._closure(solver, loss))
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def _closure(self, solver, loss):
        """The closure a closure optimizer calls: first the step's own loss, then fresh evaluations of its batch."""
        pending = [loss]

        def closure():
            if pending:
                return _agreed(pending.pop().detach())
            solver.optimizer.zero_grad(set_to_none=True)
            step = solver.step
            again = solver.total_loss(solver.train_forward(step.batch))
            self._backward(solver, again, step.terms)
            self._clip(solver)
            return _agreed(again.detach())

        return closure

    def _skip_this_step(self, solver):
        """One decision for all ranks: skip when any rank saw a non-finite loss in this group."""
        flag = self._bad.to(torch.int32).reshape(1)
        self._bad = None
        if not all_reduce_max(flag).item():
            self.nonfinite_in_a_row = 0
            return False
        self.nonfinite_in_a_row += 1
        self.nonfinite_total += 1
        solver.logger.warning(
            f'non-finite loss at step {solver.progress.total_iter}: optimizer step skipped'
            f' ({self.nonfinite_in_a_row} in a row, {self.nonfinite_total} in all)'
        )
        if self.nonfinite_in_a_row >= self.max_nonfinite:
            raise TrainingError(
                f'{self.nonfinite_in_a_row} non-finite losses in a row (BackwardHook MAX_NONFINITE_STEPS);'
                ' lower the learning rate, clip gradients or check the data'
            )
        return True

    def state_dict(self):
        state = {'nonfinite_in_a_row': self.nonfinite_in_a_row, 'nonfinite_total': self.nonfinite_total}
        if self.scaler is not None:
            state['scaler'] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state):
        self.nonfinite_in_a_row = state.get('nonfinite_in_a_row', 0)
        self.nonfinite_total = state.get('nonfinite_total', 0)
        if 'scaler' in state:
            self._scaler_state = state['scaler']
            if self.scaler is not None:
                self.scaler.load_state_dict(state['scaler'])


def _agreed(loss):
    """``loss``, averaged over ranks under DDP (a closure optimizer decides from it on every rank alike)."""
    world = get_world_size()
    return all_reduce_sum(loss.clone()) / world if world > 1 else loss
