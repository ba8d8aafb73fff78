"""Run records: env.json, the code snapshot that `git apply`s back, history of earlier records."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.about import PACKAGE_DIR, __version__
from scepter_like.solver.run_records import toolkit_state
from scepter_like.utils.imports import import_user_modules

pytestmark = pytest.mark.skipif(shutil.which('git') is None, reason='git is not installed')

GIT_ENV = {
    'GIT_AUTHOR_NAME': 't',
    'GIT_AUTHOR_EMAIL': 't@example.com',
    'GIT_COMMITTER_NAME': 't',
    'GIT_COMMITTER_EMAIL': 't@example.com',
    'GIT_CONFIG_GLOBAL': os.devnull,
    'GIT_CONFIG_NOSYSTEM': '1',
}


def run(cfg):
    """Records are written when a run starts: set up, solve (a short blob run), close."""
    solver = build_solver(cfg)
    solver.solve()
    solver.close()
    return solver


def git(cwd, *args):
    env = dict(os.environ, **GIT_ENV)
    return subprocess.run(['git', *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def tree_files(root):
    """{relative path: bytes} of every file outside .git."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != '.git']
        for name in files:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = open(path, 'rb').read()
    return out


@pytest.fixture
def dirty_repo(tmp_path):
    """A repo with a commit, then staged and unstaged edits, a new staged file, a deletion, an untracked file."""
    repo = tmp_path / 'repo'
    (repo / 'pkg').mkdir(parents=True)
    (repo / 'pkg' / 'model.py').write_text('a = 1\nb = 2\n')
    (repo / 'gone.txt').write_text('to be deleted\n')
    (repo / 'blob.bin').write_bytes(bytes(range(256)))
    (repo / '.gitignore').write_text('work/\n')
    git(repo, 'init', '-q')
    git(repo, 'add', '.')
    git(repo, 'commit', '-qm', 'base')
    (repo / 'pkg' / 'model.py').write_text('a = 10\nb = 2\n')  # staged edit ...
    (repo / 'new_staged.py').write_text('NEW = True\n')
    (repo / 'blob.bin').write_bytes(bytes(range(255, -1, -1)))
    git(repo, 'add', 'pkg/model.py', 'new_staged.py', 'blob.bin')
    (repo / 'pkg' / 'model.py').write_text('a = 10\nb = 20\n')  # ... then an unstaged one on top
    (repo / 'gone.txt').unlink()
    (repo / 'scratch.txt').write_text('untracked\n')
    return repo


def test_code_snapshot_restores_the_work_tree_with_git_apply(tmp_path, dirty_repo, monkeypatch):
    npz = write_blobs(tmp_path / 'blobs.npz')
    work = dirty_repo / 'work' / 'run'
    monkeypatch.chdir(dirty_repo / 'pkg')  # a subfolder of the work tree: the snapshot covers the whole tree
    run(blob_solver_cfg(npz, work))

    env = json.loads((work / 'env.json').read_text())
    commit = git(dirty_repo, 'rev-parse', 'HEAD').strip()
    assert env['git']['commit'] == commit and env['git']['dirty'] is True
    assert env['world_size'] == 1 and env['device'] == 'cpu' and env['project'] == 'scepter_like'
    assert env['torch'] and env['python'] and env['hostname'] and env['version']
    snap = work / 'code_snapshot'
    assert (snap / 'untracked.txt').read_text().split() == ['scratch.txt']  # work/ is ignored
    readme = (snap / 'README.md').read_text()
    assert env['git']['restore'] in readme

    clone = tmp_path / 'clone'
    git(tmp_path, 'clone', '-q', str(dirty_repo), str(clone))
    subprocess.run(env['git']['restore'], shell=True, cwd=clone, check=True, capture_output=True)

    expected = {k: v for k, v in tree_files(dirty_repo).items() if not k.startswith('work') and k != 'scratch.txt'}
    assert tree_files(clone) == expected
    # staged changes come back staged: the index matches the original index
    assert git(clone, 'diff', '--cached', '--name-status') == git(dirty_repo, 'diff', '--cached', '--name-status')


def test_the_toolkits_own_checkout_is_recorded_by_commit_and_dirty_flag(tmp_path, dirty_repo, monkeypatch):
    # env.json had only "version": "0.1.0" for an editable checkout at any commit, edited or not
    monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path))  # tmp_path may sit inside some repo
    package = dirty_repo / 'pkg'
    state = toolkit_state(str(package))
    assert state == {
        'version': __version__,
        'path': str(package),
        'commit': git(dirty_repo, 'rev-parse', 'HEAD').strip(),
        'dirty': True,
    }
    git(dirty_repo, 'add', '-A')
    git(dirty_repo, 'commit', '-qm', 'clean')
    assert toolkit_state(str(package))['dirty'] is False
    (dirty_repo / 'gone.txt').write_text("a change outside the package is not the toolkit's\n")
    assert toolkit_state(str(package))['dirty'] is False
    (package / 'new.py').write_text('N = 1\n')  # an untracked file of the package is
    assert toolkit_state(str(package))['dirty'] is True
    outside = tmp_path / 'unpacked'
    outside.mkdir()
    state = toolkit_state(str(outside))  # not a git checkout: the version alone
    assert state['version'] == __version__ and 'commit' not in state and 'not a git checkout' in state['note']


