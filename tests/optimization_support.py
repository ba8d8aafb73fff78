"""Test-only registrations for tests/test_optimization.py (also passed to tools with ``--import``)."""

import os

import torch

from scepter_like.model.base import BaseModel
from scepter_like.model.registry import MODELS
from scepter_like.solver.hooks.hook import Hook
from scepter_like.solver.hooks.registry import HOOKS


@HOOKS.register_class()
class GradCaptureHook(Hook):
    """Keeps the gradients every after_backward sees, and the train batches."""

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.grads, self.batches = [], []

    def before_iter(self, solver):
        self.batches.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in solver.step.batch.items()})

    def after_backward(self, solver):
        self.grads.append([p.grad.clone() for p in solver.unwrapped_model.parameters()])


@MODELS.register_class()
class TwoTargetsModel(BaseModel):
    """A linear map pulled towards +1 and -1 at once: two loss terms whose gradients conflict."""

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.net = torch.nn.Linear(8, 1)

    def forward(self, img, label=None):
        out = self.net(img)
        if not self.training:
            return {'out': out}
        return {'loss_up': (out - 1).pow(2).mean(), 'loss_down': (out + 1).pow(2).mean()}


@HOOKS.register_class()
class WeightDumpHook(Hook):
    """At the end, every rank writes its weights and its optimizer's closure-evaluation count."""

    def after_solve(self, solver):
        state = solver.optimizer.state_dict()['state'].get(0, {})
        torch.save(
            {
                'optimizer': type(solver.optimizer).__name__,
                'func_evals': state.get('func_evals', 0),
                'params': [p.detach().clone() for p in solver.unwrapped_model.parameters()],
            },
            os.path.join(solver.work_dir, f'weights-rank{solver.rank}.pt'),
        )
