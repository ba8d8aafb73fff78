"""An LR range test: train a few hundred steps while the learning rate grows from tiny to huge, and read a
good learning rate off the loss (Smith, "Cyclical Learning Rates"; Lightning's ``lr_find``).

``find_lr(cfg, overrides)`` (``tools/find_lr.py`` / ``scepter-find-lr`` on the command line)
runs the config's own model (from its initial or PRETRAINED_MODEL weights), data, optimizer
and BackwardHook settings (accumulation, clipping, AMP) for NUM_STEPS optimizer steps under
``LrRangeHook``, in a temporary folder: the run's WORK_DIR is never touched, and nothing is evaluated.  The
suggestion is the rate where the smoothed loss falls fastest (per decade of learning rate),
before it diverged; ``LrRangeTest.plot`` draws loss against learning rate.  One process:
the sweep is a quick look, not a training run.
"""

import copy
import csv
import io
import math
import tempfile
from dataclasses import dataclass

import numpy as np

from scepter_like.errors import TrainingError, UserError

SKIP_START = 0.1  # the first steps' share left out of the suggestion: the running mean is still settling


@dataclass
class LrRangeTest:
    """The sweep: learning rate, loss and smoothed loss per optimizer step, and the suggested learning rate."""

    lrs: list
    losses: list
    smoothed: list
    suggestion: float

    def to_csv(self):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(['lr', 'loss', 'smoothed_loss'])
        writer.writerows(zip(self.lrs, self.losses, self.smoothed))
        return out.getvalue()

    def plot_png(self, title='LR range test'):
        """PNG bytes: the smoothed and raw loss against the learning rate (log scale), the suggestion marked."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            raise UserError(
                "the LR range plot needs matplotlib; install it with pip install 'scepter_like[plot]'"
            ) from None
        fig = Figure(figsize=(7, 4.2))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(self.lrs, self.losses, alpha=0.3, label='loss')
        ax.plot(self.lrs, self.smoothed, label='smoothed loss')
        ax.axvline(self.suggestion, color='tab:red', linestyle='--', label=f'suggested {self.suggestion:.2g}')
        ax.set_xscale('log')
        smoothed = [v for v in self.smoothed if math.isfinite(v)]
        if smoothed:  # the divergence at the end would squash the curves
            low = min(smoothed + [v for v in self.losses if math.isfinite(v)])
            ax.set_ylim(low - 0.05 * abs(low), max(smoothed[0], min(smoothed)) * 1.5)
        ax.set_xlabel('learning rate')
        ax.set_ylabel('train loss')
        ax.grid(alpha=0.3, which='both')
        ax.legend()
        ax.set_title(title)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format='png', dpi=100)
        return buf.getvalue()


def suggest_lr(lrs, smoothed):
    """The learning rate where ``smoothed`` falls fastest against log10(lr), skipping the first steps."""
    losses = np.asarray(smoothed, dtype=np.float64)
    finite = np.isfinite(losses)
    if finite.sum() < 3:
        raise TrainingError(
            f'the LR range test recorded {int(finite.sum())} finite losses; run more steps (NUM_STEPS) or lower MAX_LR'
        )
    last = int(np.flatnonzero(finite)[-1]) + 1
    start = min(int(SKIP_START * last), last - 3)
    slope = np.gradient(losses[start:last], np.log10(np.asarray(lrs[start:last], dtype=np.float64)))
    return float(lrs[start + int(np.argmin(slope))])


def sweep_config(cfg, min_lr, max_lr, num_steps, work_dir):
    """A copy of ``cfg`` (a root Config) that runs the sweep in ``work_dir``: training only, BackwardHook kept."""
    from scepter_like.solver.hooks.backward import BackwardHook
    from scepter_like.solver.hooks.registry import HOOKS

    cfg = copy.deepcopy(cfg)
    solver = cfg.SOLVER
    if solver.get('TRAIN_DATA') is None:
        raise UserError(f'{solver.path_of("TRAIN_DATA")}: the LR range test trains; give TRAIN_DATA')
    backward = [
        entry.to_dict()
        for entry in solver.get('TRAIN_HOOKS') or []
        if hasattr(entry, 'get') and entry.get('NAME') in HOOKS and issubclass(HOOKS.get(entry.NAME), BackwardHook)
    ]
    sweep = {'NAME': 'LrRangeHook', 'MIN_LR': min_lr, 'MAX_LR': max_lr, 'NUM_STEPS': num_steps}
    for key, value in {
        'WORK_DIR': work_dir,
        'LOG_FILE': '',
        'RESUME_FROM': '',
        'MAX_EPOCHS': 10**9,  # MAX_STEPS ends it
        'MAX_STEPS': num_steps * max(1, _accumulation(solver, backward)),
        'EVAL_DATA': None,
        'TEST_DATA': None,
        'METRICS': [],
        'LR_SCHEDULER': None,
        'OPTIMIZER_PHASES': [],
        'TRAIN_HOOKS': backward + [sweep],
        'EVAL_HOOKS': [],
        'TEST_HOOKS': [],
        'CODE_SNAPSHOT': False,
        'SANITY_EVAL_BATCHES': 0,
        'MODEL_SUMMARY_DEPTH': 0,
        'DEFAULT_LOG_HOOK': False,
    }.items():
        solver[key] = value
    return cfg


def _accumulation(solver_cfg, backward):
    """Micro-batches per optimizer step (SOLVER.ACCU_STEP or BackwardHook ACCUMULATE_STEP)."""
    return max([solver_cfg.get('ACCU_STEP') or 1] + [entry.get('ACCUMULATE_STEP') or 1 for entry in backward])


def find_lr(cfg, overrides=(), imports=(), min_lr=1e-7, max_lr=10.0, num_steps=100, logger=None):
    """Run the LR range test of ``cfg`` (a YAML path, a dict or a Config, with the CLI's overrides); an LrRangeTest."""
    from scepter_like.api import run_logger
    from scepter_like.cli import read_config
    from scepter_like.solver import SOLVERS
    from scepter_like.solver.environment import ProcessSettings
    from scepter_like.solver.hooks.lr_range import LrRangeHook

    config = read_config(cfg, overrides, imports, given_as='the path given to find_lr')
    program = ProcessSettings()  # the program's torch settings, back after the sweep set its ENV's
    with tempfile.TemporaryDirectory(prefix='scepter_lr_find_') as work_dir:
        sweep = sweep_config(config, min_lr, max_lr, num_steps, work_dir)
        solver = SOLVERS.build(sweep.SOLVER, logger=logger or run_logger())
        try:
            with solver.stop_signals:
                solver.set_up_pre()
                solver.set_up()
                solver.solve()
        finally:
            solver.close()
            program.apply()
    hook = next(h for h in solver.hooks_dict['train'] if isinstance(h, LrRangeHook))
    return LrRangeTest(hook.lrs, hook.losses, hook.smoothed, suggest_lr(hook.lrs, hook.smoothed))
