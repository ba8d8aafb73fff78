"""Hyperparameter search: ``python tools/run_search.py --cfg FILE --space SPACE.yaml --trials N
[--workers K] [--storage URL] [--study NAME] [--heartbeat S] [KEY.PATH=VALUE ...]``.

Optuna samples the values of SPACE.yaml's config paths (TPE by default), each trial is an
ordinary training run in ``WORK_DIR/<study>/trial_NNNN/``, a PruningHook reports every
evaluation so the median pruner can stop hopeless trials. The study lives in
``WORK_DIR/search.db`` (SQLite) unless ``--storage`` names another database: the same
command continues a stopped search, and K workers (here or on other machines) share it.
See docs/search.md.
"""

import argparse
import os
import signal
import sys
import threading
import time

from scepter_like.cli import load_config, make_parser, run, tool_command
from scepter_like.errors import ConfigError, Preempted
from scepter_like.utils.signal_relay import SignalRelay


def _positive(args, name):
    if getattr(args, name) < 1:
        raise ConfigError(f'--{name}: must be at least 1, got {getattr(args, name)}')


def _exit_with_parent(parent):
    """A worker process ends when the search that started it is gone (its trial is retried)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def main(argv):
    parser = make_parser('Search hyperparameters of a config with Optuna (TPE, random or grid; median pruning).')
    parser.add_argument('--space', help='YAML file of the parameters to tune and the objective')
    parser.add_argument('--trials', type=int, default=20, help='trials the study should have (default 20)')
    parser.add_argument('--workers', type=int, default=1, help='worker processes on this machine (default 1)')
    parser.add_argument('--storage', default='', help='Optuna storage URL (default sqlite:///WORK_DIR/search.db)')
    parser.add_argument('--study', default='', help='study name (default: the space file name)')
    parser.add_argument(
        '--heartbeat', type=int, default=10, help='seconds between heartbeats; a trial silent for 2x is retried'
    )
    parser.add_argument('--worker-index', type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ('trials', 'workers', 'heartbeat'):
        _positive(args, name)
    if int(os.environ.get('WORLD_SIZE', '1') or 1) > 1:
        raise ConfigError('run_search starts its own workers; start it without torchrun')
    cfg = load_config(args)
    if args.print_config:
        print(cfg.dump(), end='')
        return 0
    from scepter_like.search.runner import require_optuna

    require_optuna()
    from scepter_like.search.runner import Search
    from scepter_like.search.space import SearchSpace
    from scepter_like.search.summary import SUMMARY_NAME, SummaryWriter, best_trial

    space = SearchSpace.load(args.space, cfg)
    search = Search(args, cfg, space, worker_index=args.worker_index)
    summary = SummaryWriter(search)
    if args.worker_index:
        threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
        search.run_worker(on_trial_end=summary.update)
        return 0
    print(
        f'[search] study {search.study_name!r} in {search.storage_url}: {search.trials_wanted} trial(s),'
        f' {args.workers} worker(s), into {search.study_dir}',
        flush=True,
    )
    start = time.time()
    command, env = tool_command('scepter_like.tools.run_search')
    workers = SignalRelay()  # the other local workers: a stop signal reaches them through this process
    for i in range(1, args.workers):
        workers.start([*command, *argv, '--worker-index', str(i)], env=env)
    try:
        search.run_worker(on_trial_end=summary.update)
    except (Preempted, KeyboardInterrupt) as e:  # a stop signal stopped this worker (a second Ctrl-C: at once)
        workers.send(getattr(e, 'signum', signal.SIGINT))  # the others stop too, each at a step boundary
        raise
    finally:
        with workers:  # a stop signal while waiting for their trials is passed on to them
            for worker in workers.children:
                worker.wait()
    if workers.signum:  # and then this command ends as a stopped search does
        raise Preempted(workers.signum)
    table = summary.update(final=True)
    best = best_trial(search.study)
    search.close_tracking(best)
    states = [t.state.name for t in search.study.get_trials(deepcopy=False)]
    print(
        f'[search] {states.count("COMPLETE")} complete, {states.count("PRUNED")} pruned, {states.count("FAIL")} failed'
        f' in {time.time() - start:.1f} s; summary in {os.path.join(search.study_dir, SUMMARY_NAME)}.md\n{table}',
        end='',
    )
    if best is None:
        print('[search] no trial completed', file=sys.stderr)
        return 1
    print(f'[search] best: trial {best.number}, {space.settings["METRIC"]} {best.value:.6g}, {best.params}')
    return 0


if __name__ == '__main__':
    sys.exit(run(main))
