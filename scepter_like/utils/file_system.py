"""``scepter.modules.utils.file_system`` maps here: ``FS`` for local files.

scepter routes every path through a client chosen by its prefix (local, OSS, HTTP,
ModelScope).  This project reads and writes local files only: ``FS`` offers scepter's
calls on local paths (``file://`` too), and a remote path is a one-line ConfigError
instead of a silent local fallback.  ``FS`` holds no state; writes through
``put_to`` / ``put_object`` are atomic (a temporary file in the same folder, then
``os.replace``), so a crash never leaves a half-written file behind.
"""

import contextlib
import logging
import os
import re
import shutil

from scepter_like.errors import ConfigError, DataError

__all__ = ['FS', 'DATA_FS', 'MODEL_FS', 'FileSystem', 'IoBytes', 'IoString']

_SCHEME = re.compile(r'^([A-Za-z][A-Za-z0-9+.-]*)://')
LOCAL_CLIENTS = ('LocalFs',)


def check_local_file_system(entries, where):
    """scepter's ``FILE_SYSTEM`` (one client config, a list of them, or none) may name the local client only: a
    ConfigError naming ``where`` otherwise, before a run that would look for its files on local disk."""
    for entry in entries if isinstance(entries, list) else [] if entries is None else [entries]:
        name = entry.get('NAME') if hasattr(entry, 'get') else entry
        if name not in LOCAL_CLIENTS:
            raise ConfigError(
                f'{where}: {name!r} is not supported; scepter_like uses local files only (NAME: LocalFs or leave'
                ' FILE_SYSTEM out; copy remote data to a local folder first)'
            )


class IoString(str):
    """A path that also works as ``with FS.get_from(...) as local_path``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class IoBytes(bytes):
    """File contents that also work as ``with FS.get_object(...) as data``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def to_local(path):
    """``path`` as a local path; a remote prefix (``oss://``, ``http://``, ...) is a ConfigError."""
    path = os.fspath(path)
    match = _SCHEME.match(path)
    if match is None:
        return path
    if match.group(1) == 'file':
        return path[len('file://') :]
    raise ConfigError(
        f'{path}: remote paths ({match.group(1)}://) are not supported; scepter_like reads and writes local'
        ' files only: copy the file to a local folder and give that path'
    )


def _temporary_beside(path):
    """A hidden temporary name in ``path``'s folder that keeps its extension (image writers read it)."""
    folder, name = os.path.split(os.path.abspath(path))
    stem, ext = os.path.splitext(name)
    return os.path.join(folder, f'.{stem}.tmp-{os.getpid()}{ext}')


