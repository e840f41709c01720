"""Writing files so that a crash never leaves a half-written one behind."""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import os
from pathlib import Path
import tempfile
from typing import IO


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "wb", **open_kwargs
) -> Iterator[IO]:
  """Opens a temporary file beside ``path``; on a clean exit it is flushed to
  disk and renamed over ``path``, on an error it is deleted.

  Args:
    path: the file to write (its folder is created).
    mode: ``"wb"`` or ``"w"``.
    **open_kwargs: passed to ``open`` (e.g. ``newline=""``).

  Yields:
    The open temporary file.
  """
  path = Path(path).expanduser()
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(
      prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
  )
  try:
    with os.fdopen(fd, mode, **open_kwargs) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise
