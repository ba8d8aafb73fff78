"""What a search leaves in its study folder, rewritten as trials finish.

``search_summary.md`` / ``.csv``: every trial (number, state, objective, parameters, epochs
reported, seconds, worker, work dir, error or note), best first. ``best_config.yaml``: the
config of the best trial, ready for ``run_train.py --cfg``. ``optimization_history.png`` and
``param_importances.png`` (optuna's matplotlib plots; skipped without matplotlib), redrawn
at most once every ``PLOT_SECONDS`` while trials run (a redraw costs over a second) and at the end.
"""

import csv
import io
import os
import time
import warnings

from scepter_like.utils.checkpoint import atomic_write, atomic_write_text

SUMMARY_NAME = 'search_summary'
BEST_CONFIG = 'best_config.yaml'
BEST_RUN_DIR = 'best_run'
PLOTS = {'optimization_history.png': 'plot_optimization_history', 'param_importances.png': 'plot_param_importances'}
PLOT_SECONDS = 60
_ORDER = {'COMPLETE': 0, 'PRUNED': 1, 'FAIL': 2, 'RUNNING': 3, 'WAITING': 4}


def _note(trial, retried_as):
    if 'error' in trial.user_attrs:
        return trial.user_attrs['error']
    notes = []
    if 'failed_trial' in trial.system_attrs:
        notes.append(f'retry of #{trial.system_attrs["retry_history"][-1]}')
    if trial.state.name == 'PRUNED':
        notes.append(f'pruned after epoch {max(trial.intermediate_values, default=0)}')
    if trial.state.name == 'FAIL':
        again = retried_as.get(trial.number)
        notes.append('its worker stopped mid-trial' + (f'; retried as #{again}' if again is not None else ''))
    return '; '.join(notes)


def summary_rows(study, space):
    """Header and rows of the summary, best first."""
    trials = study.get_trials(deepcopy=False)
    retried_as = {t.system_attrs['retry_history'][-1]: t.number for t in trials if 'retry_history' in t.system_attrs}
    sign = -1 if space.settings['DIRECTION'] == 'maximize' else 1

    def key(t):
        return (_ORDER.get(t.state.name, 5), sign * t.value if t.state.name == 'COMPLETE' else 0, t.number)

    paths = [p.path for p in space.params]
    header = ['trial', 'state', space.settings['METRIC'], *paths, 'epochs', 'seconds', 'worker', 'work_dir', 'note']
    rows = []
    for t in sorted(trials, key=key):
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete else ''
        rows.append(
            [
                t.number,
                t.state.name.lower(),
                t.value if t.state.name == 'COMPLETE' else '',
                *[t.params.get(p, '') for p in paths],
                max(t.intermediate_values, default=''),
                round(seconds, 1) if seconds != '' else '',
                t.user_attrs.get('worker', ''),
                t.user_attrs.get('work_dir', ''),
                _note(t, retried_as),
            ]
        )
    return header, rows


def _cell(value):
    if isinstance(value, float):
        return f'{value:.6g}'
    return str(value).replace('|', '\\|').replace('\n', ' ')


def write_summary(search, plots=True):
    """Rewrite the summary, the best config and (``plots``) the PNGs; returns the markdown table."""
    study, space = search.study, search.space
    header, rows = summary_rows(study, space)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator='\n')
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(os.path.join(search.study_dir, SUMMARY_NAME + '.csv'), buf.getvalue())
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(_cell(v) for v in row) + ' |' for row in rows]
    table = '\n'.join(lines) + '\n'
    best = best_trial(study)
    intro = (
        f'# Search {search.study_name}\n\nstorage `{search.storage_url}`, {space.settings["SAMPLER"]} sampler,'
        f' {space.settings["PRUNER"]} pruner, {space.settings["DIRECTION"]} {space.settings["METRIC"]}'
        f' ({space.settings["FROM"]}).\n\n'
    )
    if best is not None:
        rerun = (
            f'`{BEST_CONFIG}` reruns it'
            if write_best_config(search, best)
            else f'its run left no config.yaml, so no `{BEST_CONFIG}`'
        )
        intro += f'Best: trial {best.number}, {space.settings["METRIC"]} {best.value:.6g}; {rerun}.\n\n'
    if plots:
        intro += write_plots(search) + '\n'
    atomic_write_text(os.path.join(search.study_dir, SUMMARY_NAME + '.md'), intro + table)
    return table


class SummaryWriter:
    """``update()`` after each trial rewrites the tables; the plots when PLOT_SECONDS have passed."""

    def __init__(self, search):
        self.search = search
        self.plotted = time.monotonic()

    def update(self, final=False):
        plots = final or time.monotonic() - self.plotted >= PLOT_SECONDS
        if plots:
            self.plotted = time.monotonic()
        return write_summary(self.search, plots=plots)


def best_trial(study):
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == 'COMPLETE']
    return study.best_trial if complete else None


def write_best_config(search, best):
    """The best trial's own ``config.yaml`` (what it trained from) with a new WORK_DIR and no sweep parent, as a YAML
    to run again; None when the trial's run left no config.yaml."""
    from scepter_like.config import Config
    from scepter_like.solver.run_records import CONFIG_FILE

    source = os.path.join(best.user_attrs.get('work_dir', ''), CONFIG_FILE)
    if not os.path.isfile(source):
        return None
    cfg = Config(cfg_file=source)
    cfg.SOLVER['WORK_DIR'] = os.path.join(search.study_dir, BEST_RUN_DIR)
    search.tracking.detach(cfg)
    metric = search.space.settings['METRIC']
    path = os.path.join(search.study_dir, BEST_CONFIG)
    head = [
        f'# Best trial {best.number} of study {search.study_name}: {metric} {best.value:.6g}.',
        f'# Its run: {best.user_attrs.get("work_dir", "")} (this is its config.yaml, with a new WORK_DIR)',
        f'# Run it again: python tools/run_train.py --cfg {path}',
        *[f'#   {k}: {v!r}' for k, v in search.space.decode(best.params).items()],
    ]
    atomic_write_text(path, '\n'.join(head) + '\n' + cfg.dump())
    return path


def write_plots(search):
    """Optimisation history and parameter importance PNGs; returns a line saying what was drawn."""
    try:
        import matplotlib

        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        import optuna.visualization.matplotlib as optuna_plots
    except ImportError:
        return "Plots need matplotlib: pip install 'scepter_like[plot]'."
    drawn = []
    for name, fn in PLOTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')  # optuna's "experimental" and "too few trials" notes
                ax = getattr(optuna_plots, fn)(search.study)
        except (ValueError, RuntimeError):  # e.g. importance needs two complete trials
            continue
        fig = ax.figure
        fig.set_size_inches(7, 4.5)
        fig.tight_layout()
        atomic_write(
            os.path.join(search.study_dir, name),
            lambda f, fig=fig: fig.savefig(f, format='png', dpi=100, bbox_inches='tight'),
        )
        plt.close(fig)
        drawn.append(f'![{name}]({name})')
    return ' '.join(drawn)
