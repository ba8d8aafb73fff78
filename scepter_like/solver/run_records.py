"""Run records: what a run was, written to WORK_DIR when it starts (rank 0).

- ``config.yaml``: the resolved config (every default filled in); ``--cfg`` it to rerun.
- ``env.json``: versions, world size, device, host, command line, git commit (of the run's folder and, under
  ``toolkit``, of scepter_like's own checkout when it runs from one).
- ``code_snapshot/`` (unless ``SOLVER.CODE_SNAPSHOT`` is false): inside a git work tree
  ``staged.diff`` (HEAD -> index), ``unstaged.diff`` (index -> work tree), ``untracked.txt``
  (names of untracked, not ignored files; their contents are not saved — ``git add`` new
  files to have them in ``staged.diff``) and ``README.md`` with the restoring commands; in
  or outside git, ``imports/``: a copy of each file ``IMPORTS`` / ``--import`` brought in
  that git does not track and no installation holds (the run's own code).

Records of an earlier run in the same WORK_DIR (a resume, a rerun) are moved to
``records_history/<its start time>/`` first, so none is lost. Every file is written
atomically; git runs with a timeout, and any git failure only leaves a note in env.json.
"""

import datetime
import json
import logging
import os
import platform
import shlex
import socket
import subprocess
import sys
import sysconfig
import tempfile

from scepter_like.about import PACKAGE_DIR, __version__
from scepter_like.errors import ConfigError, Preempted, RunPruned
from scepter_like.solver.checkpoint_state import refuse_to_mix_runs
from scepter_like.solver.config_agreement import config_differences
from scepter_like.solver.model_summary import model_summary
from scepter_like.solver.work_dir_lock import LOCK_FILE, lock_for_training
from scepter_like.utils.checkpoint import CHECKPOINT_DIR, atomic_write, atomic_write_text
from scepter_like.utils.failure_text import failure_line
from scepter_like.utils.imports import source_files
from scepter_like.utils.logger import add_file_handler
from scepter_like.utils.metrics_log import METRICS_FILE, MetricsLog

CONFIG_FILE = 'config.yaml'
ENV_FILE = 'env.json'
SNAPSHOT_DIR = 'code_snapshot'
IMPORTS_DIR = 'imports'  # in SNAPSHOT_DIR: copies of the imported files git does not track
HISTORY_DIR = 'records_history'
GIT_TIMEOUT_S = 10


class GitError(Exception):
    """A git command failed or timed out (the snapshot is skipped)."""


def open_work_dir(solver):
    """Every rank: the ranks' configs compared; WORK_DIR created and checked (rank 0); a run that trains locks it
    (``work_dir_lock``), before anything is written there; returns the log file's handler (rank 0; None without
    LOG_FILE or elsewhere).
    """
    differences = config_differences(solver)  # before any other collective, which a differing config may skip
    if solver.is_main:
        check_work_dir(solver)
    if solver.cfg.TRAIN_DATA is not None:  # (an evaluation's or inference's config has none: it takes no lock)
        lock_for_training(solver)
    if not solver.is_main:
        return None
    handler = add_file_handler(solver.logger, solver.log_file) if solver.log_file else None
    for line in differences:
        solver.logger.warning(line)
    return handler


def check_work_dir(solver):
    """Create WORK_DIR; what the run writes there and already exists must be of its kind (a folder where it
    keeps a folder, a file where it appends to a file), and the folder must take a new file: otherwise one
    ConfigError now instead of a traceback mid-run."""
    where, work_dir = solver.cfg.path_of('WORK_DIR'), solver.work_dir
    try:
        os.makedirs(work_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f'{where}: cannot create {work_dir} ({e.strerror})') from None
    files = [(where, os.path.join(work_dir, name)) for name in (METRICS_FILE, CONFIG_FILE, ENV_FILE, LOCK_FILE)]
    if solver.log_file:  # LOG_FILE=. names WORK_DIR itself: its key is the one to change
        files.append((solver.cfg.path_of('LOG_FILE'), solver.log_file))
    for key, path in files:
        if os.path.isdir(path):
            raise ConfigError(
                f'{key}: {path} is a folder where the run writes a file; move it away or use another {key}'
            )
    for name in (CHECKPOINT_DIR, SNAPSHOT_DIR, HISTORY_DIR):
        path = os.path.join(work_dir, name)
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ConfigError(
                f'{where}: {path} is a file where the run keeps a folder; move it away or use another WORK_DIR'
            )
    try:
        tempfile.TemporaryFile(dir=work_dir).close()
    except OSError as e:
        raise ConfigError(
            f'{where}: cannot write into {work_dir} ({e.strerror}); give a folder you can write to'
        ) from None


