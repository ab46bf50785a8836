"""Outputs that appear whole or not at all, one writer at a time, and nothing a kill leaves behind for good.

* ``atomic_write(path, data)``: one file, through a temporary sibling renamed into place.
* ``atomic_directory(path)``: a multi-file output (a kernel directory, a pack, a tuning plan). The
  caller writes the complete new contents into a private temporary sibling, which then replaces
  ``path`` in one ``renameat2(RENAME_EXCHANGE)`` (two renames where the file system lacks it).
* Both hold a lock on the output path (``filelock``, in the user cache, so output trees get no lock
  files) for the time of the write, so two cutegen processes writing the same output never mix
  files: the last one to finish wins whole.
* What a killed writer leaves (a ``.NAME.XXXXXXXX.tmp`` file, a ``.NAME.cutegen-new-XXXXXXXX`` or
  ``-old-`` directory) carries a name only cutegen gives, and the next writer of the same output
  removes it while it holds the lock (a live writer holds the lock, so whatever is left is dead).
* ``scratch_directory(prefix)``: a temporary working directory (a build's) that the next process to
  make one removes if its owner died: each is guarded by a lock its owner holds while it lives.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import CutegenError

LOCK_TIMEOUT_S = 900.0       # waiting longer than this for another writer of the same output is an error
_MKSTEMP_RANDOM = r"[a-z0-9_]{8}"   # tempfile's random part: 8 characters of [a-z0-9_]


def cache_root() -> Path:
    """cutegen's cache directory (``$CUTEGEN_CACHE``, else ``~/.cache/cutegen``), as cutegen.build uses it."""
    return Path(os.environ.get("CUTEGEN_CACHE") or Path.home() / ".cache" / "cutegen")


def ensure_directory(path: str | os.PathLike, what: str) -> Path:
    """``mkdir -p path`` with a one-line error naming ``what`` (an option) when it cannot be a directory."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CutegenError(f"{what}: {path} exists and is not a directory") from None
    except OSError as e:
        raise CutegenError(f"{what}: cannot create {path}: {e.strerror}") from None
    return path


def _lock_file(path: Path) -> Path:
    """The lock of one output path: a file named by the hash of its absolute path, in the cache."""
    key = hashlib.sha256(str(Path(os.path.abspath(path))).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    for root in (cache_root() / "locks", Path(tempfile.gettempdir()) / f"cutegen-locks-{os.getuid()}"):
        try:
            root.mkdir(parents=True, exist_ok=True)
            return root / f"{key}.lock"
        except OSError:
            continue
    raise CutegenError(f"{path}: no writable directory for its lock ({cache_root() / 'locks'})")


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock of output ``path`` (one writer at a time, across processes)."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(_lock_file(Path(path))), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise CutegenError(f"{path}: another cutegen process has been writing it for {timeout:.0f} s "
                           f"(lock {lock.lock_file})") from None
    try:
        yield
    finally:
        lock.release()


def _temp_file_pattern(name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(name)}\.{_MKSTEMP_RANDOM}\.tmp\Z")


def _temp_dir_pattern(name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(name)}\.cutegen-(?:new|old)-{_MKSTEMP_RANDOM}\Z")


def _is_cutegen_temp(entry: str) -> bool:
    """A temporary name cutegen gives some sibling (any name): ``.X.XXXXXXXX.tmp`` or ``.X.cutegen-new-...``."""
    return bool(re.fullmatch(rf"\..+\.(?:{_MKSTEMP_RANDOM}\.tmp|cutegen-(?:new|old)-{_MKSTEMP_RANDOM})", entry))


def leftovers(path: str | os.PathLike) -> list[Path]:
    """What killed writers of ``path`` left: temporary siblings, and (for a directory) temporary files
    and directories inside it. Only meaningful to act on while holding ``output_lock(path)``."""
    path = Path(path)
    out: list[Path] = []
    parent = path.parent
    if parent.is_dir():
        files, dirs = _temp_file_pattern(path.name), _temp_dir_pattern(path.name)
        out += sorted(parent / e for e in os.listdir(parent) if files.match(e) or dirs.match(e))
    if path.is_dir() and not path.is_symlink():
        out += sorted(path / e for e in os.listdir(path) if _is_cutegen_temp(e))
    return out


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def remove_leftovers(path: str | os.PathLike) -> list[Path]:
    """Remove what killed writers of ``path`` left (the caller holds ``output_lock(path)``)."""
    gone = leftovers(path)
    for p in gone:
        _remove(p)
    return gone


def atomic_write(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> None:
    """Write one file through a temporary sibling renamed into place, under the path's lock."""
    path = Path(path)
    with output_lock(path):
        for p in leftovers(path) if not path.is_dir() else []:
            _remove(p)
        _write_replace(path, data, mode)


