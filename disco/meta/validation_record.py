"""The record of a run's validations: its files in the run folder.

``Record`` keeps ``validation.csv`` (one row per meta-step, environment and
seed; rewritten whole and atomically), ``validation.png``,
``best_meta_params.npz`` (written before the rows that name it) and
``validation.json`` (the settings the rows were made with, and the files the
held-out environments read, e.g. an XLand ruleset file, by SHA-256 digest:
``input_files``; other settings, or a file changed at the same path since,
are refused rather than mixed in), under a file lock shared by every writer
of the folder (the run itself and ``disco-validate``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import filelock
import numpy as np

from disco import errors
from disco import files
from disco import run_folders
from disco import weights as weights_lib
from disco.evaluation import outputs as eval_outputs
from disco.meta import validation_settings


@dataclasses.dataclass(frozen=True)
class StepResult:
  """The validation of one meta-step's meta-parameters.

  Attributes:
    meta_step: the meta-step.
    returns: ``{env key: [S]}`` final returns per seed.
    normalized: ``{env key: [S]}`` their normalised scores.
    aggregate: IQM of all normalised scores (NaN if any is NaN).
  """

  meta_step: int
  returns: dict[str, np.ndarray]
  normalized: dict[str, np.ndarray]
  aggregate: float

  def scalars(self) -> dict[str, float]:
    """What a tracker records: ``validation/aggregate`` and, per
    environment, its mean normalised score and mean return."""
    out = {"validation/aggregate": float(self.aggregate)}
    for key, scores in self.normalized.items():
      out[f"validation/{key}/normalized_score"] = float(np.mean(scores))
      out[f"validation/{key}/return"] = float(np.mean(self.returns[key]))
    return out

  def rows(self, seeds: Sequence[int]) -> list[dict[str, Any]]:
    return [
        dict(
            meta_step=self.meta_step,
            env=env,
            seed=int(seed),
            **{
                "return": float(self.returns[env][i]),
                "normalized_score": float(self.normalized[env][i]),
                "aggregate": self.aggregate,
            },
        )
        for env in self.returns
        for i, seed in enumerate(seeds)
    ]

  def text(self) -> str:
    means = ", ".join(
        f"{env} {run_folders.fmt(float(np.mean(x)))}"
        for env, x in self.normalized.items()
    )
    return (
        f"IQM normalised score {run_folders.fmt(self.aggregate)} (mean per "
        f"environment: {means})"
    )


CSV_FILE = "validation.csv"
PLOT_FILE = "validation.png"
BEST_FILE = "best_meta_params.npz"
SETTINGS_FILE = "validation.json"
LOCK_FILE = ".validation.lock"
COLUMNS = (
    "meta_step",
    "env",
    "seed",
    "return",
    "normalized_score",
    "aggregate",
)


def read_rows(path: Path) -> list[dict[str, Any]]:
  """The rows of a ``validation.csv`` (``[]`` if there is none)."""
  if not path.is_file():
    return []
  with open(path, newline="") as f:
    rows = list(csv.DictReader(f))
  out = []
  for r in rows:
    out.append(
        dict(
            meta_step=int(r["meta_step"]),
            env=r["env"],
            seed=int(r["seed"]),
            **{
                k: float(r[k])
                for k in ("return", "normalized_score", "aggregate")
            },
        )
    )
  return out


def input_files(
    settings: validation_settings.ValidationSettings,
) -> dict[str, dict[str, str]]:
  """The files the held-out environments of ``settings`` read (e.g. an
  XLand ruleset file), by digest: ``{"validation.envs[<i>].env_settings.
  <setting>": {"path": ..., "sha256": ...}}``
  (``evaluation.outputs.file_digests``), each file read once.

  Raises:
    UsageError: a file cannot be read.
  """
  paths = {}
  for i, env in enumerate(settings.envs):
    paths.update(
        eval_outputs.env_input_paths(
            env.env_settings, f"validation.envs[{i}].env_settings."
        )
    )
  return eval_outputs.file_digests(paths)


def _write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
  with files.atomic_write(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(COLUMNS)
    for r in rows:
      writer.writerow(
          [repr(r[c]) if isinstance(r[c], float) else r[c] for c in COLUMNS]
      )


def plot(rows: Sequence[Mapping[str, Any]], path: Path | None = None):
  """The aggregate and each environment's mean normalised score against the
  meta-step (saved at ``path`` if given); returns the figure."""
  from matplotlib import figure as figure_lib
  from matplotlib.backends import backend_agg

  fig = figure_lib.Figure(figsize=(7, 4), dpi=100)
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.subplots()
  steps = sorted({r["meta_step"] for r in rows})
  for env in dict.fromkeys(r["env"] for r in rows):
    means = [
        np.mean(
            [
                r["normalized_score"]
                for r in rows
                if r["env"] == env and r["meta_step"] == s
            ]
        )
        for s in steps
    ]
    ax.plot(steps, means, marker=".", alpha=0.7, label=env)
  agg = {r["meta_step"]: r["aggregate"] for r in rows}
  ax.plot(
      steps,
      [agg[s] for s in steps],
      color="black",
      linewidth=2,
      marker="o",
      label="IQM (all)",
  )
  finite = [s for s in steps if math.isfinite(agg[s])]
  if finite:
    best = max(finite, key=lambda s: agg[s])
    ax.plot([best], [agg[best]], "r*", markersize=14, label="best")
  ax.set_xlabel("meta-step")
  ax.set_ylabel("normalised score (0: random, 1: reference)")
  ax.set_title("Validation on held-out environments")
  ax.legend(fontsize=8)
  if path is not None:
    files.save_figure(fig, path, bbox_inches="tight")
  return fig


Exporter = Callable[..., Path]  # (path, meta_params, meta_step, **extra)


class Record:
  """The validation outputs of a run folder (see the module docstring).

  Args:
    run_dir: the meta-training run's folder.
    settings: the validation settings (checked against ``validation.json``
      when the folder already holds validation rows).
    export: ``export(path, meta_params, meta_step, **metadata)`` writes a
      meta-parameter file as the run's ``meta_params.npz`` is written.
    write: whether this process writes (process 0).

  The digests of the held-out environments' files (``input_files``) are
  taken once, when the record is made (just after ``Validator`` built the
  environments from them), and compared with those ``validation.json``
  recorded at every check.

  Raises:
    UsageError: the folder's rows were made with other settings or other
      input files (``check_settings``), or an input file is unreadable.
  """

  def __init__(
      self,
      run_dir: Path,
      settings: validation_settings.ValidationSettings,
      export: Exporter,
      write: bool = True,
  ):
    self.run_dir = Path(run_dir)
    self.settings = settings
    self.export = export
    self.write = write
    self.csv_path = self.run_dir / CSV_FILE
    self.plot_path = self.run_dir / PLOT_FILE
    self.best_path = self.run_dir / BEST_FILE
    self.settings_path = self.run_dir / SETTINGS_FILE
    self.input_files = input_files(settings)
    self.check_settings()

  def check_settings(self) -> None:
    """Refuses to add rows to those of ``validation.json`` made with other
    settings, or with an input file whose digest differs from the one
    recorded or that it recorded no digest of (a record written before
    digests were recorded, for a file that cannot be verified).

    Raises:
      UsageError: one line naming what differs and the way out.
    """
    if not self.settings_path.is_file():
      return
    try:
      saved = json.loads(self.settings_path.read_text())
    except ValueError as e:
      raise errors.UsageError(
          f"{self.settings_path} is unreadable ({e}): move it aside with "
          f"{CSV_FILE} and {BEST_FILE}."
      ) from None
    current = self.settings.record()
    # Keys a newer record no longer holds are not compared.
    diff = run_folders.setting_differences(
        {k: v for k, v in saved.items() if k in current}, current
    )
    if diff:
      raise errors.UsageError(
          f"{self.csv_path} was made with other validation settings "
          f"({'; '.join(diff)}): use those, or move {CSV_FILE}, {BEST_FILE} "
          f"and {SETTINGS_FILE} aside to start a new validation history."
      )
    changes = eval_outputs.input_file_changes(
        saved.get(eval_outputs.INPUT_FILES),
        self.input_files,
        since="its rows were made",
    )
    if changes:
      raise errors.UsageError(
          f"{self.csv_path} was made with other input files "
          f"({'; '.join(changes)}): restore them, or move {CSV_FILE}, "
          f"{BEST_FILE} and {SETTINGS_FILE} aside to start a new validation "
          "history."
      )

  def rows(self) -> list[dict[str, Any]]:
    return read_rows(self.csv_path)

  def validated_steps(self) -> set[int]:
    return {r["meta_step"] for r in self.rows()}

  def best(self) -> tuple[int, float] | None:
    """``(meta_step, aggregate)`` of ``best_meta_params.npz``, if any."""
    if not self.best_path.is_file():
      return None
    try:
      metadata = weights_lib.load_metadata(self.best_path)
      return int(metadata["meta_step"]), float(metadata["validation_score"])
    except (weights_lib.WeightsError, KeyError, TypeError, ValueError):
      return None

  def _lock(self) -> filelock.FileLock:
    self.run_dir.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(self.run_dir / LOCK_FILE))

  def add(self, result: StepResult, meta_params: Any) -> bool:
    """Records ``result`` (unless its meta-step is recorded already); saves
    ``meta_params`` as the best rule first if its aggregate beats the best
    so far. Returns whether it did."""
    if not self.write:
      return False
    with self._lock():
      self.check_settings()
      rows = self.rows()
      if result.meta_step in {r["meta_step"] for r in rows}:
        return False
      best = self.best()
      new_best = math.isfinite(result.aggregate) and (
          best is None or result.aggregate > best[1]
      )
      if new_best:
        self.export(
            self.best_path,
            meta_params,
            result.meta_step,
            validation_score=result.aggregate,
            validation_envs=[e.key for e in self.settings.envs],
            validation_seeds=self.settings.seeds,
        )
      rows = sorted(
          rows + result.rows(self.settings.seeds),
          key=lambda r: r["meta_step"],
      )
      if not self.settings_path.is_file():
        run_folders.write_json(
            self.settings_path,
            {
                **self.settings.record(),
                eval_outputs.INPUT_FILES: self.input_files,
            },
        )
      _write_rows(self.csv_path, rows)
      plot(rows, self.plot_path)
    return new_best

  def describe(self, result: StepResult, new_best: bool) -> str:
    best = self.best()
    if new_best:
      tail = f"new best: saved {self.best_path}"
    elif best is not None:
      tail = f"best so far {run_folders.fmt(best[1])} at meta-step {best[0]}"
    else:
      tail = "no best yet"
    return (
        f"Validation at meta-step {result.meta_step}: {result.text()}; {tail}."
    )
