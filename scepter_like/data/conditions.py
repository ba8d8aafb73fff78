"""Boundary and initial conditions on a point set, written as config; the model writes only the PDE.

A point set of ``PointSets`` lists its ``CONDITIONS``, each a ``CONDITIONS`` entry::

    CONDITIONS: [{NAME: Dirichlet, VALUE: 0}]                   # u = g
    CONDITIONS: [{NAME: Neumann, VALUE: 'cos(pi * y)'}]         # du/dn = g (outward normal)
    CONDITIONS: [{NAME: Robin, A: 1.0, B: 2.0, VALUE: 0}]       # A u + B du/dn = g
    CONDITIONS: [{NAME: Periodic, AXIS: x}]                     # u on the x faces equal (DERIVATIVE_ORDER 1: du/dx)
    CONDITIONS: [{NAME: InitialValue, VALUE: '-sin(pi * x)'}]   # u(x, t0) = g
    CONDITIONS: [{NAME: InitialDerivative, VALUE: 0}]           # du/dt(x, t0) = g; an ODE (no TIME): du/dx at FACES

``VALUE`` is a number or an expression of the coordinates (``expressions.py``), evaluated
once per draw on the data side; ``COMPONENT`` picks the network output (0).  Each condition
gives one loss term, ``loss_<TERM>`` (the set's name by default, ``<set>_<i>`` when the set
has several), weighted by SOLVER.LOSS_WEIGHTS like every ``loss_*`` term.

A condition has two halves: ``arrays(points, normals)``, the per-point arrays it needs in
the batch (its values, a periodic image), computed when the points are drawn; and
``residual(u, d, batch, field)``, computed in the model's train step from the network
output ``u`` at the set's points, their cached derivatives ``d`` (``model/derivatives.py``),
the batch and ``field`` (the network as a function of points, for a periodic image).
Conditions needing derivatives make the set's points require gradients; those needing
normals are allowed on boundary sets only (an ``error:`` line otherwise).  An ODE has no
TIME (its time is the coordinate ``x``): its initial conditions sit on a boundary set at
``FACES: [x_low]``, where InitialDerivative is du/dx itself, not the outward normal
derivative Neumann takes (-du/dx at x_low).
"""

from scepter_like.data.expressions import Expression
from scepter_like.data.registry import CONDITIONS
from scepter_like.errors import ConfigError
from scepter_like.model.derivatives import Derivatives


def batch_key(owner, field):
    """The batch key of ``field`` of a point set or condition term ``owner``: ``'<owner>.<field>'``."""
    return f'{owner}.{field}'


def _a(word):
    """``word`` with its indefinite article: 'an initial', 'a boundary'."""
    return f'{"an" if str(word)[:1].lower() in "aeiou" else "a"} {word}'


