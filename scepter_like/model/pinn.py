"""PhysicsInformedModel: a network and the PDE it must satisfy; the data's conditions give the other losses.

A subclass writes the equation's residual, and optionally a reference solution::

    @MODELS.register_class()
    class BurgersPINN(PhysicsInformedModel):
        para_dict = {'NU': {'value': 0.01 / math.pi, 'description': 'viscosity'}}

        def pde_residual(self, x, u, d):
            return d('t') + u * d('x') - self.cfg.NU * d('x', 'x')

``x`` is a batch of interior points ``[N, dim]`` (columns named by the domain: x, y, z, t),
``u`` the field there ``[N, outputs]`` and ``d`` their derivatives, each computed once
(``derivatives.Derivatives``).  A system returns a tuple of residuals.

Train mode takes the batch of ``PointSets`` (``data/point_sets.py``): every interior set
gives ``loss_<set>``, the mean squared residual; every condition of the other sets (and
every observations set) gives ``loss_<term>`` (``data/conditions.py``).  The solver sums the
``loss_*`` terms with SOLVER.LOSS_WEIGHTS.  Eval and test mode take ``x`` and return ``x``,
the prediction ``u`` and, when ``exact_solution`` gives one, ``u_exact`` (what
RelativeL2Error, MaxAbsError and FieldPlotHook read).

Options, all in the config:

- ``PARAMETERS: {D: 0.5}``: trainable PDE parameters (inverse problems), attributes of the
  model (``self.D``), trained by the same optimizer as the network, saved in checkpoints and
  logged at their current value with every train log line (and metrics.jsonl, TensorBoard)
  under their names (``logged_state``);
- ``FOURIER_FEATURES: {NUM: 64, SCALE: 1.0}``: the network sees [cos 2 pi x B, sin 2 pi x B]
  with B ~ N(0, SCALE^2) of shape [dim, NUM], fixed at construction (a buffer; NETWORK.IN_DIM
  is the number of coordinates, the network gets 2 NUM inputs);
- ``output_transform(x, u)``: override it to build hard constraints into the network's output
  (DeepXDE's ``apply_output_transform``), e.g. ``return -torch.sin(pi * x[:, :1]) + x[:, 1:] * u``.
"""

import inspect
import logging
import math

import torch

from scepter_like.data.conditions import batch_key
from scepter_like.data.point_sets import COORD_KEY
from scepter_like.errors import ConfigError, DataError, ModelError, suggest
from scepter_like.model.base import BaseModel
from scepter_like.model.derivatives import Derivatives
from scepter_like.model.registry import MODELS
from scepter_like.utils.log_values import LINE_KEYS

RESERVED_PREFIXES = ('loss', 'weight_')  # the loss terms; the weights a loss aggregator logs beside them


def reserved_names():
    """The keys a train log line (and ``metrics.jsonl``) writes beside the step's outputs: a parameter so named
    would print twice, or be hidden (``lr``)."""
    words = [key.split('/')[0] for key in LINE_KEYS]  # samples/s: samples
    return tuple(dict.fromkeys([*words, 'grad_norm']))


def mean_square(residual):
    """The mean of ``residual ** 2`` (0 for an empty set of points, not NaN)."""
    return residual.square().mean() if residual.numel() else residual.sum()


