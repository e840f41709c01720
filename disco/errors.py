"""Errors every part of ``disco`` raises, and how runs report them.

* ``UsageError``: bad user input (a setting, a file, a name); the command
  lines print it as one line and exit with status 2;
* ``Diverged``: training went non-finite beyond recovery (status 3);
* ``ResourceError``: a full disk or an exhausted device memory, named with how
  to continue (status 1); ``resource_errors`` turns the raw errors of both
  into it;
* ``Stopped``: SIGINT or SIGTERM asked a run to stop (``disco.stopping``),
  raised at a safe point (status 130).
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
from typing import Any

from disco import files


class UsageError(Exception):
  """Bad user input; command lines print it as one line and exit with status 2."""


class Diverged(Exception):
  """Training diverged (non-finite values) beyond recovery; command lines print
  it as one line and exit with status ``DIVERGED_EXIT``."""


DIVERGED_EXIT = 3
RESOURCE_EXIT = 1
INTERRUPTED_EXIT = 130


class ResourceError(Exception):
  """The disk is full or the device's memory is exhausted; command lines print it
  as one line (naming the resource and how to continue) and exit with status
  ``RESOURCE_EXIT``."""


class Stopped(KeyboardInterrupt):
  """Raised at a safe point after SIGINT or SIGTERM asked the launcher to
  stop (``check_stop``); command lines exit with status ``INTERRUPTED_EXIT``.
  The signal handler itself never raises."""


def one_line(message: Any) -> str:
  """Collapses a (possibly multi-line) message into a single line."""
  parts = [p.strip() for p in str(message).splitlines() if p.strip()]
  return " ".join(parts)


def resource_problem(error: BaseException) -> str | None:
  """``"disk"`` or ``"memory"`` when ``error`` (or its cause) is a full
  disk or an exhausted device memory."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    text = str(error)
    if files.is_disk_full(error) or "No space left on device" in text:
      return "disk"
    if "RESOURCE_EXHAUSTED" in text:
      return "memory"
    error = error.__cause__ or error.__context__
  return None


def resource_message(error: BaseException, hint: str) -> str | None:
  """The one line for a full disk or exhausted device memory (None for
  other errors); ``hint`` says how to continue."""
  problem = resource_problem(error)
  if problem == "disk":
    where = getattr(error, "filename", None)
    where = f" while writing {where}" if where else ""
    return (
        f"The disk is full (no space left on device{where}): free space on "
        f"it, then {hint}"
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


@contextlib.contextmanager
def resource_errors(hint: str) -> Iterator[None]:
  """Turns a full disk or an exhausted device memory into a
  ``ResourceError`` whose one line ends with ``hint`` (how to continue)."""
  try:
    yield
  except (ResourceError, UsageError, Diverged, KeyboardInterrupt):
    raise
  except Exception as e:
    message = resource_message(e, hint)
    if message is None:
      raise
    raise ResourceError(message) from None