class Condition:
    """The base of CONDITIONS entries: built as ``cls(cfg, logger, point_set=..., term=..., domain=...)``."""

    para_dict = {
        'TERM': {
            'value': '',
            'description': "its loss term is loss_<TERM> (default: the set's name, <set>_<i> for several conditions)",
        },
        'COMPONENT': {'value': 0, 'description': 'the network output it constrains', 'min': 0},
    }
    SET_KINDS = ('boundary', 'initial')  # the kinds of point set it may be given to
    NEEDS_NORMALS = False  # it reads the outward normals (boundary sets only)
    NEEDS_GRAD = False  # its residual takes derivatives of u at the set's points
    COMPONENT_KEY = 'COMPONENT'  # the config key naming the network output(s) it constrains

    def __init__(self, cfg, logger=None, point_set=None, kind=None, term=None, domain=None):
        self.cfg, self.point_set, self.domain = cfg, point_set, domain
        self.term = cfg.TERM or term
        self.component = cfg.COMPONENT
        self.needs_grad = self.NEEDS_GRAD
        kinds, why = self.placement()
        if kind not in kinds:
            raise ConfigError(
                f'{cfg.path_of("NAME")}: {_a(cfg.NAME)} condition belongs on {_a(" or ".join(kinds))}'
                f' set{why}; {point_set!r} is a set of KIND {kind}'
            )

    def placement(self):
        """``(kinds, why)``: the kinds of point set it may be given to on its domain, and the reason the error
        line gives ('' for none)."""
        return (
            self.SET_KINDS,
            ' (it needs outward normals, which only boundary points have)' if self.NEEDS_NORMALS else '',
        )

    def check_faces(self, faces, where):
        """A ConfigError when its set's ``FACES`` (names, e.g. ``['x_low']``; [] for all of the boundary) do not
        suit it; ``where`` is the set's config path."""

    def value_key(self):
        return batch_key(self.term, 'value')

    def arrays(self, points, normals):
        """``{batch key: [n, ...] float64}`` for the set's ``points`` (and ``normals``, None off the boundary)."""
        return {}

    def residual(self, u, d, batch, field):
        raise NotImplementedError

    def components(self):
        """The network outputs this condition constrains (its ``COMPONENT_KEY``)."""
        return [self.component]

    def output(self, u):
        return u[:, self.component : self.component + 1]

    def check_components(self, outputs):
        """A ConfigError when the network's ``outputs`` lack the component(s) this condition constrains (a slice
        past the last output is empty: the loss would be 0 and train nothing)."""
        components = self.components()
        if max(components) >= outputs:
            raise ConfigError(
                f'{self.cfg.path_of(self.COMPONENT_KEY)}: {components} names outputs the network lacks: it gives'
                f" {outputs} output(s), counted from 0 (the model's NETWORK.OUT_DIM)"
            )


class ValueCondition(Condition):
    """A condition with a right-hand side g = VALUE at each point."""

    para_dict = {
        'VALUE': {
            'value': 0.0,
            'description': "g: a number or an expression of the coordinates, e.g. '-sin(pi * x)'",
            'type': (int, float, str),
        },
    }

    def __init__(self, cfg, logger=None, **where):
        super().__init__(cfg, logger, **where)
        self.value = Expression(cfg.VALUE, self.domain.names, cfg.path_of('VALUE'))

    def arrays(self, points, normals):
        return {self.value_key(): self.value(points)[:, None]}


@CONDITIONS.register_class('Dirichlet')
class DirichletCondition(ValueCondition):
    """u = g."""

    para_dict = {}  # the inherited keys, and only those: a misspelt key is an error

    def residual(self, u, d, batch, field):
        return self.output(u) - batch[self.value_key()]


@CONDITIONS.register_class('InitialValue')
class InitialValueCondition(DirichletCondition):
    """u(x, t0) = g, on an initial set."""

    para_dict = {}  # the inherited keys, and only those: a misspelt key is an error
    SET_KINDS = ('initial',)


@CONDITIONS.register_class('InitialDerivative')
class InitialDerivativeCondition(ValueCondition):
    """du/dt(x, t0) = g, on an initial set (a wave equation's second initial condition).

    Without TIME (an ODE, DeepXDE's OperatorBC u'(t0) = g on a TimeDomain) there is no initial set: the
    condition goes on a boundary set drawn on the faces of one axis (``FACES: [x_low]``) and is du/d<axis> = g
    there, the plain derivative, whatever the side (Neumann's outward normal derivative is -du/dx at x_low).
    """

    para_dict = {}  # the inherited keys, and only those: a misspelt key is an error
    SET_KINDS = ('initial',)
    NEEDS_GRAD = True

    def __init__(self, cfg, logger=None, **where):
        super().__init__(cfg, logger, **where)
        self.axis = 't'  # without TIME: the axis of the set's FACES (check_faces)

    def placement(self):
        if self.domain.time is not None:
            return super().placement()
        first = self.domain.names[0]
        return ('boundary',), (
            f" (the problem has no TIME: an ODE, whose time is the coordinate {first}, states u'({first}0) = g on a"
            f' boundary set at that face, FACES: [{first}_low])'
        )

    def check_faces(self, faces, where):
        if self.domain.time is not None:
            return
        axes = sorted({face.split('_')[0] for face in faces})
        if len(axes) != 1:
            first = self.domain.names[0]
            raise ConfigError(
                f'{where}.FACES: without TIME an InitialDerivative is the derivative along one axis at its face(s);'
                f" draw the set on the faces of one axis, e.g. FACES: [{first}_low] (u'({first}0) = g), got"
                f' {list(faces)}'
            )
        self.axis = axes[0]

    def residual(self, u, d, batch, field):
        return d(self.axis, component=self.component) - batch[self.value_key()]