def test_imported_files_that_git_does_not_track_are_saved(tmp_path, dirty_repo, monkeypatch):
    npz = write_blobs(tmp_path / 'blobs.npz')
    (dirty_repo / 'my_ext.py').write_text('X = 1\n')  # untracked, inside the work tree
    helper = tmp_path / 'elsewhere' / 'helper.py'  # outside it
    helper.parent.mkdir()
    helper.write_text('Y = 2\n')
    work = dirty_repo / 'work' / 'run'
    monkeypatch.chdir(dirty_repo)
    cfg = blob_solver_cfg(npz, work)
    cfg['IMPORTS'] = ['my_ext.py', 'pkg/model.py', str(helper)]  # pkg/model.py is tracked: the diffs restore it
    run(cfg)
    imports = work / 'code_snapshot' / 'imports'
    assert sorted(str(p.relative_to(imports)) for p in imports.rglob('*') if p.is_file()) == [
        'external/helper.py',
        'my_ext.py',
    ]
    assert (imports / 'my_ext.py').read_text() == 'X = 1\n' and (
        imports / 'external' / 'helper.py'
    ).read_text() == 'Y = 2\n'
    env = json.loads((work / 'env.json').read_text())
    assert env['saved_imports'] == {
        'imports/my_ext.py': os.path.realpath(dirty_repo / 'my_ext.py'),
        'imports/external/helper.py': os.path.realpath(helper),
    }
    readme = (work / 'code_snapshot' / 'README.md').read_text()
    assert '`imports/my_ext.py`' in readme and '`imports/external/helper.py`' in readme


def test_records_outside_git_history_and_opt_out(tmp_path, monkeypatch):
    npz = write_blobs(tmp_path / 'blobs.npz')
    outside = tmp_path / 'outside'
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path))  # tmp_path may sit inside some repo
    work = tmp_path / 'run'
    cfg = blob_solver_cfg(npz, work)
    run(cfg)
    env = json.loads((work / 'env.json').read_text())
    assert 'not inside a git work tree' in env['git']['note'] and 'commit' not in env['git']
    assert env['toolkit']['version'] == env['version'] and env['toolkit']['path'] == PACKAGE_DIR  # its own code
    assert not (work / 'code_snapshot').exists()
    first = yaml.safe_load((work / 'config.yaml').read_text())
    assert first['SOLVER']['CODE_SNAPSHOT'] is True and first['ENV']['SEED'] == 0  # defaults filled

    # a second run in the same WORK_DIR moves the first one's records aside
    cfg['SOLVER']['MAX_EPOCHS'] = 3
    run(cfg)
    env2 = json.loads((work / 'env.json').read_text())
    old = work / env2['previous_records']
    assert yaml.safe_load((old / 'config.yaml').read_text()) == first
    assert json.loads((old / 'env.json').read_text()) == env
    assert yaml.safe_load((work / 'config.yaml').read_text())['SOLVER']['MAX_EPOCHS'] == 3


def test_an_imported_package_outside_git_keeps_its_layout_and_parent_packages(tmp_path, monkeypatch):
    # saved flat before (external/__init__.py, external/a.py; a second package's external/2-__init__.py), and
    # snap_pkg/__init__.py, which importing snap_pkg.sub runs, not at all
    npz = write_blobs(tmp_path / 'blobs.npz')
    src = tmp_path / 'src'
    (src / 'snap_pkg' / 'sub').mkdir(parents=True)
    for rel, text in (('__init__.py', 'TOP = 1\n'), ('sub/__init__.py', 'SUB = 1\n'), ('sub/a.py', 'A = 1\n')):
        (src / 'snap_pkg' / rel).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path))  # tmp_path may sit inside some repo
    monkeypatch.syspath_prepend(str(src))
    work = tmp_path / 'run'
    cfg = blob_solver_cfg(npz, work)
    cfg['IMPORTS'] = ['snap_pkg.sub']
    try:
        import_user_modules(cfg['IMPORTS'])  # as a run's command does
        run(cfg)
    finally:
        for name in ('snap_pkg.sub', 'snap_pkg'):
            sys.modules.pop(name, None)
    saved = json.loads((work / 'env.json').read_text())['saved_imports']
    assert saved == {
        f'imports/external/snap_pkg/{rel}': os.path.realpath(src / 'snap_pkg' / rel)
        for rel in ('sub/__init__.py', 'sub/a.py', '__init__.py')
    }
    for rel in saved:  # external/ on PYTHONPATH imports snap_pkg.sub again
        assert (work / 'code_snapshot' / rel).read_bytes() == open(saved[rel], 'rb').read()
    assert 'PYTHONPATH' in (work / 'code_snapshot' / 'README.md').read_text()


def test_code_snapshot_opt_out(tmp_path, dirty_repo, monkeypatch):
    npz = write_blobs(tmp_path / 'blobs.npz')
    work = tmp_path / 'run'
    monkeypatch.chdir(dirty_repo)
    run(blob_solver_cfg(npz, work, CODE_SNAPSHOT=False))
    env = json.loads((work / 'env.json').read_text())
    assert env['git']['commit'] == git(dirty_repo, 'rev-parse', 'HEAD').strip()
    assert 'CODE_SNAPSHOT is false' in env['git']['note']
    assert not (work / 'code_snapshot').exists()
