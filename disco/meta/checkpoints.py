"""Checkpoints of a meta-training run (orbax): numbered sub-folders (the
meta-step), written to a temporary folder and renamed when complete, the last
``keep`` kept.

A checkpoint holds the whole ``MetaTrainState`` with its shardings and a JSON
record (a manifest of every leaf's path, shape and dtype, the config, the
metrics history, extra values), and never non-finite values.
``<step>/file_digests.json`` lists every file's SHA-256, checked before
restoring: a mismatch, or a missing manifest the record says was written, is a
``CorruptCheckpointError``, which ``restore_newest_readable`` falls back past,
moving the checkpoint to ``<step>.damaged``. With several processes each writes
its own shards; process 0 writes the digests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
import contextlib
import dataclasses
import io
import json
import logging
import math
from pathlib import Path
import sys
import time
from typing import Any

import jax
from jax.experimental import multihost_utils
import numpy as np

from disco import files
from disco import ops

FORMAT_VERSION = 1
STATE_ITEM = "state"
RECORD_ITEM = "record"
_ITEMS = (STATE_ITEM, RECORD_ITEM)


def _ocp() -> Any:
  """``orbax.checkpoint``, imported when a checkpoint is first written or
  read, so that starting a run does not wait for it."""
  import orbax.checkpoint  # pylint: disable=g-import-not-at-top

  return orbax.checkpoint


class CheckpointError(ValueError):
  """A checkpoint is missing, corrupt or does not fit the run."""


class CorruptCheckpointError(CheckpointError):
  """A checkpoint cannot be read back whole, or holds non-finite values."""

  def __init__(self, message: str, reason: str = ""):
    super().__init__(message)
    self.reason = reason


DAMAGED_SUFFIX = ".damaged"
_all_finite = jax.jit(ops.all_finite)


# ----------------------------------------------------------- manifest ----


def _leaf_name(i: int) -> str:
  return f"leaf_{i:05d}"


def tree_manifest(tree: Any) -> list[dict[str, Any]]:
  """``[{path, shape, dtype}]`` of every leaf of ``tree`` (arrays or
  ``jax.ShapeDtypeStruct``), in ``jax.tree`` order."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [
      dict(
          path=jax.tree_util.keystr(path),
          shape=[int(d) for d in np.shape(leaf)],
          dtype=np.dtype(leaf.dtype).name,
      )
      for path, leaf in leaves
  ]


def manifest_diff(
    saved: Sequence[Mapping[str, Any]],
    expected: Sequence[Mapping[str, Any]],
    limit: int = 5,
) -> list[str]:
  """Human-readable differences of a saved manifest from the expected one."""
  saved_by = {m["path"]: m for m in saved}
  expected_by = {m["path"]: m for m in expected}
  lines = [
      f"missing {p} ({_fmt(expected_by[p])})"
      for p in expected_by
      if p not in saved_by
  ]
  lines += [
      f"unexpected {p} ({_fmt(saved_by[p])})"
      for p in saved_by
      if p not in expected_by
  ]
  for p, e in expected_by.items():
    s = saved_by.get(p)
    if s is not None and (
        list(s["shape"]) != list(e["shape"]) or s["dtype"] != e["dtype"]
    ):
      lines.append(f"{p}: saved {_fmt(s)}, expected {_fmt(e)}")
  if not lines and [m["path"] for m in saved] != [m["path"] for m in expected]:
    lines.append("the leaves are stored in another order")
  if len(lines) > limit:
    lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
  return lines


def _fmt(m: Mapping[str, Any]) -> str:
  return f"{m['dtype']}{list(m['shape'])}"


# ------------------------------------------------------- file digests ----

DIGESTS_FILE = "file_digests.json"
# The record's key saying that a digest manifest is written after the save.
DIGESTS_KEY = "file_digests"
_DIGEST_ALGORITHM = "sha256"


def folder_digests(folder: Path) -> dict[str, str]:
  """``{relative posix path: SHA-256}`` of every file under ``folder`` but the
  manifest, sorted."""
  paths = sorted(
      p for p in folder.rglob("*") if p.is_file() and p.name != DIGESTS_FILE
  )
  return {p.relative_to(folder).as_posix(): files.file_digest(p) for p in paths}


