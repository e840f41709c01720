"""Checkpoints of a meta-training run (orbax).

A checkpoint holds everything a run needs to continue bit for bit:

* the whole ``MetaTrainState`` (meta-parameters, meta-optimiser state, every
  agent's learner / value-function / environment state and RNG key, and the
  step counter), saved leaf by leaf with the arrays' shardings;
* a JSON record: the format version, a *manifest* (path, shape and dtype of
  every leaf of the state, used to refuse incompatible checkpoints with a clear
  message), the run's config, the host-side metrics history (so the metrics
  CSV can be rewritten exactly up to the checkpoint) and any extra values.

Checkpoints live in numbered sub-folders (the meta-step) of one folder, managed
by ``orbax.checkpoint.CheckpointManager``: each is written into a temporary
folder and renamed when complete (so a crash never leaves a half-written
checkpoint that looks complete), and only the last ``keep`` are kept.

A corrupt checkpoint, or one whose state does not fit the population it is
restored into (another population size, network, environment...), raises
``CheckpointError`` naming the problem and the fix; it is never skipped or
overwritten silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

FORMAT_VERSION = 1
STATE_ITEM = "state"
RECORD_ITEM = "record"
_ITEMS = (STATE_ITEM, RECORD_ITEM)


class CheckpointError(ValueError):
  """A checkpoint is missing, corrupt or does not fit the run."""


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


# ------------------------------------------------------------- config ----


def config_differences(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    ignore: Iterable[str] = (),
) -> list[str]:
  """``key: saved X, now Y`` for each top-level key that differs (JSON
  comparison, so tuples equal lists), except ``ignore``."""
  ignore = set(ignore)
  saved, current = _encode(saved), _encode(current)
  lines = []
  for key in sorted(set(saved) | set(current)):
    if key in ignore:
      continue
    a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
    if a != b:
      lines.append(f"{key}: saved {a!r}, now {b!r}")
  return lines


# --------------------------------------------------------- checkpoints ----


@dataclasses.dataclass
class Restored:
  """What ``restore`` returns.

  Attributes:
    state: the restored state (same tree and shardings as the template).
    step: the checkpoint's meta-step.
    history: the metrics history saved with it (list of row dicts).
    config: the run config saved with it (``None`` if none was).
    extra: any extra values saved with it.
    path: the checkpoint's folder.
  """

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
    self._manager: ocp.CheckpointManager | None = None

  # ---------------------------------------------------------- plumbing
  def _orbax(self) -> ocp.CheckpointManager:
    if self._manager is None:
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
    """Saves ``state`` (and the host-side record) as checkpoint ``step``.

    ``step`` defaults to ``int(state.step)``. Saving a step that is already
    saved does nothing (e.g. the exit save right after a periodic one).
    Returns the checkpoint's folder.
    """
    if step is None:
      step = int(jax.device_get(state.step))
    if step in self.all_steps():
      return self.path(step)
    leaves = jax.tree.leaves(state)
    record = dict(
        format_version=FORMAT_VERSION,
        step=step,
        manifest=tree_manifest(state),
        history=[dict(r) for r in history],
        config=None if config is None else dict(config),
        extra=dict(extra or {}),
    )
    arrays = {_leaf_name(i): leaf for i, leaf in enumerate(leaves)}
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
    return self.path(step)

  # ----------------------------------------------------------- restore
  def read_record(self, step: int) -> dict[str, Any]:
    """The JSON record of checkpoint ``step`` (no arrays are read)."""
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

  def _corrupt(self, step: int, reason: Any) -> CheckpointError:
    reason = " ".join(str(reason).split())
    if len(reason) > 300:
      reason = reason[:300] + "..."
    return CheckpointError(
        f"Checkpoint {self.path(step)} is corrupt or unreadable ({reason}): "
        "delete that folder to resume from an earlier checkpoint, or start a "
        "new output folder."
    )

  def restore(self, template: Any, step: int | None = None) -> Restored:
    """Restores checkpoint ``step`` (default: the latest) onto ``template``.

    Args:
      template: a state of the run's structure (e.g. ``Population.init``'s,
        or its ``jax.eval_shape``); every restored leaf gets the sharding of
        the matching template leaf (or the default device where it has none).
      step: which checkpoint.

    Raises:
      CheckpointError: no checkpoint, a corrupt one, or one whose state does
        not match ``template`` (the message names the differing leaves).
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
    record = self.read_record(step)
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
    return Restored(
        state=jax.tree.unflatten(treedef, arrays),
        step=step,
        history=list(record.get("history") or []),
        config=record.get("config"),
        extra=dict(record.get("extra") or {}),
        path=self.path(step),
    )


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
