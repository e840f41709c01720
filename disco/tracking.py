"""Experiment tracking: where a launcher's metrics go besides its CSV files.

A config's ``tracking`` setting names the backends, comma-separated:

* ``"csv"``: the CSV and PNG files only (the default);
* ``"tensorboard"``: also event files in ``<output_dir>/tensorboard``
  (``tensorboardX``);
* ``"wandb"``: also a Weights & Biases run in ``<output_dir>/wandb``,
  offline unless ``WANDB_MODE=online`` (``wandb sync`` uploads it); project
  ``$WANDB_PROJECT`` or ``disco``.

A ``Tracker`` takes the config once, then scalars by step, then a summary, and
is closed. Only process 0 tracks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import importlib
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

CSV = "csv"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
BACKENDS = (CSV, TENSORBOARD, WANDB)
# The Python package each backend writes with, and the extra that installs it.
_PACKAGES = {TENSORBOARD: "tensorboardX", WANDB: "wandb"}
_DISTRIBUTION = "disco-rl-harness"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"


class TrackingError(ValueError):
  """An unknown tracking backend, or one whose package is not installed."""


def _installed(package: str) -> bool:
  return importlib.util.find_spec(package) is not None


def parse(spec: str | Sequence[str] | None) -> tuple[str, ...]:
  """The backends a ``tracking`` setting names (``"csv"`` when empty).

  Raises:
    TrackingError: an unknown backend, or one whose package is missing.
  """
  if spec is None:
    spec = CSV
  if isinstance(spec, str):
    spec = spec.split(",")
  names = []
  for name in (str(n).strip().lower() for n in spec):
    if name and name not in names:
      names.append(name)
  for name in names:
    if name not in BACKENDS:
      raise TrackingError(
          f"Unknown tracking backend {name!r}: use {', '.join(BACKENDS)} or "
          "a comma-separated list of them (e.g. csv,tensorboard)."
      )
    package = _PACKAGES.get(name)
    if package is not None and not _installed(package):
      raise TrackingError(
          f"tracking {name!r} needs the {package} package: pip install "
          f"'{_DISTRIBUTION}[{name}]'."
      )
  return tuple(names) or (CSV,)


def _number(value: Any) -> float | None:
  """``value`` as a float, or None for what is not a real number."""
  if isinstance(value, bool):
    return float(value)
  if isinstance(value, (int, float, np.integer, np.floating)):
    return float(value)
  if isinstance(value, np.ndarray) and value.size == 1:
    return float(value.reshape(()))
  return None


def _jsonable(x: Any) -> Any:
  if isinstance(x, Mapping):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, (np.integer, np.floating)):
    return x.item()
  if isinstance(x, (str, int, float, bool)) or x is None:
    return x
  return str(x)


class Tracker:
  """Where metrics go; this base class writes nothing (the CSV files are the
  launchers' own)."""

  def config(self, values: Mapping[str, Any]) -> None:
    """Records the run's config (once, at the start)."""

  def scalars(self, step: int, values: Mapping[str, Any]) -> None:
    """Records ``{tag: number}`` at ``step`` (increasing between calls;
    non-numbers left out)."""

  def summary(self, values: Mapping[str, Any], step: int) -> None:
    """Records the run's final numbers (``step``: the last step)."""

  def close(self) -> None:
    """Writes out everything (the tracker takes nothing after)."""

  def __enter__(self) -> Tracker:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


class _TensorBoard(Tracker):
  """Event files of ``tensorboardX.SummaryWriter``."""

  def __init__(self, directory: Path):
    from tensorboardX import SummaryWriter

    self.directory = directory
    self._writer = SummaryWriter(logdir=str(directory))

  def config(self, values):
    text = json.dumps(_jsonable(values), indent=2, sort_keys=True)
    # Markdown: indented lines are code.
    self._writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

  def scalars(self, step, values):
    for tag, value in values.items():
      number = _number(value)
      if number is not None:
        self._writer.add_scalar(tag, number, int(step))

  def summary(self, values, step):
    self.scalars(step, {f"final/{k}": v for k, v in values.items()})

  def close(self):
    self._writer.close()


class _WandB(Tracker):
  """A Weights & Biases run, offline unless ``WANDB_MODE`` says otherwise."""

  def __init__(self, directory: Path, name: str, group: str | None):
    wandb = importlib.import_module("wandb")
    directory.mkdir(parents=True, exist_ok=True)
    self._run = wandb.init(
        dir=str(directory),
        project=os.environ.get("WANDB_PROJECT", "disco"),
        name=name,
        group=group,
        mode=os.environ.get("WANDB_MODE", "offline"),
        reinit="create_new",
    )

  def config(self, values):
    self._run.config.update(_jsonable(values), allow_val_change=True)

  def scalars(self, step, values):
    numbers = {}
    for tag, value in values.items():
      number = _number(value)
      if number is not None:
        numbers[tag] = number
    if numbers:
      self._run.log(numbers, step=int(step))

  def summary(self, values, step):
    del step
    for tag, value in values.items():
      number = _number(value)
      if number is not None and math.isfinite(number):
        self._run.summary[tag] = number

  def close(self):
    self._run.finish()


class _Several(Tracker):

  def __init__(self, trackers: Sequence[Tracker]):
    self.trackers = list(trackers)

  def config(self, values):
    for t in self.trackers:
      t.config(values)

  def scalars(self, step, values):
    for t in self.trackers:
      t.scalars(step, values)

  def summary(self, values, step):
    for t in self.trackers:
      t.summary(values, step)

  def close(self):
    for t in self.trackers:
      t.close()


def open_tracker(
    spec: str | Sequence[str] | None,
    output_dir: str | os.PathLike[str],
    name: str | None = None,
    group: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> Tracker:
  """The tracker of ``spec``'s backends (``parse``) for a run in ``output_dir``
  (writing nothing outside process 0), with W&B ``name`` (default: the folder's)
  and ``group``, recording ``config`` at once.

  Raises:
    TrackingError: see ``parse``.
  """
  backends = parse(spec)
  if jax.process_index() != 0:
    return Tracker()
  out = Path(output_dir)
  trackers: list[Tracker] = []
  if TENSORBOARD in backends:
    trackers.append(_TensorBoard(out / TENSORBOARD_DIR))
  if WANDB in backends:
    trackers.append(_WandB(out, name or out.resolve().name, group))
  tracker = trackers[0] if len(trackers) == 1 else _Several(trackers)
  if config is not None:
    tracker.config(config)
  return tracker
