"""Host-side metrics of a meta-training run: rows, CSV and plots.

``metrics_row`` turns a meta-step's device logs into one flat row of Python
numbers; ``MetricsHistory`` keeps the rows, writes them as CSV (floats exact)
and plots the learning curves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import csv
import io
import math
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from disco import files

STEP = "meta_step"
# Leading CSV columns (population-level); the rest follow sorted.
MAIN_COLUMNS = (
    STEP,
    "meta_loss",
    "pg_loss",
    "reg_loss",
    "meta_grad_norm",
    "meta_update_norm",
    "rewards",
    "pos_reward_frac",
    "neg_reward_frac",
    "pos_rewards",
    "neg_rewards",
)
_WEIGHTED = (
    "pg_loss",
    "reg_loss",
    "entropy",
    "pos_reward_frac",
    "neg_reward_frac",
)


def metrics_row(
    step: int, logs: Mapping[str, Any], groups: Sequence[Any], rollout_len: int
) -> dict[str, Any]:
  """One flat row from a meta-step's logs (``step``: 1 for the first;
  ``groups``: the ``AgentGroup``s): ``meta_step``, every log as a float, the
  fractions ``pos/neg_reward_frac`` of rewards per actor step (overall and per
  group) and the agent-weighted ``pg_loss``, ``reg_loss`` and ``entropy``."""
  logs = {k: float(v) for k, v in jax.device_get(dict(logs)).items()}
  total = sum(g.num_agents for g in groups)
  row: dict[str, Any] = {STEP: int(step)}
  for g in groups:
    size = rollout_len * g.env.batch_size
    for sign in ("pos", "neg"):
      key = f"{g.name}/{sign}_rewards"
      if key in logs:
        logs[f"{g.name}/{sign}_reward_frac"] = logs[key] / size
  for name in _WEIGHTED:
    keys = [f"{g.name}/{name}" for g in groups]
    if name not in logs and all(k in logs for k in keys):
      logs[name] = sum(
          logs[k] * g.num_agents / total
          for k, g in zip(keys, groups, strict=True)
      )
  row.update(logs)
  return row


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
  keys = list(dict.fromkeys(k for r in rows for k in r))
  main = [c for c in MAIN_COLUMNS if c in keys]
  return main + sorted(k for k in keys if k not in main)


def _cell(v: Any) -> str:
  if isinstance(v, float):
    return repr(v)
  return str(v)


def _parse(text: str) -> Any:
  try:
    return int(text)
  except ValueError:
    return float(text)


class MetricsHistory:
  """The rows of a run, in meta-step order."""

  def __init__(self, rows: Iterable[Mapping[str, Any]] = ()):
    self.rows: list[dict[str, Any]] = [dict(r) for r in rows]

  def __len__(self) -> int:
    return len(self.rows)

  def append(self, row: Mapping[str, Any]) -> None:
    self.rows.append(dict(row))

  @property
  def columns(self) -> list[str]:
    return _columns(self.rows)

  def column(self, name: str) -> np.ndarray:
    """Values of ``name`` (NaN where a row lacks it)."""
    return np.array([r.get(name, math.nan) for r in self.rows], np.float64)

  @property
  def steps(self) -> np.ndarray:
    return np.array([r[STEP] for r in self.rows], np.int64)

  # --------------------------------------------------------------- CSV
  def write_csv(self, path: str | os.PathLike[str]) -> Path:
    """Writes every row (atomically: a temporary file renamed over it)."""
    path = Path(path)
    with files.atomic_write(path, "w", newline="") as f:
      writer = csv.writer(f)
      columns = self.columns
      writer.writerow(columns)
      for r in self.rows:
        writer.writerow([_cell(r.get(c, math.nan)) for c in columns])
    return path

  def append_csv(
      self, path: str | os.PathLike[str], row: Mapping[str, Any]
  ) -> None:
    """Appends ``row`` to the history and to the CSV at ``path`` in one
    ``write`` (rewritten whole when missing or with other columns). A crash can
    cut the last row short; a resumed run rewrites the file from the
    checkpoint's history."""
    self.append(row)
    path = Path(path)
    header = None
    if path.is_file():
      with open(path, newline="") as f:
        header = next(csv.reader(f), None)
    columns = self.columns
    if header != columns:
      self.write_csv(path)
      return
    line = io.StringIO()
    csv.writer(line).writerow(
        [_cell(self.rows[-1].get(c, math.nan)) for c in columns]
    )
    files.append_line(path, line.getvalue())

  @classmethod
  def read_csv(cls, path: str | os.PathLike[str]) -> MetricsHistory:
    with open(path, newline="") as f:
      reader = csv.DictReader(f)
      return cls([{k: _parse(v) for k, v in r.items()} for r in reader])

  # ------------------------------------------------------------- plots
  def plot(
      self,
      rewards_path: str | os.PathLike[str] | None = None,
      loss_path: str | os.PathLike[str] | None = None,
      title: str | None = None,
  ):
    """Learning curves against the meta-step: (1) the mean reward per actor step
    and the fractions of positive and negative rewards (per group too, with
    several), (2) the meta-loss and its policy-gradient part. Saves each figure
    where a path is given; returns ``(rewards_fig, loss_fig)``."""
    figs = []
    for path, draw in (
        (rewards_path, self._draw_rewards),
        (loss_path, self._draw_loss),
    ):
      fig = _figure(path, ncols=2 if draw == self._draw_rewards else 1)
      draw(fig)
      if title:
        fig.suptitle(title)
      if path is not None:
        files.save_figure(fig, path, bbox_inches="tight")
      figs.append(fig)
    return tuple(figs)

  def _groups(self) -> list[str]:
    """Group names: prefixes of ``<group>/rewards`` columns (a name may hold
    ``/``)."""
    suffix = "/rewards"
    return sorted(
        k[: -len(suffix)]
        for k in self.columns
        if k.endswith(suffix) and "/inner/" not in k
    )

  def _draw_rewards(self, fig) -> None:
    ax_r, ax_f = fig.axes
    x = self.steps
    groups = self._groups()
    ax_r.plot(x, self.column("rewards"), label="population")
    if len(groups) > 1:
      for g in groups:
        ax_r.plot(x, self.column(f"{g}/rewards"), label=g, alpha=0.7)
    ax_r.set_ylabel("mean reward per actor step")
    ax_r.set_title("Reward")
    for sign, style in (("pos", "-"), ("neg", "--")):
      ax_f.plot(
          x,
          self.column(f"{sign}_reward_frac"),
          style,
          label=f"{sign}itive" if sign == "pos" else "negative",
      )
      if len(groups) > 1:
        for g in groups:
          ax_f.plot(
              x,
              self.column(f"{g}/{sign}_reward_frac"),
              style,
              alpha=0.6,
              label=f"{g} {sign}",
          )
    ax_f.set_ylabel("fraction of actor steps")
    ax_f.set_title("Positive / negative rewards")
    for ax in fig.axes:
      ax.set_xlabel("meta-step")
      ax.grid(True, alpha=0.3)
      ax.legend(loc="best", fontsize="small")

  def _draw_loss(self, fig) -> None:
    (ax,) = fig.axes
    x = self.steps
    ax.plot(x, self.column("meta_loss"), label="meta loss")
    ax.plot(x, self.column("pg_loss"), alpha=0.7, label="policy-gradient part")
    ax.set_xlabel("meta-step")
    ax.set_ylabel("loss")
    ax.set_title("Meta loss")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def _figure(path, ncols: int):
  if path is not None:
    from matplotlib import figure as figure_lib
    from matplotlib.backends import backend_agg

    fig = figure_lib.Figure(figsize=(6 * ncols, 4), dpi=100)
    backend_agg.FigureCanvasAgg(fig)
    fig.subplots(1, ncols)
    return fig
  from matplotlib import pyplot as plt

  fig, _ = plt.subplots(1, ncols, figsize=(6 * ncols, 4))
  return fig
