"""Run folders: where a run writes, one writer at a time.

A run folder is chosen (``output_dir``), claimed by one process
(``claim_output_dir``: a ``disco.files.FolderLock``) and, for
``overwrite=True``, emptied first (``empty_output_dir``, only if it holds a
run). JSON goes through ``to_jsonable`` and an atomic write; ``run_record``
notes the versions and devices every run saves. ``fmt``, ``steady_state`` and
``processes_text`` format what runs print.
"""

from __future__ import annotations

from collections.abc import Sequence
import datetime
import math
import os
from pathlib import Path
import re
from typing import Any

import jax
from ml_collections import config_dict
import numpy as np

from disco import errors
from disco import files

UsageError = errors.UsageError


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
    raise UsageError(f"output_dir {out} exists and is not a folder.")
  return out


def make_dir(path: Path) -> Path:
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UsageError(f"Cannot create output_dir {path}: {e}.") from None
  return path


def to_jsonable(x: Any) -> Any:
  """Plain JSON values from configs, NumPy and JAX arrays and scalars (e.g.
  gymnax's environment parameters), paths and containers."""
  if isinstance(x, config_dict.ConfigDict):
    x = x.to_dict()
  if isinstance(x, (np.ndarray, jax.Array)):
    return to_jsonable(np.asarray(x).tolist())
  if isinstance(x, dict):
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


def write_json(path: Path, data: Any) -> None:
  """Writes ``data`` (``to_jsonable``) as JSON, atomically."""
  files.write_json(path, to_jsonable(data))


def claim_output_dir(
    out: Path, program: str, name: str = files.LOCK_FILE
) -> files.FolderLock:
  """Creates ``out`` and takes its writer's lock (held until released or
  the process ends).

  Raises:
    UsageError: another process holds it (one line naming that process), or
      the folder cannot be created.
  """
  try:
    return files.FolderLock(out, program, name).acquire()
  except files.FolderInUse as e:
    raise UsageError(str(e)) from None
  except OSError as e:
    raise UsageError(f"Cannot create output_dir {out}: {e}.") from None


def _left_over(name: str) -> bool:
  """A temporary file of an interrupted atomic write."""
  return name.startswith(".") and name.endswith(".tmp")


def empty_output_dir(out: Path, lock: files.FolderLock) -> list[str]:
  """Empties ``out`` for ``overwrite=True`` (keeping ``lock``'s files);
  returns the names removed. Only a folder that holds a run (its
  ``config.json`` or ``summary.json``) or nothing but left-over temporary
  files is emptied.

  Raises:
    UsageError: ``out`` holds other files: it is not a run folder.
  """
  entries = sorted(n for n in os.listdir(out) if n not in lock.names)
  if not entries:
    return []
  holds_run = (out / "config.json").exists() or (out / "summary.json").exists()
  if not holds_run and not all(_left_over(n) for n in entries):
    raise UsageError(
        f"output_dir {out} is not empty and holds no run (no config.json): "
        "overwrite=True only empties run folders; choose an empty or new "
        "folder."
    )
  try:
    files.clear_folder(out, keep=lock.names)
  except OSError as e:
    raise UsageError(
        f"Cannot empty output_dir {out} for overwrite=True: {e}."
    ) from None
  return entries


def fmt(x: float | None, digits: int = 3) -> str:
  """``x`` with ``digits`` decimals; ``n/a`` for None, NaN or infinity."""
  if x is None or not math.isfinite(x):
    return "n/a"
  return f"{x:.{digits}f}"


def steady_state(times: Sequence[float]) -> tuple[float | None, float | None]:
  """``(steady time per call, compile time)`` of calls of one compiled
  program: the first call compiles, the median of the others is the steady
  state. With one call there is no compile estimate."""
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