def digest_problems(folder: Path, expected: Mapping[str, str]) -> list[str]:
  """One phrase per file ``expected`` lists that is missing or differs from its
  digest, in path order (other files are not read)."""
  problems = []
  for name in sorted(expected):
    path = folder / name
    if not path.is_file():
      problems.append(f"{name} is missing")
    elif files.file_digest(path) != expected[name]:
      problems.append(f"{name} differs from its digest")
  return problems


def read_digests(folder: Path) -> dict[str, str] | None:
  """The digests listed in ``folder``'s manifest, or ``None`` when it has
  none.

  Raises:
    ValueError: the manifest is unreadable or not of the expected form.
  """
  path = folder / DIGESTS_FILE
  if not path.exists():
    return None
  try:
    data = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{DIGESTS_FILE} is unreadable ({e})") from e
  digests = data.get("files") if isinstance(data, dict) else None
  if (
      not isinstance(digests, dict)
      or data.get("algorithm") != _DIGEST_ALGORITHM
      or not all(isinstance(v, str) for v in digests.values())
  ):
    raise ValueError(f"{DIGESTS_FILE} is not a {_DIGEST_ALGORITHM} manifest")
  return digests


def write_digests(folder: Path) -> Path:
  """Writes ``folder``'s manifest of ``folder_digests`` atomically."""
  return files.write_json(
      folder / DIGESTS_FILE,
      dict(algorithm=_DIGEST_ALGORITHM, files=folder_digests(folder)),
  )


def _sync(name: str) -> None:
  """A barrier of every process (nothing with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


# ------------------------------------------------- orbax's thread noise ----


class _Hold(logging.Filter):
  """Keeps the records logged to a logger instead of letting them out."""

  def __init__(self):
    super().__init__()
    self.records: list[logging.LogRecord] = []

  def filter(self, record: logging.LogRecord) -> bool:
    self.records.append(record)
    return False


def _until_quiet(
    held: io.StringIO, quiet_s: float = 0.5, most_s: float = 5.0
) -> None:
  """Waits until nothing has been written to ``held`` for ``quiet_s``
  seconds (at most ``most_s`` in all)."""
  start = last_change = time.monotonic()
  size = held.tell()
  while time.monotonic() - last_change < quiet_s:
    if time.monotonic() - start > most_s:
      return
    time.sleep(0.05)
    if held.tell() != size:
      size, last_change = held.tell(), time.monotonic()


class _Unretrieved(logging.Filter):
  """Drops asyncio's "Future/Task exception was never retrieved"."""

  def filter(self, record: logging.LogRecord) -> bool:
    return "exception was never retrieved" not in str(record.msg)


_UNRETRIEVED = _Unretrieved()
# The loggers a save's threads log to: orbax's (absl) and asyncio's.
_SAVE_LOGGERS = ("absl", "asyncio")


@contextlib.contextmanager
def held_output() -> Iterator[None]:
  """Holds back what a save prints and logs (``sys.stderr``, the ``absl`` and
  ``asyncio`` loggers): let out when the block completes, dropped when it raises
  (the save's error says it in one line)."""
  hold, stderr = _Hold(), sys.stderr
  loggers = [logging.getLogger(name) for name in _SAVE_LOGGERS]
  held = io.StringIO()
  for logger in loggers:
    logger.addFilter(hold)
  sys.stderr = held
  try:
    yield
  except BaseException:
    # Writes in flight fail for a moment longer; asyncio would later log
    # each failed future's (already raised) exception.
    _until_quiet(held)
    asyncio_logger = logging.getLogger("asyncio")
    if _UNRETRIEVED not in asyncio_logger.filters:
      asyncio_logger.addFilter(_UNRETRIEVED)
    raise
  finally:
    sys.stderr = stderr
    for logger in loggers:
      logger.removeFilter(hold)
  stderr.write(held.getvalue())
  for record in hold.records:
    logging.getLogger(record.name).handle(record)


