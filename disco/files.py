"""The files of a run folder: written whole or not at all, by one process.

``atomic_write`` writes a temporary file in the same folder, syncs it, gives it
a normal file's permissions and renames it over the target: a reader sees the
old file or the new one. ``FolderLock`` makes one process the writer of an
output folder (an ``fcntl`` lock held for the run, naming its holder to a second
process; the main lock also ``flock``s the folder), released when the process
ends however it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
import contextlib
import datetime
import errno
import fcntl
import glob
import hashlib
import json
import os
from pathlib import Path
import shutil
import socket
import tempfile
from typing import IO, Any

import filelock

LOCK_FILE = ".disco-lock"
OWNER_SUFFIX = ".owner"
_TMP_SUFFIX = ".tmp"
_CHUNK_BYTES = 1 << 20


def _current_umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


# Read once, at import (single-threaded then): setting the umask to read it
# would race with threads creating files later.
_UMASK = _current_umask()


def file_mode() -> int:
  """The permissions of a file created now: ``0666`` less the umask."""
  return 0o666 & ~_UMASK


def fsync_folder(folder: str | os.PathLike[str]) -> None:
  """Syncs ``folder``'s entries (a rename in it) to disk, where the platform
  allows it."""
  try:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError as e:  # some file systems cannot sync a folder
    if e.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
      raise
  finally:
    os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "wb", **open_kwargs
) -> Iterator[IO]:
  """Yields a temporary file beside ``path``; on a clean exit it is synced,
  given mode ``0666 & ~umask`` and renamed over ``path``; on an error it is
  deleted and ``path`` left as it was.

  Args:
    path: the file to write (its folder is created).
    mode: ``"wb"`` or ``"w"``.
    **open_kwargs: passed to ``open`` (e.g. ``newline=""``).
  """
  path = Path(path).expanduser()
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(
      prefix=f".{path.name}.", suffix=_TMP_SUFFIX, dir=path.parent
  )
  try:
    with os.fdopen(fd, mode, **open_kwargs) as f:
      yield f
      f.flush()
      os.fchmod(f.fileno(), file_mode())
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise
  for stale in path.parent.glob(f".{glob.escape(path.name)}.*{_TMP_SUFFIX}"):
    stale.unlink(missing_ok=True)  # of an earlier, interrupted write
  fsync_folder(path.parent)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
  """Writes ``data`` to ``path`` atomically (``atomic_write``)."""
  with atomic_write(path) as f:
    f.write(data)
  return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
  """Writes ``text`` (UTF-8) to ``path`` atomically (``atomic_write``)."""
  return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any, **dumps_kwargs) -> Path:
  """Writes ``data`` as indented, key-sorted JSON (unless ``dumps_kwargs`` say
  otherwise) to ``path`` atomically."""
  options = dict(indent=2, sort_keys=True, **dumps_kwargs)
  return write_text(path, json.dumps(data, **options) + "\n")


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig_kwargs):
  """Saves a matplotlib figure to ``path`` atomically (PNG unless
  ``format`` says otherwise)."""
  savefig_kwargs.setdefault("format", Path(path).suffix.lstrip(".") or "png")
  with atomic_write(path) as f:
    fig.savefig(f, **savefig_kwargs)
  return Path(path)


def append_line(path: str | os.PathLike[str], line: str) -> None:
  """Appends ``line`` (ending with a newline) to ``path`` in one ``write``, so
  concurrent readers see whole lines; a crash can cut the last line short, so a
  resumed run must rewrite the file whole."""
  data = line.encode("utf-8")
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode())
  try:
    written = os.write(fd, data)
    while written < len(data):  # a short write (a signal): write the rest
      written += os.write(fd, data[written:])
  finally:
    os.close(fd)


def file_digest(path: str | os.PathLike[str]) -> str:
  """The SHA-256 (hex) of the file at ``path``, read in 1 MiB chunks.

  Raises:
    OSError: the file cannot be read.
  """
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK_BYTES):
      digest.update(chunk)
  return digest.hexdigest()


def is_disk_full(error: BaseException) -> bool:
  """Whether ``error`` is an ``OSError`` for a full disk or quota."""
  return isinstance(error, OSError) and error.errno in (
      errno.ENOSPC,
      getattr(errno, "EDQUOT", errno.ENOSPC),
  )


# ---------------------------------------------------------------- locks ----


class FolderInUse(Exception):
  """Another process holds the lock of an output folder."""


def owner_text(owner: dict[str, Any] | None) -> str:
  """Who holds (or held) a ``FolderLock``, in words."""
  if not owner:
    return "another process (it did not record its name)"
  return (
      f"{owner.get('program', 'another program')} (pid {owner.get('pid')} "
      f"on host {owner.get('host')}, since {owner.get('since')})"
  )


class FolderLock:
  """The writer's lock of an output folder, held from ``acquire`` to ``release``
  or the process's end.

  Args:
    folder: the output folder (created).
    program: the holder's name, shown to a second process.
    name: the lock file's name (one per kind of writer).

  Raises:
    FolderInUse: (from ``acquire``) another process holds it (named).
  """

  def __init__(
      self, folder: str | os.PathLike[str], program: str, name: str = LOCK_FILE
  ):
    self.folder = Path(folder).expanduser()
    self.program = program
    self.path = self.folder / name
    self.owner_path = self.folder / (name + OWNER_SUFFIX)
    self._lock: filelock.BaseFileLock | None = None
    self._folder_fd: int | None = None
    # Who held the lock last without releasing it (``owner``'s form), as
    # ``acquire`` found it; None when the last holder released it.
    self.abandoned_by: dict[str, Any] | None = None

  @property
  def names(self) -> tuple[str, str]:
    """The lock's own files."""
    return self.path.name, self.owner_path.name

  def owner(self) -> dict[str, Any] | None:
    """Who recorded holding the lock (None if nobody did)."""
    try:
      owner = json.loads(self.owner_path.read_text())
    except (OSError, ValueError):
      return None
    return owner if isinstance(owner, dict) else None

  def _in_use(self) -> FolderInUse:
    return FolderInUse(
        f"{self.folder} is in use by {owner_text(self.owner())}: one "
        "process writes an output folder at a time; wait for it to end, "
        "or choose another output folder."
    )

  def _lock_folder(self) -> None:
    """``flock`` on the folder itself (main lock only), which cannot be deleted
    from under the run."""
    if self.path.name != LOCK_FILE:
      return
    fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise self._in_use() from None
    except OSError:  # a file system without folder locks: the file's alone
      os.close(fd)
      return
    self._folder_fd = fd

  def _unlock_folder(self) -> None:
    if self._folder_fd is not None:
      os.close(self._folder_fd)  # closing releases the flock
      self._folder_fd = None

  def acquire(self) -> FolderLock:
    self.folder.mkdir(parents=True, exist_ok=True)
    self._lock_folder()
    lock = filelock.FileLock(str(self.path), timeout=0)
    try:
      lock.acquire()
    except filelock.Timeout:
      self._unlock_folder()
      raise self._in_use() from None
    except BaseException:
      self._unlock_folder()
      raise
    self._lock = lock
    # An owner file left by a holder that is gone: it ended without
    # releasing the lock (killed, or aborted, e.g. out of host memory).
    self.abandoned_by = self.owner()
    write_json(
        self.owner_path,
        dict(
            program=self.program,
            pid=os.getpid(),
            host=socket.gethostname(),
            since=datetime.datetime.now(datetime.UTC).strftime(
                "%Y-%m-%d %H:%M:%S UTC"
            ),
        ),
    )
    return self

  def release(self) -> None:
    if self._lock is None:
      return
    with contextlib.suppress(OSError):
      self.owner_path.unlink()
    self._lock.release()
    self._lock = None
    self._unlock_folder()

  @property
  def held(self) -> bool:
    return self._lock is not None

  def __enter__(self) -> FolderLock:
    return self if self.held else self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()


def remove_entries(folder: str | os.PathLike[str], names: Iterable[str]):
  """Removes the entries ``names`` of ``folder``: files and links unlinked
  (targets left alone), sub-folders removed whole."""
  folder = Path(folder)
  for name in names:
    path = folder / name
    if path.is_dir() and not path.is_symlink():
      shutil.rmtree(path)
    else:
      path.unlink(missing_ok=True)
  fsync_folder(folder)
