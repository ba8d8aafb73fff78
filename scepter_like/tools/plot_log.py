"""Plot a run's curves: ``python tools/plot_log.py WORK_DIR [--output PNG]``.

Reads ``WORK_DIR/metrics.jsonl`` (the clean history, see ``scepter_like/utils/metrics_log.py``)
and draws the train scalars (loss terms), the learning rate and the eval / test metrics
against the train step into one PNG (default ``WORK_DIR/metrics.png``). Needs matplotlib
(``pip install 'scepter_like[plot]'``).
"""

import argparse
import os
import sys

from scepter_like.cli import run
from scepter_like.errors import ConfigError, UserError
from scepter_like.utils.checkpoint import atomic_write
from scepter_like.utils.metrics_log import METRICS_FILE, read_metrics


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f'{message}; see {self.prog} --help')


def series(records, kind):
    """{name: ([steps], [values])} of the ``values`` of every record of ``kind``."""
    out = {}
    for record in records:
        if record['kind'] != kind:
            continue
        for name, value in record.get('values', {}).items():
            if isinstance(value, (int, float)):
                steps, values = out.setdefault(name, ([], []))
                steps.append(record['step'])
                values.append(value)
    return out


def plot(records, output, title):
    try:
        import matplotlib
    except ImportError:
        raise UserError("plot_log needs matplotlib; install it with pip install 'scepter_like[plot]'") from None
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    train = series(records, 'train')
    lr = train.pop('lr', None)
    evals = {f'{kind}/{name}': s for kind in ('eval', 'test') for name, s in series(records, kind).items()}
    panels = [('train', train), ('learning rate', {'lr': lr} if lr else {}), ('metrics', evals)]
    panels = [(name, curves) for name, curves in panels if curves]
    if not panels:
        raise UserError(f'{title}: {METRICS_FILE} holds no train, eval or test values to plot yet')
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), sharex=True, squeeze=False)
    for ax, (name, curves) in zip(axes[:, 0], panels):
        for label, (steps, values) in curves.items():
            ax.plot(steps, values, marker='o' if len(steps) < 30 else None, label=label)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(loc='best', fontsize='small')
    axes[-1, 0].set_xlabel('train step')
    fig.suptitle(title)
    fig.tight_layout()
    try:
        atomic_write(output, lambda f: fig.savefig(f, format='png', dpi=100))
    finally:
        plt.close(fig)


def main(argv):
    parser = _Parser(description='Draw loss, learning rate and metric curves of a run to a PNG.')
    parser.add_argument('work_dir', help='the run folder (holds metrics.jsonl)')
    parser.add_argument('--output', help='PNG path (default: WORK_DIR/metrics.png)')
    parser.add_argument('--debug', action='store_true', help='show tracebacks of user errors')
    args = parser.parse_args(argv)
    path = os.path.join(args.work_dir, METRICS_FILE)
    if not os.path.isfile(path):
        raise UserError(f'{path} not found; give the WORK_DIR of a run (it writes {METRICS_FILE})')
    output = args.output or os.path.join(args.work_dir, 'metrics.png')
    plot(read_metrics(path), output, os.path.basename(os.path.abspath(args.work_dir)))
    print(output)
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
