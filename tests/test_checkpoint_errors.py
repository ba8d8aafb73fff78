"""Bad checkpoint input through tools/run_train.py: one ``error:`` line, exit status 2, and
no file changed (the run's log only gains lines).  A checkpoint that carries pickled code
is refused without running it."""

import errno
import os
import shutil

import pytest
import torch
import yaml
from conftest import REPO, run_cli
from helpers import blob_solver_cfg, build_solver, load_run_train, write_blobs

from scepter_like.cli import run
from scepter_like.solver.hooks import HOOKS, Hook
from scepter_like.utils.checkpoint import save_safetensors


def snapshot(root):
    """Every file under ``root`` but the log and the WORK_DIR lock (which names its last holder): mtime and bytes."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if name not in ('std_log.txt', '.run.lock'):
                with open(path, 'rb') as f:
                    out[os.path.relpath(path, root)] = (os.stat(path).st_mtime_ns, f.read())
    return out


class Marker:
    """Unpickling this calls ``open(path, 'w')``: it creates the file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    """A finished run with checkpoints, its config file, and a set of bad files beside it."""
    tmp = tmp_path_factory.mktemp('ckpt_errors')
    npz = write_blobs(tmp / 'blobs.npz')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}]
    cfg = blob_solver_cfg(npz, tmp / 'run', hooks=hooks, MAX_EPOCHS=1)
    solver = build_solver(cfg)
    solver.solve()
    solver.close()
    (tmp / 'job.yaml').write_text(yaml.safe_dump(cfg))
    good = tmp / 'run' / 'checkpoints' / 'checkpoint-epoch-1.pth'
    bad = tmp / 'bad'
    bad.mkdir()
    data = good.read_bytes()
    (bad / 'truncated.pth').write_bytes(data[: len(data) // 2])
    (bad / 'garbage.safetensors').write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": not json}' + bytes(64))
    save_safetensors(solver.unwrapped_model.state_dict(), bad / 'weights.safetensors')
    other_cfg = blob_solver_cfg(npz, tmp / 'other', hooks=hooks, MAX_EPOCHS=1)
    other_cfg['SOLVER']['MODEL']['BACKBONE']['HIDDEN_DIMS'] = [24]
    build_solver(other_cfg).save_checkpoint(str(bad / 'other_model.pth'))
    ckpt = torch.load(good, weights_only=True)
    torch.save(dict(ckpt, solver=Marker(str(tmp / 'pwned'))), bad / 'code.pth')
    torch.save(Marker(str(tmp / 'proof')), bad / 'proof.pth')
    return tmp


def expect_one_error_line(tmp, capsys, overrides, match):
    before, log = snapshot(tmp), (tmp / 'run' / 'std_log.txt').read_text()
    status = run(load_run_train(), ['--cfg', str(tmp / 'job.yaml'), *overrides])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count('\n') == 1 and err.startswith('error: ') and 'Traceback' not in err, err
    assert match in err, err
    assert snapshot(tmp) == before
    assert (tmp / 'run' / 'std_log.txt').read_text().startswith(log)
    return err


@pytest.mark.parametrize(
    'override, match',
    [
        ('SOLVER.RESUME_FROM={tmp}/run/checkpoints/nope.pth', 'does not exist'),
        ('SOLVER.RESUME_FROM={tmp}/bad/other_model.pth', 'mis-shaped: backbone.0.weight (24, 8) vs model (16, 8)'),
        ('SOLVER.RESUME_FROM={tmp}/bad/truncated.pth', 'truncated.pth is not a readable checkpoint'),
        ('SOLVER.RESUME_FROM={tmp}/bad/weights.safetensors', 'set MODEL.PRETRAINED_MODEL'),
        ('SOLVER.MODEL.PRETRAINED_MODEL={tmp}/bad/garbage.safetensors', 'is not a valid .safetensors file'),
        ('SOLVER.MODEL.PRETRAINED_MODEL={tmp}/bad/other_model.pth', 'do not fit the model'),
    ],
)
def test_bad_checkpoint_input_is_one_error_line_and_changes_nothing(setup, capsys, override, match):
    expect_one_error_line(setup, capsys, [override.format(tmp=setup)], match)


def test_checkpoint_with_pickled_code_is_refused_and_runs_nothing(setup):
    # the crafted file is dangerous: an unsafe load runs its code
    torch.load(setup / 'bad' / 'proof.pth', weights_only=False)
    assert (setup / 'proof').exists()
    before = snapshot(setup)
    res = run_cli('run_train.py', '--cfg', setup / 'job.yaml', f'SOLVER.RESUME_FROM={setup}/bad/code.pth', cwd=REPO)
    assert res.returncode == 2
    assert res.stderr.startswith('error: refused to load') and res.stderr.count('\n') == 1, res.stderr
    assert not (setup / 'pwned').exists()
    assert snapshot(setup) == before


@HOOKS.register_class()
class FullDiskHook(Hook):
    """From epoch 2 on, the temp file of ``checkpoint-epoch-2.pth`` is a link to /dev/full: the write fails
    inside torch.save's C++ writer with ENOSPC, as on a full disk."""

    para_dict = {}

    def before_epoch(self, solver):
        if solver.progress.epoch == 1:
            folder = os.path.join(solver.work_dir, 'checkpoints')
            os.symlink('/dev/full', os.path.join(folder, f'.tmp.checkpoint-epoch-2.pth.{os.getpid()}'))


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full')
@pytest.mark.parametrize('async_save', [False, True])
def test_a_full_disk_during_a_checkpoint_write_is_one_error_line(tmp_path, capsys, monkeypatch, async_save):
    """torch.save's raw C++ error (exit 1) is one error line naming the file and the space left, exit 2; the temp
    file goes, the earlier checkpoint and ``latest`` stay."""
    npz = write_blobs(tmp_path / 'blobs.npz')
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook', 'ASYNC_SAVE': async_save}, {'NAME': 'FullDiskHook'}]
    cfg = blob_solver_cfg(npz, tmp_path / 'run', hooks=hooks, MAX_EPOCHS=3)
    (tmp_path / 'job.yaml').write_text(yaml.safe_dump(cfg))
    folder = tmp_path / 'run' / 'checkpoints'
    real = shutil.disk_usage

    def disk_usage(path):  # the disk is full while the failed temp file is there; 3 MiB once it is gone
        full = any(name.startswith('.tmp.') for name in os.listdir(folder))
        return real(path)._replace(free=100 * 1024 if full else 3 * 2**20)

    monkeypatch.setattr(shutil, 'disk_usage', disk_usage)
    status = run(load_run_train(), ['--cfg', str(tmp_path / 'job.yaml')])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count('\n') == 1 and 'Traceback' not in err, err
    assert err.startswith(
        f'error: writing {folder / "checkpoint-epoch-2.pth"} failed: no space left on the device (3 MiB free in'
        f' {folder})'
    ), err
    assert sorted(os.listdir(folder)) == ['checkpoint-epoch-1.pth', 'latest']
    assert (folder / 'latest').read_text().strip() == 'checkpoint-epoch-1.pth'
    assert torch.load(folder / 'checkpoint-epoch-1.pth', weights_only=True)['solver']['total_iter'] == 6


def test_a_refused_write_or_commit_leaves_nothing_and_names_the_file(tmp_path, monkeypatch):
    from scepter_like.errors import CheckpointError
    from scepter_like.utils.checkpoint import atomic_torch_save, atomic_write_text

    def fsync(fd, error=errno.ENOSPC):
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(os, 'fsync', fsync)
    with pytest.raises(CheckpointError, match=r'writing .*a.pth failed: no space left on the device \(\d+ MiB free'):
        atomic_torch_save({'x': torch.zeros(3)}, tmp_path / 'a.pth')
    monkeypatch.setattr(os, 'fsync', lambda fd: fsync(fd, errno.EDQUOT))
    with pytest.raises(CheckpointError, match='writing .*latest failed: the disk quota is exceeded'):
        atomic_write_text(str(tmp_path / 'latest'), 'a.pth\n')
    monkeypatch.setattr(os, 'fsync', lambda fd: fsync(fd, errno.EIO))
    with pytest.raises(OSError) as info:  # not a full disk: as it was
        atomic_write_text(str(tmp_path / 'latest'), 'a.pth\n')
    assert not isinstance(info.value, CheckpointError)
    assert os.listdir(tmp_path) == []
