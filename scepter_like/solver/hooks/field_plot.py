"""FieldPlotHook: a PNG of the predicted field at every evaluation (list it in EVAL_HOOKS / TEST_HOOKS).

It collects KEYS — the coordinates, the prediction and (optionally) the reference — from
each step's outputs, gathers them from every rank, and rank 0 writes
``WORK_DIR/plots/{PREFIX}-{mode}-step{N}.png`` (N: train steps done), atomically:

- 2-D coordinates: three panels, prediction / reference / |error| (one without a
  reference); points on a full regular grid are drawn as an image, other points as a
  scatter;
- 1-D coordinates: prediction and reference as lines, and |error| beside them.

A field of several outputs per point (NETWORK.OUT_DIM > 1) is drawn one output at a time:
COMPONENT (0 by default); list the hook once per output, each with a PREFIX of its own, to see each.

Axes carry the coordinate names of the evaluation data (``x``, ``t`` of a GridPoints over a
space-time domain; ``x``, ``y`` otherwise).  The prediction and the reference may be model
outputs or batch keys listed in SOLVER.EXTRA_KEYS (a reference stored with the data).

Everything it needs is checked before training starts (``before_solve``), so a run never
dies at its first evaluation: matplotlib is installed (the ``plot`` extra), and a forward
of the first two evaluation points gives every KEY with 1-D or 2-D coordinates; otherwise
one ``error:`` line.  matplotlib is imported through its object API (no pyplot, no global
backend change).
"""

import io
import os

import numpy as np

from scepter_like.errors import ConfigError, DataError
from scepter_like.solver.hooks.hook import PRIORITY_NORMAL, Hook, SolverSurface
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.utils.checkpoint import atomic_write
from scepter_like.utils.distributed import all_gather_object

PLOTS_DIR = 'plots'
DEFAULT_AXES = ('x', 'y')


@HOOKS.register_class()
class FieldPlotHook(Hook):
    para_dict = {
        'PRIORITY': {'value': PRIORITY_NORMAL, 'description': 'lower runs first'},
        'KEYS': {
            'value': ['x', 'u', 'u_exact'],
            'description': 'output keys: coordinates [N, 1 or 2], prediction, then optionally the reference',
        },
        'PREFIX': {'value': 'field', 'description': 'file name prefix'},
        'COMPONENT': {'value': 0, 'description': 'the output plotted, of a field with several (OUT_DIM > 1)', 'min': 0},
    }

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        if len(cfg.KEYS) not in (2, 3):
            raise ConfigError(
                f'{cfg.path_of("KEYS")}: name the coordinates, the prediction and optionally the reference'
            )
        self.keys = list(cfg.KEYS)
        self.prefix = cfg.PREFIX
        self.component = cfg.COMPONENT
        self.parts = []
        self.last_path = None
        self.axes = DEFAULT_AXES

    def before_solve(self, solver):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError(
                f'{self.cfg.path}: FieldPlotHook draws with matplotlib, which is not installed: pip install'
                " 'scepter_like[plot]' (or take the hook out of the config)"
            ) from None
        for mode in ('eval', 'test'):
            if self in solver.hooks_dict[mode] and mode in solver.datas:
                self._check_keys(solver, mode)

    def _check_keys(self, solver, mode):
        """A forward of the mode's first two points gives every KEY, on 1-D or 2-D coordinates."""
        bundle = solver.datas[mode]
        dataset = bundle.dataset
        self.axes = tuple(getattr(dataset, 'coordinate_names', DEFAULT_AXES))
        batch = bundle.loader.collate_fn([dataset[i] for i in range(min(2, len(dataset)))])
        available = dict(solver.predict(batch))
        available.update({k: batch[k] for k in solver.extra_keys if k in batch})
        missing = [k for k in self.keys if k not in available]
        if missing:
            raise ConfigError(
                f'{self.cfg.path_of("KEYS")}: {missing} are neither model outputs nor SOLVER.EXTRA_KEYS of the'
                f' {mode} batches; the model gives {sorted(set(available) - set(solver.extra_keys))}'
                f' (a batch key, e.g. a reference stored with the data, needs SOLVER.EXTRA_KEYS: [{missing[0]}])'
            )
        coords = np.asarray(available[self.keys[0]])
        dim = coords.reshape(len(coords), -1).shape[1]
        for key in self.keys[1:]:
            outputs = np.asarray(available[key]).reshape(len(coords), -1).shape[1]
            if self.component >= outputs:
                raise ConfigError(
                    f'{self.cfg.path_of("COMPONENT")}: {key!r} has {outputs} output(s) per point, counted from 0;'
                    f' COMPONENT {self.component} is not one of them'
                )
        if dim not in (1, 2):
            raise ConfigError(
                f'{self.cfg.path_of("KEYS")}: FieldPlotHook plots fields over 1-D or 2-D coordinates; {self.keys[0]!r}'
                f' has {dim} ({", ".join(self.axes)})'
            )

    def before_all_iter(self, solver: SolverSurface):
        self.parts = []

    def after_iter(self, solver: SolverSurface):
        outputs = solver.step.outputs
        missing = [k for k in self.keys if k not in outputs]
        if missing:
            raise DataError(f'FieldPlotHook needs {missing} in the model outputs; they hold {sorted(outputs)}')
        self.parts.append([outputs[k].detach().cpu().numpy() for k in self.keys])

    def after_all_iter(self, solver: SolverSurface):
        gathered = [p for rank_parts in all_gather_object(self.parts) for p in rank_parts]
        self.parts = []
        if not solver.is_main or not gathered:
            return
        coords, *fields = (np.concatenate([p[i] for p in gathered]) for i in range(len(self.keys)))
        path = os.path.join(
            solver.work_dir, PLOTS_DIR, f'{self.prefix}-{solver.mode}-step{solver.progress.total_iter}.png'
        )
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fields = [f.reshape(len(coords), -1)[:, self.component] for f in fields]  # one output of each point
        pred, exact = fields[0], fields[1] if len(fields) > 1 else None  # KEYS: points, prediction[, reference]
        png = render_field(
            coords, pred, exact, title=f'{solver.mode}, step {solver.progress.total_iter}', axes=self.axes
        )
        atomic_write(path, lambda f: f.write(png))
        self.last_path = path
        solver.logger.info(f'field plot written to {path}')


