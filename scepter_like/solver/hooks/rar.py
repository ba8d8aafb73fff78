"""RARHook: residual-based adaptive refinement (Lu et al. 2021, DeepXDE's RAR) of a PINN's interior points.

Every EVERY train steps it draws CANDIDATES points in the domain's interior, evaluates the
model's PDE residual there and adds the ADD points of largest squared residual to an
interior point set of ``PointSets`` (SET; by default the first interior set), which keeps
them from the next pass over the data on (the next step, in full-batch training) for the
rest of the run, through resampling too.  ROUNDS caps the refinements; no round runs at
the run's last step (its points would never train).  Rounds that fall inside an L-BFGS
phase get a warning at set-up, as resampling does (``OptimizerPhases.check``).

Reproducible: the candidates of round r are a pure function of (the data's SEED, the set,
r); the points added so far, with the pass each entered at, are the hook's checkpoint
state and go back into the set when a run resumes, so a resumed run trains on exactly the
points the interrupted one did.  Under DDP every rank evaluates the candidates and rank 0's
choice is broadcast, so all ranks add the same points.
"""

import torch

from scepter_like.data.point_sets import PointSets
from scepter_like.data.sampling import METHODS
from scepter_like.errors import ConfigError
from scepter_like.solver.hooks.hook import PRIORITY_NORMAL, Hook
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.distributed import broadcast_object


@HOOKS.register_class()
class RARHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'lower runs first'},
        'SET': {'value': '', 'description': 'the interior point set refined (default: the first interior set)'},
        'EVERY': {'value': 1000, 'description': 'train steps between refinements', 'min': 1},
        'CANDIDATES': {'value': 10000, 'description': 'interior points whose residual is evaluated', 'min': 1},
        'ADD': {'value': 10, 'description': 'points of largest residual added each time', 'min': 1},
        'ROUNDS': {'value': 0, 'description': 'refinements at most (0: no limit)', 'min': 0},
        'SAMPLING': {
            'value': 'uniform',
            'description': f'how candidates are drawn: {METHODS}',
            'choices': list(METHODS),
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        if cfg.ADD > cfg.CANDIDATES:
            raise ConfigError(f'{cfg.path_of("ADD")}: {cfg.ADD} points cannot come from {cfg.CANDIDATES} CANDIDATES')
        self.added = []  # (first pass, points): what this hook added, in order
        self.dataset = self.point_set = None
        self._restored = False

    def before_solve(self, solver):
        model = solver.unwrapped_model
        if not callable(getattr(model, 'residual', None)):
            raise ConfigError(
                f'{self.cfg.path}: RARHook refines by the PDE residual, and SOLVER.MODEL ({type(model).__name__}) has'
                ' none; use it with a PhysicsInformedModel'
            )
        bundle = solver.datas.get('train')
        if bundle is None or not isinstance(bundle.dataset, PointSets):
            raise ConfigError(f'{self.cfg.path}: RARHook adds points to a PointSets TRAIN_DATA; this run has none')
        self.dataset = bundle.dataset
        interior = [s.name for s in self.dataset.sets if s.kind == 'interior']
        name = self.cfg.SET or (interior[0] if interior else '')
        if name not in interior:
            raise ConfigError(f'{self.cfg.path_of("SET")}: RARHook refines an interior set; those are {interior}')
        self.point_set = self.dataset.set_named(name)
        if not self._restored:  # a resumed run: the points added before the checkpoint go back in
            for first_pass, points in self.added:
                self.dataset.add_points(name, points, first_pass)
            self._restored = True
        self._warn_rounds_under_closure_optimizers(solver)

    def _round_steps(self, last_step):
        """The train steps after which the rounds run: every EVERY steps, ROUNDS at most, none at the run's last
        step (its points would never train)."""
        steps = range(self.cfg.EVERY, last_step, self.cfg.EVERY)
        return steps[: self.cfg.ROUNDS] if self.cfg.ROUNDS else steps

    def _warn_rounds_under_closure_optimizers(self, solver):
        """A warning when rounds fall inside an L-BFGS phase (a closure optimizer's: ``phases.closure_spans``): the
        points a round adds change the loss, and the curvature pairs kept from step to step would mix the two, as
        for RESAMPLE_EVERY (physics_informed.md §9).  A round at the phase's first step is fine: its pairs start
        there."""
        steps = self._round_steps(solver.progress.last_step)
        for start, end, opt_cfg in solver.updater.phases.closure_spans:
            inside = [step for step in steps if start < step < end]
            if inside:
                before = sum(step <= start for step in steps)
                solver.logger.warning(
                    f'{self.cfg.path}: {len(inside)} refinement round(s), the first after step {inside[0]}, fall in the'
                    f' {opt_cfg.NAME} phase (steps {start} to {end}, {opt_cfg.path}); {opt_cfg.NAME} keeps curvature'
                    ' pairs from step to step, and each round adds points, a different loss: the pairs mix them and'
                    f' the steps can diverge; end refinement by step {start}'
                    + (f' (ROUNDS: {before})' if before else f' (EVERY <= {start})')
                )

    def after_iter(self, solver):
        progress, cfg = solver.progress, self.cfg
        if progress.total_iter not in self._round_steps(progress.last_step):
            return
        model, dtype = solver.unwrapped_model, next(solver.unwrapped_model.parameters()).dtype
        candidates = self.point_set.candidates(cfg.CANDIDATES, cfg.SAMPLING, len(self.added))
        x = candidates.to(solver.device, dtype)
        residual = model.residual(x, self.dataset.coordinate_names)
        parts = residual if isinstance(residual, (tuple, list)) else (residual,)
        score = sum(r.detach().reshape(len(x), -1).pow(2).sum(1) for r in parts)
        top = torch.topk(score, cfg.ADD).indices.cpu()
        chosen = broadcast_object(candidates[top])  # rank 0's choice on every rank
        first_pass = self.dataset.pass_index + 1
        self.dataset.add_points(self.point_set.name, chosen, first_pass)
        self.added.append((first_pass, chosen))
        solver.logger.info(
            f'RAR round {len(self.added)}: {cfg.ADD} points of largest residual (mean squared residual'
            f' {score.mean().item():.3g}, largest {score.max().item():.3g}) join {self.point_set.name!r} from the next'
            ' pass'
        )

    def state_dict(self):
        return {'added': [(first, points.clone()) for first, points in self.added]}

    def load_state_dict(self, state):
        self.added = [(int(first), points) for first, points in state['added']]
        self._restored = False
