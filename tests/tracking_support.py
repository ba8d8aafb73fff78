"""What the tracker tests share: the jobs they run, and reading back what a tracker wrote.

- ``run_train(argv)``, ``run_in_process(tool, argv)``: a tool's main in this process (its exit status).
- ``PINN_ARGS``: a six-step Poisson PINN with evaluations, field plots, best and last checkpoints.
- ``blob_job(folder)``: a YAML file of the small blob classifier (seconds) for resume runs.
- ``wandb_run(folder)``: an offline W&B run folder read back through W&B's own record schema.
- ``empty_mlflow_store(folder)``, ``copy_store(template, folder)``: SQLite stores for MLflowLogHook.
- ``unflatten(params)``: dotted parameters back to the nested config they came from.
- ``jsonl_history(work_dir)``: ``{'train/loss': [(step, value), ...]}`` of metrics.jsonl's clean history.
"""

import glob
import json
import os
import shutil
import struct
import subprocess
import time
import zlib
from collections import defaultdict

import yaml
from conftest import REPO, load_tool
from helpers import blob_solver_cfg, write_blobs

from scepter_like.cli import run
from scepter_like.utils.metrics_log import METRICS_FILE, read_metrics

PINN_CFG = os.path.join(REPO, 'configs', 'pinn', 'poisson2d.yaml')
PINN_ARGS = [
    '--cfg',
    PINN_CFG,
    'SOLVER.MAX_EPOCHS=6',
    'SOLVER.EVAL_INTERVAL=3',
    'SOLVER.OPTIMIZER_PHASES=[]',
    'SOLVER.TRAIN_DATA.SETS.pde.COUNT=200',
    'SOLVER.TRAIN_DATA.SETS.bc.COUNT=40',
    'SOLVER.EVAL_DATA.RESOLUTION=[21,21]',
    'SOLVER.EVAL_DATA.BATCH_SIZE=441',
    'SOLVER.TEST_DATA={NAME: GridPoints, GEOMETRY: {NAME: Rectangle, LOW: [0.0, 0.0], HIGH: [1.0, 1.0]},'
    ' RESOLUTION: [11, 11], BATCH_SIZE: 121}',
    'SOLVER.TRAIN_HOOKS.1.LOG_INTERVAL=2',
    'SOLVER.TRAIN_HOOKS.2.INTERVAL=3',
    'SOLVER.TRAIN_HOOKS.2.SAVE_LAST=true',
]


def run_in_process(tool, argv):
    """``tools/<tool>``'s ``main`` under the CLI's error contract, in this process; the exit status."""
    return run(load_tool(tool).main, [str(a) for a in argv])


def run_train(argv):
    return run_in_process('run_train.py', argv)


def tracker_word(hook):
    """The override that appends ``hook`` (a dict) to TRAIN_HOOKS."""
    return 'SOLVER.TRAIN_HOOKS+=' + json.dumps(hook)


def blob_job(folder):
    """A YAML file of the blob job: two train lines an epoch, an evaluation and a checkpoint every epoch."""
    hooks = [
        {'NAME': 'BackwardHook'},
        {'NAME': 'LogHook', 'LOG_INTERVAL': 2},
        {'NAME': 'CheckpointHook', 'SAVE_BEST_BY': '+accuracy'},
    ]
    cfg = blob_solver_cfg(write_blobs(folder / 'blobs.npz', n=64), folder / 'unused', hooks=hooks, MAX_EPOCHS=1)
    cfg['ENV']['NUM_THREADS'] = 1
    path = folder / 'blobs.yaml'
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def git_repo(folder):
    """Make ``folder`` a git work tree with one commit (runs started there record it); returns the commit."""
    env = {**os.environ, 'GIT_AUTHOR_NAME': 't', 'GIT_AUTHOR_EMAIL': 't@t', 'GIT_COMMITTER_NAME': 't'}
    env['GIT_COMMITTER_EMAIL'] = 't@t'
    (folder / 'README').write_text('runs\n')
    for cmd in (['init', '-q'], ['add', 'README'], ['commit', '-q', '-m', 'start']):
        subprocess.run(['git', *cmd], cwd=folder, env=env, check=True, capture_output=True)
    return subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=folder, capture_output=True, text=True).stdout.strip()


def empty_mlflow_store(folder):
    """An empty MLflow SQLite store in ``folder`` with MLflow's tables made (its migrations take seconds, so tests
    make one and copy it); returns its path."""
    from mlflow.tracking import MlflowClient

    path, cwd = folder / 'mlflow.db', os.getcwd()
    os.chdir(folder)  # the store's Default experiment keeps its artifacts in ./mlruns/ of this moment
    try:
        MlflowClient(tracking_uri=f'sqlite:///{path}').search_experiments()
    finally:
        os.chdir(cwd)
    return path


