"""Errors every part of ``disco`` raises, and how runs report them.

The command lines print each as one line with an exit status: ``UsageError``
(bad input) 2, ``Diverged`` 3, ``ResourceError`` (a full disk or exhausted
memory; ``resource_errors`` converts the raw errors) 1, ``Stopped`` (SIGINT or
SIGTERM) 130. Imports only the standard library (``disco.stopping`` relies on
it).
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import errno
import os
from pathlib import Path
from typing import Any


class UsageError(Exception):
  """Bad user input (exit status 2)."""


class Diverged(Exception):
  """Training diverged (non-finite values) beyond recovery (exit status
  ``DIVERGED_EXIT``)."""


DIVERGED_EXIT = 3
RESOURCE_EXIT = 1
INTERRUPTED_EXIT = 130


class ResourceError(Exception):
  """A full disk or exhausted device memory, named with how to continue (exit
  status ``RESOURCE_EXIT``)."""


class Stopped(KeyboardInterrupt):
  """Raised at a safe point after SIGINT or SIGTERM asked the launcher to stop
  (``check_stop``; exit status ``INTERRUPTED_EXIT``); the signal handler itself
  never raises."""


def one_line(message: Any) -> str:
  """Collapses a (possibly multi-line) message into a single line."""
  parts = [p.strip() for p in str(message).splitlines() if p.strip()]
  return " ".join(parts)


def resource_problem(error: BaseException) -> str | None:
  """``"disk"``, ``"memory"`` or ``"host memory"`` when ``error`` (or its cause)
  is a full disk, exhausted device memory or exhausted host memory
  (``MemoryError``); else None."""
  from disco import files  # here: keeps this module's import light

  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    text = str(error)
    if files.is_disk_full(error) or "No space left on device" in text:
      return "disk"
    if "RESOURCE_EXHAUSTED" in text:
      return "memory"
    if isinstance(error, MemoryError):
      return "host memory"
    error = error.__cause__ or error.__context__
  return None


def resource_message(error: BaseException, hint: str) -> str | None:
  """The one line for a full disk or an exhausted device or host memory
  (None for other errors); ``hint`` says how to continue."""
  problem = resource_problem(error)
  if problem == "disk":
    where = getattr(error, "filename", None)
    where = f" while writing {where}" if where else ""
    return (
        f"The disk is full (no space left on device{where}): free space on "
        f"it, then {hint}"
    )
  if problem == "host memory":
    return (
        "Out of host memory: lower the sizes (num_seeds, batch_size, "
        f"num_envs, the population, replay_capacity) or free memory, then {hint}"
    )
  if problem == "memory":
    detail = one_line(error).split("RESOURCE_EXHAUSTED:", 1)[-1].strip()
    return (
        "Out of device memory (RESOURCE_EXHAUSTED: "
        f"{detail[:160].rstrip(' .')}): lower the sizes (num_seeds, "
        "batch_size, num_envs, the population) or free the device, then "
        f"{hint}"
    )
  return None


# Shown of a name longer than the file system allows: its first characters.
_SHOWN_OF_A_LONG_NAME = 24


def name_too_long_message(error: BaseException) -> str | None:
  """The one line for a path the file system refuses as too long
  (``errno.ENAMETOOLONG`` in ``error`` or its causes): the path, which name is
  too long (or the whole path) and the limit; None for other errors."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
      break
    error = error.__cause__ or error.__context__
  else:
    return None
  if not error.filename:
    return (
        f"A path is longer than the file system allows ({one_line(error)}): "
        "choose shorter folder and file names."
    )
  path = Path(os.fsdecode(error.filename))
  name_max = _path_limit(path, "PC_NAME_MAX", 255)
  long_names = [p for p in path.parts if len(os.fsencode(p)) > name_max]
  if not long_names:
    path_max = _path_limit(path, "PC_PATH_MAX", 4096)
    return (
        f"The path {path} is longer than the file system allows "
        f"({len(os.fsencode(str(path)))} bytes; at most {path_max}): choose "
        "a shorter path."
    )
  shown = Path(
      *(
          f"{p[:_SHOWN_OF_A_LONG_NAME]}..." if p in long_names else p
          for p in path.parts
      )
  )
  sizes = ", ".join(f"{len(os.fsencode(p))} bytes" for p in long_names)
  return (
      f"The path {shown} has a name longer than the file system allows "
      f"({sizes}; at most {name_max} bytes per name): choose a shorter name."
  )


def _path_limit(path: Path, name: str, default: int) -> int:
  """``os.pathconf``'s ``name`` on the deepest existing folder of ``path``."""
  for folder in (path, *path.parents):
    if os.path.isdir(folder):
      try:
        return os.pathconf(folder, name)
      except (OSError, ValueError):
        break
  return default


@contextlib.contextmanager
def resource_errors(hint: str) -> Iterator[None]:
  """Turns a full disk or exhausted device memory into a ``ResourceError`` whose
  line ends with ``hint`` (how to continue)."""
  try:
    yield
  except (ResourceError, UsageError, Diverged, KeyboardInterrupt):
    raise
  except Exception as e:
    message = resource_message(e, hint)
    if message is None:
      raise
    raise ResourceError(message) from None
