"""``scepter.modules.utils.math_plot`` maps here: the curve plots scepter's ValLossHook writes.

Needs matplotlib (``pip install 'scepter_like[plot]'``); without it a call is one error line.
"""

import numpy as np

from scepter_like.errors import UserError

_COLORS = ['b', 'g', 'r', 'c', 'm', 'y', 'k']
_LINES = ['-', '--', '-.', ':']


def plot_multi_curves(x, y, show=False, title=None, save_path=None, x_label=None, y_label=None):
    """Plot each ``{'data': values, 'label': text}`` of ``y`` against ``x`` into one figure, saved to ``save_path``
    (``show`` is ignored: plots go to files). Returns True, as scepter's does."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(
            "plot_multi_curves needs matplotlib; install it with pip install 'scepter_like[plot]'"
        ) from None
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for index, curve in enumerate(y):
        ax.plot(
            np.asarray(x),
            np.asarray(curve['data']),
            linestyle=_LINES[index % len(_LINES)],
            linewidth=2,
            color=_COLORS[index % len(_COLORS)],
            label=curve['label'],
        )
    ax.set_title(title, loc='center')
    ax.legend(loc='upper right')
    ax.set_xlabel(x_label or '')
    ax.set_ylabel(y_label or '')
    ax.grid()
    if save_path is not None:
        fig.savefig(save_path)
    return True


def plt_curve(x, y, show=False, title=None, save_path=None, x_label=None, y_label=None):
    """One curve ``y`` against ``x`` (scepter's)."""
    return plot_multi_curves(x, [{'data': y, 'label': 'y'}], show, title, save_path, x_label, y_label)