def copy_store(template, folder):
    """A copy of the store ``template`` in ``folder``; returns its URI."""
    shutil.copy(template, folder / 'mlflow.db')
    return f'sqlite:///{folder / "mlflow.db"}'


def jsonl_history(work_dir):
    """``{'<kind>/<name>': [(step, value), ...]}`` of the train / eval / test lines of metrics.jsonl (clean history),
    with each train line's step and data time."""
    out = defaultdict(list)
    for record in read_metrics(os.path.join(work_dir, METRICS_FILE)):
        kind = record['kind']
        if kind not in ('train', 'eval', 'test'):
            continue
        values = dict(record['values'])
        if kind == 'train':
            values.update(step_time=record['step_time'], data_time=record['data_time'])
        for name, value in values.items():
            out[f'{kind}/{name}'].append((record['step'], float(value)))
    return dict(out)


def unflatten(flat):
    """``{'A.B.0.C': v}`` -> ``{'A': {'B': [{'C': v}]}}`` (digit parts index lists)."""
    root = {}
    for key, value in flat.items():
        parts = key.split('.')
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return _lists(root)


def _lists(node):
    if not isinstance(node, dict):
        return node
    items = {k: _lists(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[str(i)] for i in range(len(items))]
    return items


# -- W&B offline runs ------------------------------------------------------------------------------
WANDB_BLOCK = 32768
WANDB_FULL, WANDB_LAST = 1, 4


def wandb_records(path):
    """The records of a W&B transaction log (``run-<id>.wandb``), decoded with W&B's protobuf ``Record``.

    The file is W&B's LevelDB-style log: a 7-byte header (``:W&B``, magic 0xBEE1, version),
    then 32 KiB blocks of chunks (crc32 of type and data, length, type: full, first, middle,
    last) that join into one serialized record each; a block's tail too short for a chunk
    header is padding.  A file still being written yields its complete records.
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, 'rb') as f:
        blob = f.read()
    ident, magic, _ = struct.unpack('<4sHB', blob[:7])
    assert (ident, magic) == (b':W&B', 0xBEE1), f'{path} is not a W&B run file'
    pos, parts = 7, []
    while pos + 7 <= len(blob):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        crc, length, kind = struct.unpack('<IHB', blob[pos : pos + 7])
        if left < 7 or (kind == 0 and length == 0):  # padding up to the next block
            pos += left
            continue
        if pos + 7 + length > len(blob):  # a chunk still being written
            return
        data = blob[pos + 7 : pos + 7 + length]
        assert zlib.crc32(data, zlib.crc32(bytes([kind]))) == crc, f'{path}: bad checksum at byte {pos}'
        parts.append(data)
        pos += 7 + length
        if kind in (WANDB_FULL, WANDB_LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b''.join(parts))
            parts = []
            yield record


def _key(update):
    return '.'.join(update.nested_key) if len(update.nested_key) else update.key


def finished_records(folder, timeout=60):
    """The records of the run in ``folder`` once its ``exit`` record is written.

    ``run.finish()`` returns before W&B's service has written the run's last block (it does
    before the process exits); a test reading the file in the same process waits for it.
    """
    (path,) = glob.glob(os.path.join(folder, 'run-*.wandb'))
    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof('record_type') == 'exit' for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def wandb_run(folder):
    """An offline run folder as ``{'id', 'name', 'group', 'config', 'history', 'summary', 'files', 'artifacts'}``.

    history: ``{key: [(step, value), ...]}`` of the logged keys (W&B's own ``_step`` etc. left out).
    """
    out = {'config': {}, 'history': defaultdict(list), 'summary': {}, 'files': [], 'artifacts': []}
    for record in finished_records(folder):
        kind = record.WhichOneof('record_type')
        if kind == 'run':
            out.update(id=record.run.run_id, name=record.run.display_name, group=record.run.run_group)
            out['config'].update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == 'config':
            out['config'].update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == 'history':
            for item in record.history.item:
                if not _key(item).startswith('_'):
                    out['history'][_key(item)].append((record.history.step.num, json.loads(item.value_json)))
        elif kind == 'summary':
            out['summary'].update({_key(u): json.loads(u.value_json) for u in record.summary.update})
        elif kind == 'files':
            out['files'] += [f.path for f in record.files.files]
        elif kind == 'artifact':
            a = record.artifact
            out['artifacts'].append(
                {
                    'type': a.type,
                    'name': a.name,
                    'aliases': list(a.aliases),
                    'paths': [c.path for c in a.manifest.contents],
                }
            )
    out['config'].pop('_wandb', None)
    out['history'] = dict(out['history'])
    return out


def wandb_folders(work_dir):
    """The offline run folders W&B wrote under ``work_dir/wandb/``, oldest first."""
    return sorted(glob.glob(os.path.join(work_dir, 'wandb', 'offline-run-*')))