def _write_replace(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _copy_existing(src: Path, dst: Path, link) -> None:
    """Carry the current contents into the new directory, minus temporaries. Files are copied, so that
    writing into one in the new directory (``write_text`` truncates the same inode) cannot touch the
    live directory; those ``link(relative path)`` accepts are hard-linked instead (files the caller
    never writes, such as a build folder's: no copy of megabytes for each write)."""
    def ignore(_dir, names):
        return [n for n in names if _is_cutegen_temp(n)]

    def link_or_copy(s, d):
        if link is not None and link(Path(os.path.relpath(s, src))):
            try:
                os.link(s, d)
                return d
            except OSError:
                pass
        return shutil.copy2(s, d)

    shutil.copytree(src, dst, symlinks=True, ignore=ignore, copy_function=link_or_copy, dirs_exist_ok=True)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, *, keep_existing: bool = True, link=None) -> Iterator[Path]:
    """Replace directory ``path`` whole: yields a private temporary sibling to fill; on a normal exit it
    takes ``path``'s place in one rename, on an exception it is removed and ``path`` is untouched.

    ``keep_existing``: the temporary directory starts as a copy of ``path``'s current contents, so the
    caller only writes what changes and deletes what is stale, and files it does not own (a build
    folder, say) survive; ``link(relative path) -> bool`` names files to hard-link rather than copy
    (the caller must then never write into them, only replace or delete them). Holds ``output_lock(path)``
    throughout and first removes what killed writers left. ``path`` naming an existing file (not a directory) is a one-line error."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CutegenError(f"{path}: exists and is not a directory (an output directory was expected)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CutegenError(f"{path}: a parent of it is a file, not a directory") from None
    except OSError as e:
        raise CutegenError(f"{path}: cannot create its parent directory: {e.strerror}") from None
    with output_lock(path):
        for p in leftovers(path):
            if p.parent == path.parent:          # inside ``path``: dropped by the copy below
                _remove(p)
        new = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.cutegen-new-", suffix=""))
        try:
            if keep_existing and path.is_dir():
                _copy_existing(path, new, link)
            os.chmod(new, 0o755)
            yield new
            if path.is_dir():
                if _exchange(new, path):
                    _remove(new)                  # ``new`` now names the old contents
                    return
                old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.cutegen-old-"))
                os.rmdir(old)
                os.rename(path, old)              # a kill here leaves no ``path``: the next run writes it
                os.rename(new, path)
                _remove(old)
            else:
                os.rename(new, path)
        finally:
            if new.exists():
                _remove(new)


@contextlib.contextmanager
def scratch_directory(prefix: str, root: str | os.PathLike | None = None) -> Iterator[Path]:
    """A temporary working directory ``root/<prefix>XXXXXXXX`` (``root`` default: the system's temporary
    directory) that does not outlive its process for long: it is removed on exit, and if the process is
    killed, the next ``scratch_directory`` of the same prefix removes it. Each has a lock file beside it
    (``<dir>.lock``) that its owner holds while it lives; a lock nobody holds marks a dead owner's
    directory. For builds: a killed nvcc run left 44-109 MB per build behind (issue 23)."""
    from filelock import FileLock, Timeout

    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    remove_dead_scratch(prefix, base)
    fd, lock_path = tempfile.mkstemp(dir=base, prefix=prefix, suffix=".lock")   # the lock exists before the dir
    os.close(fd)
    lock = FileLock(lock_path)
    lock.acquire()
    work = Path(lock_path[: -len(".lock")])
    try:
        work.mkdir()
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        lock.release()


def remove_dead_scratch(prefix: str, base: str | os.PathLike) -> list[Path]:
    """Remove the scratch directories of ``prefix`` under ``base`` whose owner died (their lock is free)."""
    from filelock import FileLock, Timeout

    gone = []
    for entry in sorted(Path(base).glob(f"{prefix}*.lock")):
        probe = FileLock(str(entry), timeout=0)
        try:
            probe.acquire()
        except Timeout:
            continue                               # its owner is alive
        except OSError:
            continue                               # not ours to judge (another account's, a vanished file)
        try:
            work = Path(str(entry)[: -len(".lock")])
            if work.exists():
                _remove(work)
                gone.append(work)
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
        finally:
            probe.release()
    return gone