def close_work_dir_log(solver):
    """Detach the run's log file (rank 0).  Called as an error ends the run, it first writes why (a log read on
    shared storage would not say): the line the console gets (``utils/failure_text.py``), and the traceback after
    it where the console prints one; a run a search pruned, as an INFO line (no failure).  A stop signal's
    checkpoint was logged already."""
    handler, solver._file_handler = solver._file_handler, None
    if handler is None:
        return
    error, level, with_traceback = sys.exc_info()[1], logging.ERROR, False
    if isinstance(getattr(solver, 'failed', None), RunPruned):  # the search may be handling its own exception now
        line, level = f'the run ends here, pruned by the search (not failed): {solver.failed}', logging.INFO
    elif isinstance(error, Exception) and not isinstance(error, Preempted):
        line, with_traceback = failure_line(error)
    else:
        line = None
    if line is not None:
        record = {'name': solver.logger.name, 'msg': line, 'levelno': level, 'levelname': logging.getLevelName(level)}
        record['exc_info'] = (type(error), error, error.__traceback__) if with_traceback else None
        handler.handle(logging.makeLogRecord(record))
    solver.logger.removeHandler(handler)
    handler.close()


def start_training_run(solver):
    """A training run starts: refuse another run's WORK_DIR (a fresh run), then (rank 0) the run records.

    Returns the run's MetricsLog (rank 0; None elsewhere): only a training run appends to
    metrics.jsonl, so an evaluation of its weights (run_eval, ``test()`` from Python) never does.
    """
    if not solver.resumed_from and 'train' in solver.datas:
        refuse_to_mix_runs(solver)
    if not solver.is_main:
        return None
    write_run_records(solver, solver.resumed_from, code_snapshot=solver.cfg.CODE_SNAPSHOT)
    metrics_log = MetricsLog(os.path.join(solver.work_dir, METRICS_FILE))
    metrics_log.write_start(solver, solver.resumed_from)
    return metrics_log


def announce_run(solver):
    """Log the start-of-run summary, a warning when a resumed run has nothing left to train, the hook order."""
    progress = solver.progress
    solver.logger.info(run_summary(solver))
    if solver.is_main and solver.cfg.MODEL_SUMMARY_DEPTH > 0:
        solver.logger.info(model_summary(solver, solver.cfg.MODEL_SUMMARY_DEPTH))
    done = progress.epochs_completed() >= progress.max_epochs or 0 < progress.max_steps <= progress.total_iter
    if solver.resumed_from and done:
        rest = (
            [f'the evaluation of epoch {progress.epoch + 1}'] if progress.epoch_finished and solver.eval_due() else []
        )
        rest += ['the test'] if 'test' in solver.datas else []  # (its last evaluation is in the checkpoint)
        solver.logger.warning(
            f'{solver.resumed_from} ends a finished run (step {progress.total_iter}, MAX_EPOCHS'
            f' {progress.max_epochs}, MAX_STEPS {progress.max_steps}): nothing is left to train; '
            + (f'only {" and ".join(rest)} {"runs" if len(rest) == 1 else "run"}' if rest else 'nothing runs')
        )
    solver.logger.info('hook order per stage:\n' + solver.get_hooks_info())