def _grid_image(coords, values):
    """``(image [ny, nx], extent)`` when ``coords`` are a full regular grid, else None."""
    xs, ix = np.unique(coords[:, 0], return_inverse=True)
    ys, iy = np.unique(coords[:, 1], return_inverse=True)
    if len(xs) * len(ys) != len(coords):
        return None
    image = np.full((len(ys), len(xs)), np.nan)
    image[iy.reshape(-1), ix.reshape(-1)] = values
    if np.isnan(image).any():
        return None
    return image, (xs[0], xs[-1], ys[0], ys[-1])


def render_field(coords, pred, exact=None, title='', axes=DEFAULT_AXES):
    """PNG bytes of ``field_figure``."""
    buf = io.BytesIO()
    field_figure(coords, pred, exact, title, axes).savefig(buf, format='png')
    return buf.getvalue()


def field_figure(coords, pred, exact=None, title='', axes=DEFAULT_AXES):
    """A figure of the field ``pred`` (and ``exact`` and ``|pred - exact|``) at ``coords``, axes named ``axes``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    coords = coords.reshape(len(coords), -1).astype(np.float64)
    panels = [('prediction', pred.reshape(-1))]
    if exact is not None:
        exact = exact.reshape(-1)
        panels += [('exact', exact), ('|error|', np.abs(pred.reshape(-1) - exact))]
    dim = coords.shape[1]
    if dim not in (1, 2):
        raise DataError(f'FieldPlotHook plots 1-D or 2-D coordinates, got {dim}-D')
    fig = Figure(figsize=(4.2 * (len(panels) if dim == 2 else min(len(panels), 2)), 3.6))
    FigureCanvasAgg(fig)
    if dim == 1:
        order = np.argsort(coords[:, 0])
        x = coords[order, 0]
        ax = fig.add_subplot(1, 2 if exact is not None else 1, 1)
        for name, values in panels[:2]:
            ax.plot(x, values[order], label=name, linestyle='-' if name == 'prediction' else '--')
        ax.set_xlabel(axes[0])
        ax.legend()
        if exact is not None:
            err = fig.add_subplot(1, 2, 2)
            err.plot(x, panels[2][1][order])
            err.set_title('|error|')
            err.set_xlabel(axes[0])
    else:
        for i, (name, values) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            grid = _grid_image(coords, values)
            if grid is not None:
                art = ax.imshow(grid[0], origin='lower', extent=grid[1], aspect='auto')
            else:
                art = ax.scatter(coords[:, 0], coords[:, 1], c=values, s=4)
            fig.colorbar(art, ax=ax)
            ax.set_title(name)
            ax.set_xlabel(axes[0])
            ax.set_ylabel(axes[1])
    fig.suptitle(title)
    fig.tight_layout()
    return fig
