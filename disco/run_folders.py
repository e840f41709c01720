"""Run folders: claimed by one process (``claim_output_dir``) and opened for one
kind of run (``open_run_folder``), whose marker ``.disco-run`` names it;
``overwrite=True`` removes only what that kind writes (``RunKind.owns``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import datetime
import fnmatch
import json
import math
import os
from pathlib import Path
import re
import sys
from typing import Any

import jax
from ml_collections import config_dict
import numpy as np

from disco import errors
from disco import files


def output_dir(requested: str, prefix: str) -> Path:
  """``requested`` (``~`` expanded), or ``runs/<prefix>-<UTC time>[-k]``."""
  if requested:
    out = Path(requested).expanduser()
  else:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", prefix)
    out = Path("runs") / f"{safe}-{stamp}"
    suffix = 1
    while out.exists():
      suffix += 1
      out = Path("runs") / f"{safe}-{stamp}-{suffix}"
  if out.exists() and not out.is_dir():
    raise errors.UsageError(f"output_dir {out} exists and is not a folder.")
  return out


def make_dir(path: Path) -> Path:
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise errors.UsageError(f"Cannot create output_dir {path}: {e}.") from None
  return path


def to_jsonable(x: Any) -> Any:
  """Plain JSON values from configs, NumPy and JAX arrays and scalars (e.g.
  gymnax's environment parameters), paths and containers."""
  if isinstance(x, config_dict.ConfigDict):
    x = x.to_dict()
  if isinstance(x, (np.ndarray, jax.Array)):
    return to_jsonable(np.asarray(x).tolist())
  if isinstance(x, Mapping):
    return {str(k): to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [to_jsonable(v) for v in x]
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  if isinstance(x, Path):
    return str(x)
  return x


def setting_differences(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    ignore: Sequence[str] = (),
) -> list[str]:
  """``key: saved X, now Y`` for each setting that differs between two
  records (compared as JSON, so tuples equal lists), a nested one named by
  its dotted path (``rule_settings.rule_kwargs.meta_learning_rate``), an
  absent one shown as ``'<absent>'``; top-level keys in ``ignore`` are not
  compared."""
  lines = []

  def walk(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str) -> None:
    for key in sorted(set(a) | set(b)):
      x, y = a.get(key, "<absent>"), b.get(key, "<absent>")
      if x == y or (not prefix and key in ignore):
        continue
      if isinstance(x, Mapping) and isinstance(y, Mapping):
        walk(x, y, f"{prefix}{key}.")
      else:
        lines.append(f"{prefix}{key}: saved {x!r}, now {y!r}")

  walk(*(_comparable(to_jsonable(r)) for r in (saved, current)), "")
  return lines


def _comparable(x: Any) -> Any:
  """JSON values with tuples as lists and non-finite floats as their names,
  so that equal settings compare equal (``nan == nan``)."""
  if isinstance(x, Mapping):
    return {k: _comparable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_comparable(v) for v in x]
  if isinstance(x, float) and not math.isfinite(x):
    return repr(x)
  return x


def write_json(path: Path, data: Any) -> None:
  """Writes ``data`` (``to_jsonable``) as JSON, atomically."""
  files.write_json(path, to_jsonable(data))


def claim_output_dir(
    out: Path,
    program: str,
    name: str = files.LOCK_FILE,
    *,
    warn: bool = True,
) -> files.FolderLock:
  """Creates ``out`` and takes its writer's lock (held until released or the
  process ends); with ``warn``, ``warn_abandoned`` names the last holder when it
  ended without releasing it (killed, or aborted e.g. out of host memory).

  Raises:
    UsageError: another process holds it (named), or the folder cannot be
      created.
  """
  try:
    lock = files.FolderLock(out, program, name).acquire()
  except files.FolderInUse as e:
    raise errors.UsageError(str(e)) from None
  except OSError as e:
    raise errors.UsageError(f"Cannot create output_dir {out}: {e}.") from None
  if warn:
    warn_abandoned(program, [lock])
  return lock


def warn_abandoned(program: str, locks: Sequence[files.FolderLock]) -> None:
  """One warning line on stderr per earlier holder that ended without releasing
  some of ``locks`` (as ``acquire`` found them): the folder, or how many folders
  under which one."""
  by_owner: dict[str, list[Path]] = {}
  for lock in locks:
    if lock.abandoned_by is not None:
      owner = files.owner_text(lock.abandoned_by)
      by_owner.setdefault(owner, []).append(lock.folder)
  for owner, folders in by_owner.items():
    if len(folders) == 1:
      where = f"the last run in {folders[0]} ({owner}) ended"
      files_text = "its files are as it left them"
    else:
      under = Path(os.path.commonpath(folders))
      where = (
          f"the last runs in {len(folders)} folders under {under} ({owner}) "
          "ended"
      )
      files_text = "their files are as it left them"
    print(
        f"{program}: warning: {where} without finishing (killed, or aborted: "
        f"e.g. out of host memory while compiling); {files_text}.",
        file=sys.stderr,
    )


MARKER_FILE = ".disco-run"


@dataclasses.dataclass(frozen=True)
class RunKind:
  """What one kind of run folder holds.

  Attributes:
    name: the kind, as the marker records it, e.g. ``"eval"``.
    description: the kind in words, e.g. ``"an evaluation run"``.
    owns: ``fnmatch`` patterns of the top-level names it writes (all
      ``overwrite`` removes).
    again: how to run it again there, for the refusal.
  """

  name: str
  description: str
  owns: tuple[str, ...]
  again: str

  def owned(self, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in self.owns)


def _left_over(name: str) -> bool:
  """A temporary file of an interrupted atomic write."""
  return name.startswith(".") and name.endswith(".tmp")


def _housekeeping(name: str) -> bool:
  """Locks, the marker and temporary files of interrupted writes: never a run's
  content."""
  return (
      name.startswith(files.LOCK_FILE)
      or name == MARKER_FILE
      or _left_over(name)
  )


def read_marker(out: Path) -> dict[str, Any] | None:
  """The folder's marker (``{"kind": ..., "description": ...}``); None if
  missing or unreadable."""
  try:
    marker = json.loads((out / MARKER_FILE).read_text())
  except (OSError, ValueError):
    return None
  if not isinstance(marker, dict) or not isinstance(marker.get("kind"), str):
    return None
  return marker


def _listed(names: Sequence[str], most: int = 4) -> str:
  shown = ", ".join(names[:most])
  return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def check_run_folder(
    out: Path, kind: RunKind, *, overwrite: bool = False, resume: bool = False
) -> list[str]:
  """Whether a run of ``kind`` may write into ``out``; returns the names
  ``overwrite`` would remove. Free: missing, holding only locks and temporary
  files, or (with ``resume``) only ``kind``'s files; with ``overwrite``, a
  folder marked as ``kind``'s holding only its files. Nothing disco did not
  write is removed.

  Raises:
    UsageError: ``out`` holds another kind's run, files ``kind`` does not write,
      or (without ``overwrite`` or ``resume``) a run of ``kind``.
  """
  try:
    entries = sorted(n for n in os.listdir(out) if not _housekeeping(n))
  except FileNotFoundError:
    return []
  except OSError as e:
    raise errors.UsageError(f"Cannot read output_dir {out}: {e}.") from None
  marker = read_marker(out)
  if marker is not None and marker["kind"] != kind.name:
    what = marker.get("description") or f"a {marker['kind']!r} run"
    raise errors.UsageError(
        f"output_dir {out} holds {what} ({MARKER_FILE}): {kind.description} "
        "never writes into another kind of run folder; choose another folder."
    )
  if not entries:
    return []
  foreign = [n for n in entries if not kind.owned(n)]
  if foreign:
    raise errors.UsageError(
        f"output_dir {out} holds files {kind.description} does not write "
        f"({_listed(foreign)}): nothing was changed; choose an empty or new "
        "folder, or move them out."
    )
  if overwrite:
    if marker is None:
      raise errors.UsageError(
          f"output_dir {out} has no {MARKER_FILE} marker (written by an older "
          f"disco, or not by disco), so overwrite will not remove "
          f"{_listed(entries)}: delete them yourself or choose another folder."
      )
    return entries
  if resume:
    return []
  raise errors.UsageError(
      f"output_dir {out} already holds {kind.description} "
      f"({_listed(entries)}): {kind.again}, or choose another folder."
  )


def open_run_folder(
    out: Path,
    lock: files.FolderLock,
    kind: RunKind,
    *,
    overwrite: bool = False,
    resume: bool = False,
) -> list[str]:
  """Under ``lock``: ``check_run_folder``, then removes what ``overwrite``
  replaces and interrupted writes' temporary files, and marks the folder as
  ``kind``'s; returns the names removed.

  Raises:
    UsageError: as ``check_run_folder``, or the folder cannot be emptied or
      marked.
  """
  removed = check_run_folder(out, kind, overwrite=overwrite, resume=resume)
  left_over = [n for n in os.listdir(out) if _left_over(n)]
  try:
    files.remove_entries(out, [*removed, *left_over])
    if read_marker(out) is None:
      files.write_json(
          out / MARKER_FILE,
          dict(kind=kind.name, description=kind.description),
      )
  except OSError as e:
    raise errors.UsageError(f"Cannot prepare output_dir {out}: {e}.") from None
  return removed


def fmt(x: float | None, digits: int = 3) -> str:
  """``x`` with ``digits`` decimals; ``n/a`` for None, NaN or infinity."""
  if x is None or not math.isfinite(x):
    return "n/a"
  return f"{x:.{digits}f}"


def steady_state(times: Sequence[float]) -> tuple[float | None, float | None]:
  """``(steady time per call, compile time)`` of calls of one compiled program:
  the first call compiles, the median of the others is the steady state (no
  compile estimate from one call)."""
  if not times:
    return None, None
  if len(times) == 1:
    return float(times[0]), None
  steady = float(np.median(times[1:]))
  return steady, max(0.0, times[0] - steady)


def processes_text(preposition: str) -> str:
  """``" <preposition> N processes"`` in a multi-process run, else ``""``."""
  processes = jax.process_count()
  return f" {preposition} {processes} processes" if processes > 1 else ""


def run_record() -> dict[str, Any]:
  """Versions and devices, saved with every run."""
  import disco

  return dict(
      disco_version=disco.__version__,
      jax_version=jax.__version__,
      devices=[str(d) for d in jax.devices()],
      processes=jax.process_count(),
  )