def normal_derivative(d, batch, point_set, component):
    """``[n, 1]``: du/dn, the gradient along each point's outward normal."""
    return (d.gradient(component) * batch[batch_key(point_set, 'normal')]).sum(1, keepdim=True)


@CONDITIONS.register_class('Neumann')
class NeumannCondition(ValueCondition):
    """du/dn = g along the outward normal."""

    para_dict = {}  # the inherited keys, and only those: a misspelt key is an error
    SET_KINDS = ('boundary',)
    NEEDS_NORMALS = NEEDS_GRAD = True

    def residual(self, u, d, batch, field):
        return normal_derivative(d, batch, self.point_set, self.component) - batch[self.value_key()]


@CONDITIONS.register_class('Robin')
class RobinCondition(ValueCondition):
    """A u + B du/dn = g."""

    para_dict = {
        'A': {'value': 1.0, 'description': 'coefficient of u'},
        'B': {'value': 1.0, 'description': 'coefficient of du/dn'},
    }
    SET_KINDS = ('boundary',)
    NEEDS_NORMALS = NEEDS_GRAD = True

    def residual(self, u, d, batch, field):
        dudn = normal_derivative(d, batch, self.point_set, self.component)
        return self.cfg.A * self.output(u) + self.cfg.B * dudn - batch[self.value_key()]


@CONDITIONS.register_class('Periodic')
class PeriodicCondition(Condition):
    """u (DERIVATIVE_ORDER 1: du/d AXIS) equal at each point of the AXIS faces and its image on the opposite face.

    The set must be drawn on the faces of AXIS only (``FACES: [AXIS]``) of a box-shaped region.
    """

    para_dict = {
        'AXIS': {'value': 'x', 'description': 'the space coordinate along which the field repeats'},
        'DERIVATIVE_ORDER': {
            'value': 0,
            'description': '0: the values match; 1: the derivatives along AXIS',
            'choices': [0, 1],
        },
    }
    SET_KINDS = ('boundary',)

    def __init__(self, cfg, logger=None, **where):
        super().__init__(cfg, logger, **where)
        space = self.domain.names[: self.domain.space_dim]
        if cfg.AXIS not in space:
            raise ConfigError(f'{cfg.path_of("AXIS")}: {cfg.AXIS!r} is not a space coordinate; one of {list(space)}')
        self.axis = space.index(cfg.AXIS)
        self.needs_grad = cfg.DERIVATIVE_ORDER == 1

    def partner_key(self):
        return batch_key(self.term, 'partner')

    def arrays(self, points, normals):
        return {self.partner_key(): self.domain.geometry.opposite(points, self.axis)}

    def residual(self, u, d, batch, field):
        partner = batch[self.partner_key()]
        if not self.needs_grad:
            return self.output(u) - self.output(field(partner))
        partner = partner.detach().requires_grad_(True)
        there = Derivatives(field(partner), partner)
        return d(self.axis, component=self.component) - there(self.axis, component=self.component)

    def check_faces(self, faces, where):
        """A periodic condition needs the set drawn on the faces of its AXIS only."""
        if list(faces) != [self.cfg.AXIS]:
            raise ConfigError(
                f'{self.cfg.path_of("AXIS")}: a periodic condition pairs the two faces of {self.cfg.AXIS};'
                f' draw its set there only: {where}.FACES: [{self.cfg.AXIS}]'
            )


@CONDITIONS.register_class('Observation')
class ObservationCondition(Condition):
    """u at the points of an observations set equals the observed values (its ``COMPONENTS``)."""

    para_dict = {'COMPONENTS': {'value': [0], 'description': 'the network outputs the value columns observe'}}
    SET_KINDS = ('observations',)
    COMPONENT_KEY = 'COMPONENTS'

    def components(self):
        return list(self.cfg.COMPONENTS)

    def residual(self, u, d, batch, field):
        return u[:, self.components()] - batch[batch_key(self.point_set, 'values')]