class PhysicsInformedModel(BaseModel):
    para_dict = {
        'NETWORK': {
            'value': {'NAME': 'MLP', 'IN_DIM': 2, 'HIDDEN_DIMS': [64, 64, 64, 64], 'OUT_DIM': 1, 'ACTIVATION': 'tanh'},
            'description': 'a MODELS config: the network mapping points [N, dim] to the field [N, outputs]',
        },
        'PARAMETERS': {
            'value': {},
            'description': 'trainable PDE parameters {name: initial value}, e.g. {D: 0.5}: self.D, logged by name',
        },
        'FOURIER_FEATURES': {
            'value': {},
            'description': 'random Fourier features of the input, {NUM: m, SCALE: sigma}: the network gets 2m inputs',
        },
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        network_cfg = cfg.NETWORK
        features = dict(cfg.FOURIER_FEATURES or {})
        self.fourier = bool(features)
        if self.fourier:
            network_cfg = self._fourier_features(features, cfg)
        self.network = MODELS.build(network_cfg, logger=logger)
        try:
            inspect.signature(self.pde_residual).bind('x', 'u', 'd')
        except TypeError:
            raise ConfigError(
                f'{cfg.path_of("NAME")}: {type(self).__name__}.pde_residual{inspect.signature(self.pde_residual)}'
                ' cannot be called as pde_residual(x, u, d); write def pde_residual(self, x, u, d)'
            ) from None
        self.parameter_names = []
        for name, value in (cfg.PARAMETERS or {}).items():
            if not str(name).isidentifier() or name.startswith(RESERVED_PREFIXES) or name in reserved_names():
                taken = ''
            elif hasattr(self, name):
                taken = f'; {type(self).__name__} has an attribute {name}'
            else:
                taken = None
            if taken is not None:
                raise ConfigError(
                    f'{cfg.path_of("PARAMETERS")}: {name!r} cannot name a parameter (a plain word, not starting'
                    f' with {" or ".join(RESERVED_PREFIXES)}, not a key the train log line writes itself:'
                    f' {", ".join(reserved_names())}, not taken by the model{taken}); rename it'
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f'{cfg.PARAMETERS.path_of(name)}: an initial value is one number, got {value!r}')
            self.register_parameter(name, torch.nn.Parameter(torch.tensor(float(value))))
            self.parameter_names.append(name)
        self._parameters_checked = not self.parameter_names
        self._field_checked = False

    def _fourier_features(self, features, cfg):
        where = cfg.path_of('FOURIER_FEATURES')
        unknown = sorted(set(features) - {'NUM', 'SCALE'})
        if unknown or not isinstance(features.get('NUM'), int) or features['NUM'] < 1:
            raise ConfigError(f'{where}: expected {{NUM: a positive whole number, SCALE: a number}}, got {features}')
        if 'IN_DIM' not in cfg.NETWORK:
            raise ConfigError(f'{where}: Fourier features need a NETWORK with IN_DIM (the number of coordinates)')
        dim = cfg.NETWORK.IN_DIM
        self.register_buffer('fourier_matrix', float(features.get('SCALE', 1.0)) * torch.randn(dim, features['NUM']))
        return {**cfg.NETWORK.to_dict(), 'IN_DIM': 2 * features['NUM']}

    def __getattr__(self, name):
        """``self.a`` in a residual whose PARAMETERS wrote ``A``: a ConfigError naming the close name (a config
        mistake), where torch's AttributeError would blame the model's code."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            hint = suggest(name, self.__dict__.get('parameter_names') or ())
            if not hint:
                raise
            raise ConfigError(
                f'{self.cfg.path_of("PARAMETERS")}: {type(self).__name__} reads self.{name}, which PARAMETERS does'
                f' not give{hint}'
            ) from None

    # -- what a subclass writes ----------------------------------------------------------------
    def pde_residual(self, x, u, d):
        """The PDE's residual at interior points (a tensor, or a tuple of them for a system)."""
        raise NotImplementedError(f'{type(self).__name__} must define pde_residual(x, u, d)')

    def output_transform(self, x, u):
        """The field from the network's raw output ``u`` at ``x`` (identity); override for hard constraints."""
        return u

    def exact_solution(self, x):
        """The reference solution at ``x``, or None when there is none."""
        return None

    def metrics_hint(self):
        """The field's relative L2 error against u_exact: the exact solution's, or a reference file's."""
        hint = '[{NAME: RelativeL2Error, KEYS: [u, u_exact]}]'
        if type(self).exact_solution is PhysicsInformedModel.exact_solution:
            hint += (
                f' with a reference u_exact, as {type(self).__name__} has no exact_solution: EVAL_DATA: {{NAME:'
                ' NpzDataset, PATH: ref.npz} holding x and u_exact, and EXTRA_KEYS: [u_exact]'
            )
        return hint

    # -- the field and its residuals -----------------------------------------------------------
    def field(self, x):
        """The field at points ``x`` ``[N, dim]``: the network (after Fourier features) and output_transform."""
        inputs = x
        if self.fourier:
            angles = 2 * math.pi * x @ self.fourier_matrix
            inputs = torch.cat([torch.cos(angles), torch.sin(angles)], dim=1)
        raw = self.network(inputs)
        u = self.output_transform(x, raw)
        if not self._field_checked:
            self._check_field(x, raw, u)
        return u

    def _check_field(self, x, raw, u):
        """Once, at the first call on two or more points (one point cannot show a broadcast): output_transform keeps
        the network's shape ``[N, OUT_DIM]``.  An ``[N, 1]`` term against an ``[N]`` one broadcasts to ``[N, N]``,
        which would train and predict a wrong field without a word; an ``[N]`` would fail later far from its cause."""
        shape = list(getattr(u, 'shape', [type(u).__name__]))
        if shape != list(raw.shape):
            raise ModelError(
                f'{type(self).__name__}.output_transform(x, u) gives a field of shape {shape} for {len(x)} points'
                f" x {list(x.shape)}; it needs the network output's shape {list(raw.shape)}, [N, OUT_DIM] (an [N, 1]"
                ' term against an [N] one broadcasts to [N, N]: take columns, x[:, 0:1] and u[:, 0:1])'
            )
        self._field_checked = len(x) > 1

    def residual(self, x, coordinates=None):
        """The PDE residual at points ``x`` (a tensor, or a tuple), gradients enabled (residual-based refinement)."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            u = self.field(x)
            return self._pde_residual(x, u, Derivatives(u, x, coordinates))

    def _pde_residual(self, x, u, d):
        """``pde_residual``, a ModelError of its derivatives (an output or coordinate there is none of, such as
        ``d('x', component=1)`` of a network of one output) named after it, as a residual's wrong shape is."""
        try:
            return self.pde_residual(x, u, d)
        except ModelError as e:
            raise ModelError(f'{type(self).__name__}.pde_residual: {e}') from None

    def forward(self, problem=None, **batch):
        if not self.training:
            if COORD_KEY not in batch:
                raise DataError(
                    f'{type(self).__name__} evaluates the field at points {COORD_KEY!r} [N, coordinates];'
                    f' the inputs have {sorted(batch)}'
                )
            x = batch[COORD_KEY]
            u = self.field(x)
            out = {COORD_KEY: x, 'u': u}
            exact = self.exact_solution(x)
            if exact is not None:
                out['u_exact'] = self._check_exact(exact, x, u)
            return out
        if problem is None:
            raise DataError(
                f'{type(self).__name__} trains on the batches of PointSets (TRAIN_DATA: {{NAME: PointSets, ...}});'
                f' the batch holds {sorted(batch)}'
            )
        losses = {}
        for point_set, x, u in self._fields(problem, batch):
            d = Derivatives(u, x, problem.coordinates)
            if point_set.kind == 'interior':
                add_terms(losses, point_set.name, self._pde_residual(x, u, d), len(x), type(self).__name__)
            for condition in point_set.conditions:
                condition.check_components(u.shape[1])
                losses[f'loss_{condition.term}'] = mean_square(condition.residual(u, d, batch, self.field))
        if not self._parameters_checked:
            self._warn_untrained_parameters(losses)
        return losses

    def logged_state(self):
        """The PDE parameters as they are now, for every train log line (DeepXDE's VariableValue prints the
        current value; a mean over the log interval would lag behind it)."""
        return {name: getattr(self, name).item() for name in self.parameter_names}

    def _check_exact(self, exact, x, u):
        """``exact`` as ``u``'s shape ``[N, outputs]``: one column per output (``[N]`` for one output); any other
        shape is an error naming the model and both shapes (a reshape by size would mix the columns)."""
        shape = tuple(getattr(exact, 'shape', ()))
        if shape == tuple(u.shape) or (u.shape[1] == 1 and shape == (len(u),)):
            return exact.reshape(u.shape)
        n, outputs = len(u), u.shape[1]
        raise DataError(
            f'{self.cfg.path_of("NETWORK")}: {type(self).__name__}.exact_solution(x) gives u_exact of shape'
            f' {list(shape)} for {n} points x {list(x.shape)}, and the network gives u of shape {list(u.shape)}'
            f' (OUT_DIM {outputs}); they need one column per output, [{n}, {outputs}]'
            + (f' (or [{n}])' if outputs == 1 else '')
            + ': fix NETWORK.OUT_DIM or exact_solution'
        )

    def pretrained_loaded(self, path, logger):
        """PRETRAINED_MODEL holds the learned PARAMETERS beside the network, and loads them (a fine-tune goes on from
        where the run stopped): a warning names each whose configured starting value the file replaced."""
        replaced = []
        for name in self.parameter_names:
            value, configured = getattr(self, name).detach(), float(self.cfg.PARAMETERS[name])
            if value.item() != torch.tensor(configured, dtype=value.dtype).item():
                replaced.append(f'{name} {configured:g} -> {value.item():.6g}')
        if replaced:
            logger.warning(
                f'{self.cfg.path_of("PARAMETERS")}: {path} (PRETRAINED_MODEL) holds the learned parameters too, and'
                f' they start from its values, not the configured ones: {", ".join(replaced)}'
            )

    def _warn_untrained_parameters(self, losses):
        """Once, at the first train forward: a PARAMETERS entry that no loss term depends on never trains (the
        residual read ``self.cfg.PARAMETERS.D``, a number, or a misspelt name) and would be logged unchanged all run."""
        self._parameters_checked = True
        reached = leaf_ids([v for k, v in losses.items() if k.startswith('loss')])
        untrained = [n for n in self.parameter_names if id(getattr(self, n)) not in reached]
        if untrained:
            (self.logger or logging.getLogger(__name__)).warning(
                f'{self.cfg.path_of("PARAMETERS")}: no loss term depends on {", ".join(untrained)}, so'
                f' {"they stay" if len(untrained) > 1 else "it stays"} at the initial value; use self.{untrained[0]}'
                ' (the trainable tensor) in pde_residual or a condition'
            )

    def _fields(self, problem, batch):
        """``(point set, x, u)`` of each set: its points (requiring grad where derivatives are taken) and the field
        there; the sets taking no derivatives share one network call."""
        points = {s.name: batch[batch_key(s.name, COORD_KEY)] for s in problem.sets}
        plain = [s for s in problem.sets if not s.needs_grad]
        fields = {}
        if plain:
            sizes = [len(points[s.name]) for s in plain]
            joined = self.field(torch.cat([points[s.name] for s in plain]) if len(plain) > 1 else points[plain[0].name])
            fields = dict(zip([s.name for s in plain], joined.split(sizes)))
        for point_set in problem.sets:
            x = points[point_set.name]
            if point_set.needs_grad:
                x = x.detach().requires_grad_(True)
                yield point_set, x, self.field(x)
            else:
                yield point_set, x, fields[point_set.name]


def leaf_ids(tensors):
    """``id`` of every leaf tensor (parameter) the autograd graphs of ``tensors`` reach."""
    found, seen = set(), set()
    stack = [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, 'variable'):  # AccumulateGrad: the node of a leaf
            found.add(id(node.variable))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


def add_terms(losses, name, residual, points, model):
    """``loss_<name>`` for one residual; ``loss_<name>_<i>`` for each of a system's.

    A residual holds one value per point (``[N]`` or ``[N, 1]``): any other shape, such as
    the ``[N, N]`` of ``[N]`` against ``[N, 1]`` or a mean already taken, would train a wrong
    loss without a word, so it is an error naming the model.
    """
    system = isinstance(residual, (tuple, list))
    for i, part in enumerate(residual if system else [residual]):
        shape = tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__
        if shape not in ((points,), (points, 1)):
            which = f'residual {i}' if system else 'the residual'
            raise ModelError(
                f'{model}.pde_residual: {which} of set {name!r} is {shape} for {points} points; a residual holds'
                ' one value per point, [N] or [N, 1] (an [N] term against an [N, 1] one broadcasts to [N, N]:'
                " take columns, u[:, 0:1] or d('x'), or flatten both)"
            )
        losses[f'loss_{name}_{i}' if system else f'loss_{name}'] = mean_square(part)