# ---------------------------------------------------- JSON-safe values ----

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _encode(x: Any) -> Any:
  """Python/numpy values -> strict JSON (non-finite floats as strings)."""
  if isinstance(x, Mapping):
    return {str(k): _encode(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_encode(v) for v in x]
  if isinstance(x, (bool, np.bool_)):
    return bool(x)
  if isinstance(x, (int, np.integer)):
    return int(x)
  if isinstance(x, (float, np.floating)):
    x = float(x)
    return x if math.isfinite(x) else {"__float__": repr(x)}
  if isinstance(x, np.ndarray) and x.ndim == 0:
    return _encode(x.item())
  if isinstance(x, Path):
    return str(x)
  return x


def _decode(x: Any) -> Any:
  if isinstance(x, dict):
    if set(x) == {"__float__"}:
      return _NON_FINITE[x["__float__"]]
    return {k: _decode(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_decode(v) for v in x]
  return x


# --------------------------------------------------------- checkpoints ----


@dataclasses.dataclass
class Restored:
  """What ``restore`` returns: the ``state`` (the template's tree and
  shardings), the checkpoint's meta-``step``, the ``history`` rows, ``config``
  (None if not saved) and ``extra`` saved with it, and its folder ``path``."""

  state: Any
  step: int
  history: list[dict[str, Any]]
  config: dict[str, Any] | None
  extra: dict[str, Any]
  path: Path


class CheckpointManager:
  """Numbered checkpoints of a run in ``directory``, the last ``keep`` kept.

  Args:
    directory: the checkpoint folder (created on the first save).
    keep: how many checkpoints to keep (the oldest are deleted).
  """

  def __init__(self, directory: str | Path, keep: int = 3):
    if keep < 1:
      raise ValueError(f"keep must be >= 1, got {keep}.")
    self.directory = Path(directory).expanduser().resolve()
    if self.directory.exists() and not self.directory.is_dir():
      raise CheckpointError(
          f"Checkpoint folder {self.directory} exists and is not a folder: "
          "choose another output folder."
      )
    self.keep = keep
    self._manager: Any = None  # an orbax CheckpointManager, made on first use

  # ---------------------------------------------------------- plumbing
  def _orbax(self) -> Any:
    if self._manager is None:
      ocp = _ocp()
      options = ocp.CheckpointManagerOptions(
          max_to_keep=self.keep, create=True, enable_async_checkpointing=False
      )
      self._manager = ocp.CheckpointManager(
          self.directory, options=options, item_names=_ITEMS
      )
    return self._manager

  def close(self) -> None:
    if self._manager is not None:
      self._manager.close()
      self._manager = None

  def __enter__(self) -> CheckpointManager:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  # ------------------------------------------------------------- query
  def all_steps(self) -> list[int]:
    """Meta-steps of the complete checkpoints, ascending."""
    if not self.directory.is_dir():
      return []
    self._orbax().reload()
    return sorted(int(s) for s in self._orbax().all_steps())

  def latest_step(self) -> int | None:
    steps = self.all_steps()
    return steps[-1] if steps else None

  def path(self, step: int) -> Path:
    return self.directory / str(step)

  # -------------------------------------------------------------- save
  def save(
      self,
      state: Any,
      *,
      step: int | None = None,
      history: Sequence[Mapping[str, Any]] = (),
      config: Mapping[str, Any] | None = None,
      extra: Mapping[str, Any] | None = None,
  ) -> Path:
    """Saves ``state`` and the host-side record as checkpoint ``step``, then its
    digest manifest; returns the checkpoint's folder.

    ``step`` defaults to ``int(state.step)``; saving a step already saved does
    nothing.

    Raises:
      CheckpointError: ``state`` holds a NaN or an infinity (nothing is
        written).
    """
    if step is None:
      step = int(jax.device_get(state.step))
    if step in self.all_steps():
      return self.path(step)
    if not bool(_all_finite(state)):
      raise CheckpointError(
          f"Not saving checkpoint {self.path(step)}: the state holds "
          "non-finite values (NaN or inf)."
      )
    leaves = jax.tree.leaves(state)
    record = dict(
        format_version=FORMAT_VERSION,
        step=step,
        manifest=tree_manifest(state),
        history=[dict(r) for r in history],
        config=None if config is None else dict(config),
        extra=dict(extra or {}),
        **{DIGESTS_KEY: DIGESTS_FILE},
    )
    arrays = {_leaf_name(i): leaf for i, leaf in enumerate(leaves)}
    with held_output():
      ocp = _ocp()
      self._orbax().save(
          step,
          args=ocp.args.Composite(
              **{
                  STATE_ITEM: ocp.args.StandardSave(arrays),
                  RECORD_ITEM: ocp.args.JsonSave(_encode(record)),
              }
          ),
      )
      self._orbax().wait_until_finished()
    _sync(f"checkpoint {step} saved")  # every process's files are in place
    if jax.process_index() == 0:
      write_digests(self.path(step))
    _sync(f"checkpoint {step} digests written")
    return self.path(step)

  # ----------------------------------------------------------- restore
  def check_files(self, step: int) -> dict[str, Any]:
    """Checks checkpoint ``step``'s files against its digest manifest (none and
    not announced: unchecked), then returns its record.

    Raises:
      CorruptCheckpointError: a missing or differing file, or a manifest
        unreadable or missing though announced.
    """
    folder = self.path(step)
    try:
      digests = read_digests(folder)
    except ValueError as e:
      raise self._corrupt(step, e) from e
    if digests is not None:
      problems = digest_problems(folder, digests)
      if problems:
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise self._corrupt(step, f"{problems[0]}{more}")
    record = self.read_record(step)
    if digests is None and record.get(DIGESTS_KEY):
      raise self._corrupt(
          step,
          f"its {DIGESTS_FILE} is missing (the save was cut short after "
          "orbax wrote it, or the file was removed)",
      )
    return record

  def read_record(self, step: int) -> dict[str, Any]:
    """The JSON record of checkpoint ``step`` (no arrays read, no digests
    checked)."""
    ocp = _ocp()
    try:
      restored = self._orbax().restore(
          step, args=ocp.args.Composite(**{RECORD_ITEM: ocp.args.JsonRestore()})
      )
      record = _decode(restored[RECORD_ITEM])
    except Exception as e:
      raise self._corrupt(step, e) from e
    if not isinstance(record, dict) or "manifest" not in record:
      raise self._corrupt(step, "its record has no manifest")
    version = record.get("format_version")
    if version != FORMAT_VERSION:
      raise CheckpointError(
          f"Checkpoint {self.path(step)} has format version {version!r}; this "
          f"version of disco reads version {FORMAT_VERSION}: start a new "
          "output folder (or use the disco version that wrote it)."
      )
    return record

  def _corrupt(self, step: int, reason: Any) -> CorruptCheckpointError:
    reason = " ".join(str(reason).split())
    if len(reason) > 300:
      reason = reason[:300] + "..."
    return CorruptCheckpointError(
        f"Checkpoint {self.path(step)} is corrupt or unreadable ({reason}): "
        "resuming moves it aside and falls back to the previous checkpoint "
        "(restore_newest_readable); or start a new output folder.",
        reason,
    )

  def restore(self, template: Any, step: int | None = None) -> Restored:
    """Restores checkpoint ``step`` (default: the latest) onto ``template``, a
    state of the run's structure (arrays or ``jax.eval_shape``'s) whose leaves'
    shardings the restored leaves get.

    Raises:
      CorruptCheckpointError: unreadable, files not matching their digests, or
        non-finite values.
      CheckpointError: no checkpoint, or a state not matching ``template``
        (naming the leaves).
    """
    if step is None:
      step = self.latest_step()
      if step is None:
        raise CheckpointError(f"No checkpoint in {self.directory}.")
    elif step not in self.all_steps():
      raise CheckpointError(
          f"No checkpoint of step {step} in "
          f"{self.directory} (have {self.all_steps()})."
      )
    record = self.check_files(step)
    expected = tree_manifest(template)
    diff = manifest_diff(record["manifest"], expected)
    if diff:
      raise CheckpointError(
          f"Checkpoint {self.path(step)} does not fit this run's state "
          f"({'; '.join(diff)}): it was written by a run with another "
          "population, network or environment. Use the same config as that "
          "run, or start a new output folder."
      )
    leaves, treedef = jax.tree.flatten(template)
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = {
        _leaf_name(i): jax.ShapeDtypeStruct(
            np.shape(leaf),
            leaf.dtype,
            sharding=getattr(leaf, "sharding", None) or default,
        )
        for i, leaf in enumerate(leaves)
    }
    ocp = _ocp()
    try:
      restored = self._orbax().restore(
          step,
          args=ocp.args.Composite(
              **{STATE_ITEM: ocp.args.StandardRestore(abstract)}
          ),
      )[STATE_ITEM]
      arrays = [restored[_leaf_name(i)] for i in range(len(leaves))]
    except Exception as e:
      raise self._corrupt(step, e) from e
    for i, (a, leaf) in enumerate(zip(arrays, leaves, strict=True)):
      if tuple(a.shape) != tuple(np.shape(leaf)) or a.dtype != leaf.dtype:
        raise self._corrupt(
            step,
            f"leaf {expected[i]['path']} came back as "
            f"{a.dtype}{list(a.shape)}",
        )
    state = jax.tree.unflatten(treedef, arrays)
    if not bool(_all_finite(state)):
      raise self._corrupt(step, "it holds non-finite values (NaN or inf)")
    return Restored(
        state=state,
        step=step,
        history=list(record.get("history") or []),
        config=record.get("config"),
        extra=dict(record.get("extra") or {}),
        path=self.path(step),
    )

  def move_aside(self, step: int) -> Path:
    """Renames checkpoint ``step`` to ``<step>.damaged`` (``.damaged-2``, ... if
    taken), which the manager no longer lists; returns the new path. With
    several processes, process 0 renames it."""
    source = self.path(step)
    target = source.with_name(source.name + DAMAGED_SUFFIX)
    k = 1
    while target.exists():
      k += 1
      target = source.with_name(f"{source.name}{DAMAGED_SUFFIX}-{k}")
    if jax.process_index() == 0:
      source.rename(target)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"checkpoint {step} moved aside")
    self._orbax().reload()
    return target

  def restore_newest_readable(
      self, template: Any, log: Callable[[str], None] = print
  ) -> Restored | None:
    """Restores the newest checkpoint that reads back whole and finite onto
    ``template`` (None if none); each newer corrupt one is moved aside and
    reported through ``log``.

    Raises:
      CheckpointError: a checkpoint does not fit ``template`` (nothing is
        moved).
    """
    for step in reversed(self.all_steps()):
      try:
        restored, reason = self.restore(template, step), None
      except CorruptCheckpointError as e:
        restored, reason = None, e.reason
      if not _in_any_process(reason is not None):
        return restored
      aside = self.move_aside(step)
      log(
          f"Checkpoint {step} is damaged ({reason or 'in another process'}): "
          f"moved it to {aside} and falling back to the previous one."
      )
    return None


def _in_any_process(flag: bool) -> bool:
  """Whether ``flag`` holds in any process (every process must call it)."""
  if jax.process_count() == 1:
    return flag
  return bool(np.any(multihost_utils.process_allgather(np.asarray(flag))))


def restore_latest(
    directory: str | Path, template_state: Any
) -> Restored | None:
  """The latest checkpoint in ``directory`` restored onto ``template_state``
  (see ``CheckpointManager.restore``), or ``None`` if there is none."""
  manager = CheckpointManager(directory)
  try:
    if manager.latest_step() is None:
      return None
    return manager.restore(template_state)
  finally:
    manager.close()


def save_checkpoint(
    directory: str | Path, state: Any, keep: int = 3, **kwargs
) -> Path:
  """One-off ``CheckpointManager(directory, keep).save(state, **kwargs)``."""
  with CheckpointManager(directory, keep) as manager:
    return manager.save(state, **kwargs)