@contextlib.contextmanager
def _atomic_target(path):
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = _temporary_beside(path)
    try:
        yield tmp
        if os.path.exists(tmp):
            with open(tmp, 'rb+') as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class FileSystem:
    """scepter's file-system calls on local paths; it is its own (only) client."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    # -- clients ----------------------------------------------------------------------------
    def init_fs_client(self, cfg=None, logger=None, overwrite=True):
        """Accept scepter's ``FILE_SYSTEM`` entry when it names the local client; others are a ConfigError."""
        check_local_file_system(cfg, 'FILE_SYSTEM')
        return self.get_prefix()

    def get_fs_client(self, target_path, safe=False):
        to_local(target_path)
        return self

    def get_prefix(self):
        return os.path.abspath(os.curdir)

    def is_local_client(self, target_path):
        to_local(target_path)
        return True

    # -- queries ----------------------------------------------------------------------------
    def exists(self, target_path):
        return os.path.exists(to_local(target_path))

    def isfile(self, target_path):
        return os.path.isfile(to_local(target_path))

    def isdir(self, target_path):
        return os.path.isdir(to_local(target_path))

    def size(self, target_path):
        path = to_local(target_path)
        return os.path.getsize(path) if os.path.exists(path) else -1

    def walk_dir(self, target_dir, recurse=True):
        """Every file and folder under ``target_dir`` (only its own entries without ``recurse``)."""
        for root, dirs, files in os.walk(to_local(target_dir)):
            for name in files + dirs:
                yield os.path.join(root, name)
            if not recurse:
                return

    def map_to_local(self, target_path):
        """(local path, is temporary): a local path is itself, never a temporary copy."""
        return os.path.abspath(to_local(target_path)), False

    def convert_to_local_path(self, target_path):
        return self.map_to_local(target_path)[0]

    def get_url(self, target_path, set_public=False, skip_check=False, lifecycle=0):
        return to_local(target_path)

    # -- reading ----------------------------------------------------------------------------
    def _existing(self, target_path):
        path = to_local(target_path)
        if not os.path.exists(path):
            raise DataError(f'{path}: file not found; check the path')
        return path

    def open(self, target_path, mode='r', **kwargs):
        """Builtin ``open`` on the local path."""
        return open(to_local(target_path), mode, **kwargs)

    def get_object(self, target_path):
        """The file's bytes."""
        with open(self._existing(target_path), 'rb') as f:
            return IoBytes(f.read())

    def get_from(self, target_path, local_path=None, wait_finish=False):
        """The file's local path (a copy at ``local_path`` when given)."""
        return IoString(self.get_object_to_local_file(target_path, local_path, wait_finish))

    def get_object_to_local_file(self, target_path, local_path=None, wait_finish=False):
        source = self._existing(target_path)
        if local_path is None or os.path.abspath(local_path) == os.path.abspath(source):
            return source
        self.put_object_from_local_file(source, local_path)
        return local_path

    def get_dir_to_local_dir(self, target_path, local_path=None, wait_finish=False, **kwargs):
        source = self._existing(target_path)
        if local_path is not None and os.path.abspath(local_path) != os.path.abspath(source):
            shutil.copytree(source, local_path, dirs_exist_ok=True)
            return IoString(local_path)
        return IoString(source)

    # -- writing ----------------------------------------------------------------------------
    def make_dir(self, target_dir):
        """True when ``target_dir`` is (now) a folder; False when a file is in the way."""
        path = to_local(target_dir)
        if os.path.isfile(path):
            return False
        os.makedirs(path, exist_ok=True)
        return True

    @contextlib.contextmanager
    def put_to(self, target_path):
        """``with FS.put_to(path) as local: write(local)``: ``path`` appears whole when the block ends."""
        with _atomic_target(to_local(target_path)) as tmp:
            yield tmp

    def put_object(self, local_data, target_path):
        """Write ``local_data`` (bytes or str) to ``target_path`` atomically."""
        if not isinstance(local_data, (bytes, str)):
            raise DataError(f'{target_path}: put_object writes bytes or str, got {type(local_data).__name__}')
        with self.put_to(target_path) as tmp:
            with open(tmp, 'wb') as f:
                f.write(local_data.encode('utf-8') if isinstance(local_data, str) else local_data)
        return True

    def put_object_from_local_file(self, local_path, target_path):
        source = self._existing(local_path)
        target = to_local(target_path)
        if os.path.abspath(source) != os.path.abspath(target):
            with self.put_to(target) as tmp:
                shutil.copyfile(source, tmp)
        return True

    def put_dir_from_local_dir(self, local_dir, target_dir, multi_thread=False):
        source, target = to_local(local_dir), to_local(target_dir)
        if os.path.abspath(source) != os.path.abspath(target):
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        return True

    def make_link(self, target_link_path, target_path):
        """Point the symbolic link ``target_link_path`` at ``target_path`` (replacing an old link)."""
        link, target = to_local(target_link_path), to_local(target_path)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.abspath(target), link)
        return True

    def remove(self, target_path):
        path = to_local(target_path)
        if os.path.isfile(path) or os.path.islink(path):
            os.remove(path)
        return True

    def delete_object(self, target_path):
        return self.isfile(target_path) and self.remove(target_path)

    def get_logging_handler(self, target_logging_path):
        path = to_local(target_logging_path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return logging.FileHandler(path, encoding='utf-8')

    def __repr__(self):
        return 'FS(local files)'


FS = FileSystem()
DATA_FS = FS
MODEL_FS = FS