def run_summary(solver):
    """The start-of-run lines: model and its parameters, data per mode, the update, device, threads, world, work dir."""
    import torch

    model = solver.unwrapped_model
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    lines = [
        f'model {solver.cfg.MODEL.get("NAME", type(model).__name__)}: {trainable:,} trainable of {total:,} parameters',
    ]
    for mode, bundle in solver.datas.items():
        lines.append(
            f'{mode} data: {len(bundle.dataset):,} samples, batch {bundle.batch_size} per rank,'
            f' {solver.progress.epoch_iters[mode]} batches per epoch on this rank'
        )
    if 'train' in solver.datas and solver.optimizer is not None:
        lines.append(solver.updater.describe())
    if solver.lightning is not None:
        lines.append(f"loop: Lightning's Trainer (ENV.USE_PL; lightning {lightning_version()})")
    threads = torch.get_num_threads()
    lines.append(
        f'device {solver.device} ({threads} intra-op thread{"s" if threads != 1 else ""} per process),'
        f' world size {solver.world_size}; work dir {os.path.abspath(solver.work_dir)}'
    )
    return 'run:\n' + '\n'.join(f'  {line}' for line in lines)


def _git(args, cwd):
    try:
        res = subprocess.run(
            ['git', *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GitError(f'git {args[0]}: {type(e).__name__}: {e}') from None
    if res.returncode != 0:
        raise GitError(f'git {args[0]}: {res.stderr.decode(errors="replace").strip()}')
    return res.stdout


_DIFF = ['diff', '--binary', '--no-color', '--no-ext-diff', '--no-textconv', '--ignore-submodules']


def git_state(cwd):
    """Commit, branch, top level and the three snapshot texts of the work tree at ``cwd``.

    Returns None when ``cwd`` is not inside a git work tree; raises GitError when git fails.
    """
    try:
        inside = _git(['rev-parse', '--is-inside-work-tree'], cwd).decode().strip()
    except GitError:
        return None
    if inside != 'true':
        return None
    top = _git(['rev-parse', '--show-toplevel'], cwd).decode().strip()
    commit = _git(['rev-parse', 'HEAD'], top).decode().strip()
    branch = _git(['rev-parse', '--abbrev-ref', 'HEAD'], top).decode().strip()
    staged = _git([*_DIFF, '--cached', 'HEAD'], top)
    unstaged = _git(_DIFF, top)
    untracked = _git(['ls-files', '--others', '--exclude-standard', '-z'], top).decode(errors='replace')
    return {
        'commit': commit,
        'branch': branch,
        'toplevel': top,
        'staged': staged,
        'unstaged': unstaged,
        'untracked': [name for name in untracked.split('\0') if name],
    }


def toolkit_state(package_dir=None):
    """scepter_like's own code: its version, and the commit and dirty flag of the git checkout it runs from (an
    editable install) in one ``git status``; an installed copy, or a folder git does not know, gives a note."""
    package_dir = package_dir or PACKAGE_DIR
    state = {'version': __version__, 'path': package_dir}
    if _installed(os.path.realpath(package_dir)):
        return state
    try:
        lines = _git(['status', '--porcelain=v2', '--branch', '--', '.'], package_dir).decode(errors='replace')
    except GitError as e:
        return {**state, 'note': f'not a git checkout ({e})'}
    heads = [line.split()[2] for line in lines.splitlines() if line.startswith('# branch.oid ')]
    state['commit'] = heads[0] if heads and heads[0] != '(initial)' else None
    state['dirty'] = any(not line.startswith('#') for line in lines.splitlines())  # changed or untracked files
    return state


def restore_command(state, snapshot_dir):
    """The shell command that rebuilds the snapshot's work tree (run in a clone)."""
    parts = [f'git checkout {state["commit"]}']
    if state['staged']:
        parts.append(f'git apply --index {shlex.quote(os.path.join(snapshot_dir, "staged.diff"))}')
    if state['unstaged']:
        parts.append(f'git apply {shlex.quote(os.path.join(snapshot_dir, "unstaged.diff"))}')
    return ' && '.join(parts)


def _inside(path, folder):
    return os.path.commonpath([path, folder]) == folder


def _installed(path):
    """Whether ``path`` lies in an installation (the standard library, site-packages): not the run's own code."""
    paths = sysconfig.get_paths()
    return any(_inside(path, os.path.realpath(paths[k])) for k in ('stdlib', 'platstdlib', 'purelib', 'platlib'))


def untracked_imports(imports, state, cwd):
    """The real paths of the files ``imports`` (IMPORTS entries) brought in that git and installations lack."""
    files = [f for f in map(os.path.realpath, source_files(imports, cwd)) if not _installed(f)]
    if state is None or not files:
        return files
    top = os.path.realpath(state['toplevel'])
    inside = [f for f in files if _inside(f, top)]
    try:
        listed = _git(['ls-files', '-z', '--', *inside], top).decode(errors='replace') if inside else ''
    except GitError:  # unsure what git tracks: keep a copy of each
        listed = ''
    tracked = {os.path.join(top, name) for name in listed.split('\0') if name}
    return [f for f in files if f not in tracked]


def save_imported_files(files, snapshot_dir, top=None):
    """Copy ``files`` into ``snapshot_dir/imports/``; returns ``{saved path (relative): original path}``.

    A file inside the git work tree keeps its path relative to the top folder (copy
    ``imports/`` over a restored clone); any other goes to ``imports/external/`` under its path
    from the folder above its top package (``external/pkg/sub/mod.py``), so ``external/`` on
    PYTHONPATH imports it by the same module name.
    """
    saved = {}
    top = os.path.realpath(top) if top else None
    for path in files:
        rel = (
            os.path.relpath(path, top)
            if top and _inside(path, top)
            else os.path.join('external', os.path.relpath(path, _import_root(path)))
        )
        stem, n = rel, 1
        while os.path.join(IMPORTS_DIR, rel) in saved:
            n += 1
            rel = os.path.join(os.path.dirname(stem), f'{n}-{os.path.basename(stem)}')
        with open(path, 'rb') as f:
            blob = f.read()
        atomic_write(os.path.join(snapshot_dir, IMPORTS_DIR, rel), lambda f, b=blob: f.write(b))
        saved[os.path.join(IMPORTS_DIR, rel)] = path
    return saved


def _import_root(path):
    """The folder above the outermost package holding ``path`` (its own folder when that is no package)."""
    folder = os.path.dirname(path)
    while os.path.isfile(os.path.join(folder, '__init__.py')) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def _imports_note(saved):
    if not saved:
        return ''
    listing = ''.join(f'  - `{rel}` (from `{original}`)\n' for rel, original in saved.items())
    external = any(rel.startswith(os.path.join(IMPORTS_DIR, 'external', '')) for rel in saved)
    rerun = (
        f'  Put `{IMPORTS_DIR}/external` on PYTHONPATH to import the files under it by their module names (an'
        " IMPORTS `.py` path: give the saved copy's path instead).\n"
        if external
        else ''
    )
    return f'- `{IMPORTS_DIR}/`: the imported files git does not track, saved:\n{listing}{rerun}'


def write_code_snapshot(state, snapshot_dir, saved_imports=None):
    """Write the diffs, the untracked list and README.md into ``snapshot_dir``."""
    snapshot_dir = os.path.abspath(snapshot_dir)
    for name, blob in (('staged.diff', state['staged']), ('unstaged.diff', state['unstaged'])):
        atomic_write(os.path.join(snapshot_dir, name), lambda f, b=blob: f.write(b))
    atomic_write_text(os.path.join(snapshot_dir, 'untracked.txt'), ''.join(f'{n}\n' for n in state['untracked']))
    untracked_note = (
        f'{len(state["untracked"])} untracked file(s) are listed in untracked.txt; their contents are not saved'
        ' (except the imported ones, in imports/).'
        if state['untracked']
        else 'There were no untracked files.'
    )
    readme = (
        '# Code snapshot\n\n'
        f'Taken from `{state["toplevel"]}` at commit `{state["commit"]}` (branch `{state["branch"]}`).\n\n'
        '- `staged.diff`: changes staged in the index (`git diff --cached HEAD`)\n'
        '- `unstaged.diff`: changes in the work tree not staged (`git diff`)\n'
        f'- `untracked.txt`: {untracked_note}\n'
        f'{_imports_note(saved_imports or {})}\n'
        'Restore the code in a clean clone of the repository (run from its top folder):\n\n'
        f'```\n{restore_command(state, snapshot_dir)}\n```\n'
    )
    atomic_write_text(os.path.join(snapshot_dir, 'README.md'), readme)


def archive_previous(work_dir, extra=()):
    """Move an earlier run's records (and ``extra`` names) into ``records_history/<its start time>/``."""
    names = [n for n in (CONFIG_FILE, ENV_FILE, SNAPSHOT_DIR, *extra) if os.path.exists(os.path.join(work_dir, n))]
    if not names:
        return None
    stamp = 'unknown'
    try:
        with open(os.path.join(work_dir, ENV_FILE), encoding='utf-8') as f:
            stamp = json.load(f).get('start_time', stamp)
    except (OSError, ValueError):
        pass
    base = os.path.join(work_dir, HISTORY_DIR, stamp.replace(':', '-'))
    target, n = base, 1
    while os.path.exists(target):
        n += 1
        target = f'{base}-{n}'
    os.makedirs(target)
    for name in names:
        os.replace(os.path.join(work_dir, name), os.path.join(target, name))
    return target


def environment_info(solver, resumed_from=None):
    """The JSON-able facts about this run's software, hardware and invocation."""
    import numpy
    import torch

    device = solver.device
    info = {
        'project': 'scepter_like',
        'version': __version__,
        'start_time': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
        'python': platform.python_version(),
        'torch': torch.__version__,
        'numpy': numpy.__version__,
        'cuda': torch.version.cuda,
        'platform': platform.platform(),
        'hostname': socket.gethostname(),
        'world_size': solver.world_size,
        'backend': solver.dist_info.backend if solver.dist_info else '',
        'device': str(device),
        'command': shlex.join([sys.executable, *sys.argv]),
        'cwd': os.getcwd(),
        'resumed_from': resumed_from,
        'toolkit': toolkit_state(),
    }
    if device.type == 'cuda':
        info['device_name'] = torch.cuda.get_device_name(device)
    if solver.lightning is not None:  # ENV.USE_PL: the loop is Lightning's
        info['lightning'] = lightning_version()
    return info


def lightning_version():
    """The version of the Lightning library a USE_PL run drives (imported already by then)."""
    from scepter_like.solver.lightning.library import import_lightning

    return import_lightning().__version__


def resolved_config(solver):
    """The whole config the solver runs (ENV too, when it was built from a bare SOLVER dict)."""
    from scepter_like.config import Config

    root = solver.cfg.root
    if root is solver.cfg:
        return Config({'ENV': solver.env_cfg.to_dict() if solver.env_cfg else {}, 'SOLVER': root.to_dict()})
    return root


def write_run_records(solver, resumed_from=None, code_snapshot=True, cwd=None):
    """Write config.yaml, env.json and (in a git work tree) code_snapshot/ into the solver's WORK_DIR."""
    work_dir = solver.work_dir
    previous = archive_previous(work_dir)
    info = environment_info(solver, resumed_from)
    if previous:
        info['previous_records'] = os.path.relpath(previous, work_dir)
    atomic_write_text(os.path.join(work_dir, CONFIG_FILE), resolved_config(solver).dump())
    try:
        state = git_state(cwd or os.getcwd())
    except GitError as e:
        state, info['git'] = None, {'note': f'git failed, no code snapshot: {e}'}
    else:
        if state is None:
            info['git'] = {'note': 'not inside a git work tree (or git is missing); no code snapshot'}
    snapshot_dir = os.path.join(work_dir, SNAPSHOT_DIR)
    saved = {}
    if code_snapshot:
        imports = untracked_imports(solver.cfg.root.get('IMPORTS'), state, cwd or os.getcwd())
        saved = save_imported_files(imports, snapshot_dir, state['toplevel'] if state else None)
        if saved:
            info['saved_imports'] = saved
    if state is not None:
        dirty = bool(state['staged'] or state['unstaged'] or state['untracked'])
        info['git'] = {k: state[k] for k in ('commit', 'branch', 'toplevel')}
        info['git']['dirty'] = dirty
        if code_snapshot:
            write_code_snapshot(state, snapshot_dir, saved)
            info['git']['restore'] = restore_command(state, os.path.abspath(snapshot_dir))
        else:
            info['git']['note'] = 'SOLVER.CODE_SNAPSHOT is false; no code snapshot'
    elif saved:
        readme = '# Code snapshot\n\nNot inside a git work tree: only the imported files are saved.\n\n'
        atomic_write_text(os.path.join(snapshot_dir, 'README.md'), readme + _imports_note(saved))
    atomic_write_text(os.path.join(work_dir, ENV_FILE), json.dumps(info, indent=2) + '\n')
    return info
