"""Figures of ``disco.scoring.aggregates`` results, saved as PNG files.

Every function draws on an off-screen Agg canvas (pyplot's state is left alone),
saves the figure to ``path`` (creating its folder) and returns ``path``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import os
from pathlib import Path
from typing import Any

import numpy as np

from disco import files
from disco.scoring import aggregates

PathLike = str | os.PathLike[str]

_METRIC_TITLES = {
    "median": "Median",
    "iqm": "IQM",
    "mean": "Mean",
    "optimality_gap": "Optimality Gap",
}


# matplotlib and rliable.plot_utils are slow to import: the drawing functions
# import them.


def _plot_utils():
  from rliable import plot_utils  # pylint: disable=g-import-not-at-top

  return plot_utils


def _new_figure(
    figsize: tuple[float, float], ncols: int = 1
) -> tuple[Any, Any]:
  from matplotlib import figure as figure_lib  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top

  fig = figure_lib.Figure(figsize=figsize, dpi=100, layout="constrained")
  backend_agg.FigureCanvasAgg(fig)
  axes = fig.subplots(1, ncols, squeeze=False)[0]
  return fig, axes


def _save(fig: Any, path: PathLike) -> Path:
  return files.save_figure(fig, path, bbox_inches="tight", format="png")


def _colors(names: Sequence[str]) -> dict[str, Any]:
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top

  palette = colormaps["tab10"]
  return {name: palette(i % 10) for i, name in enumerate(names)}


def plot_aggregate_intervals(
    results: Mapping[str, aggregates.AggregateResult],
    path: PathLike,
    metrics: Sequence[str] = aggregates.METRICS,
    xlabel: str = "Normalized score",
) -> Path:
  """One panel per metric: each rule's interval as a bar, its estimate as a
  tick.

  Args:
    results: ``{rule: AggregateResult}`` from ``aggregate_metrics``.
    path: PNG file to write.
    metrics: metrics to show, a subset of ``aggregates.METRICS``.
    xlabel: label under the panels.
  """
  if not results:
    raise ValueError("No results to plot.")
  rules = list(results)
  colors = _colors(rules)
  fig, axes = _new_figure(
      (3.4 * len(metrics), 0.6 + 0.45 * len(rules)), ncols=len(metrics)
  )
  for ax, name in zip(axes, metrics, strict=True):
    for i, rule in enumerate(rules):
      interval = results[rule].metric(name)
      ax.barh(
          y=i,
          width=interval.high - interval.low,
          left=interval.low,
          height=0.6,
          color=colors[rule],
          alpha=0.75,
      )
      ax.vlines(interval.estimate, i - 0.3, i + 0.3, color="k", alpha=0.6)
    ax.set_title(_METRIC_TITLES.get(name, name))
    ax.set_yticks(range(len(rules)))
    ax.set_yticklabels(rules if ax is axes[0] else [])
    ax.set_ylim(-0.6, len(rules) - 0.4)
    ax.grid(True, axis="x", alpha=0.25)
    for side in ("top", "right", "left"):
      ax.spines[side].set_visible(False)
  fig.supxlabel(xlabel)
  return _save(fig, path)


def plot_performance_profiles(
    profiles: Mapping[str, aggregates.PerformanceProfile],
    path: PathLike,
    xlabel: str = r"Normalized score ($\tau$)",
) -> Path:
  """Score distributions with their bands (``rliable.plot_utils``).

  Args:
    profiles: ``{rule: PerformanceProfile}`` (all on the same ``taus``).
    path: PNG file to write.
    xlabel: x-axis label.
  """
  if not profiles:
    raise ValueError("No profiles to plot.")
  taus = next(iter(profiles.values())).taus
  fig, (ax,) = _new_figure((7, 4.5))
  _plot_utils().plot_performance_profiles(
      {r: p.fraction for r, p in profiles.items()},
      taus,
      performance_profile_cis={r: (p.low, p.high) for r, p in profiles.items()},
      colors=_colors(list(profiles)),
      xlabel=xlabel,
      ax=ax,
      legend=True,
      labelsize="large",
      ticklabelsize="medium",
      legendsize="medium",
  )
  return _save(fig, path)


def plot_probability_of_improvement(
    probabilities: Mapping[tuple[str, str], aggregates.ImprovementProbability],
    path: PathLike,
) -> Path:
  """P(X > Y) of each pair as an interval (``rliable.plot_utils``).

  Args:
    probabilities: ``{(x, y): ImprovementProbability}``.
    path: PNG file to write.
  """
  if not probabilities:
    raise ValueError("No probabilities to plot.")
  # rliable splits "x<sep>y" keys; use a separator no rule name contains.
  sep = "\x1f"
  estimates, intervals = {}, {}
  for (x, y), result in probabilities.items():
    key = f"{x}{sep}{y}"
    estimates[key] = result.probability.estimate
    intervals[key] = np.array([result.probability.low, result.probability.high])
  fig, (ax,) = _new_figure((5, 0.8 + 0.45 * len(estimates)))
  _plot_utils().plot_probability_of_improvement(
      estimates,
      intervals,
      pair_separator=sep,
      ax=ax,
      xlabel="P(X > Y)",
      ticklabelsize="medium",
      labelsize="large",
  )
  ax.axvline(0.5, color="k", linestyle="--", alpha=0.4)
  return _save(fig, path)


def plot_sample_efficiency(
    curves: Mapping[str, aggregates.SampleEfficiencyCurve],
    path: PathLike,
    xlabel: str = "Environment steps",
    ylabel: str = "IQM normalized score",
) -> Path:
  """IQM against evaluation points with bands (``rliable.plot_utils``).

  Args:
    curves: ``{rule: SampleEfficiencyCurve}``.
    path: PNG file to write.
    xlabel: x-axis label.
    ylabel: y-axis label.
  """
  if not curves:
    raise ValueError("No curves to plot.")
  points = next(iter(curves.values())).points
  fig, (ax,) = _new_figure((7, 4.5))
  _plot_utils().plot_sample_efficiency_curve(
      points,
      {r: c.iqm for r, c in curves.items()},
      {r: np.stack([c.low, c.high]) for r, c in curves.items()},
      colors=_colors(list(curves)),
      xlabel=xlabel,
      ylabel=ylabel,
      ax=ax,
      labelsize="large",
      ticklabelsize="medium",
      legend=True,
      legendsize="medium",
  )
  return _save(fig, path)


def _finite_mean(values: np.ndarray) -> np.ndarray:
  """``[S, N]`` -> ``[N]``: the mean over ``S`` of the finite entries; NaN
  where there are none."""
  finite = np.isfinite(values)
  count = finite.sum(axis=0)
  total = np.where(finite, values, 0.0).sum(axis=0)
  return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def plot_hyper_parameters(
    metrics: Mapping[str, Mapping[str, np.ndarray]],
    prefix: str,
    path: PathLike,
    title: str = "",
) -> Path | None:
  """Each rule's logged hyper-parameters (columns ``prefix + name`` of its
  ``{name: [S, N]}`` metrics) over env steps, the mean over seeds relative to
  the first value, one panel per rule; None (nothing drawn) when no rule
  logs any."""
  logged = {
      rule: sorted(k for k in m if k.startswith(prefix))
      for rule, m in metrics.items()
  }
  logged = {rule: names for rule, names in logged.items() if names}
  if not logged:
    return None
  fig, axes = _new_figure((4.5 * len(logged), 3.2), ncols=len(logged))
  for ax, (rule, names) in zip(axes, logged.items(), strict=True):
    steps = np.asarray(metrics[rule]["env_steps"])[0]
    for name in names:
      mean = _finite_mean(np.asarray(metrics[rule][name], dtype=float))
      finite = np.isfinite(mean)
      if not finite.any():
        continue
      start = mean[finite][0]
      scale = start if start else 1.0
      ax.plot(
          steps[finite],
          mean[finite] / scale,
          label=f"{name[len(prefix):]} (from {start:.3g})",
      )
    ax.set_title(f"{rule}{': ' + title if title else ''}", fontsize=9)
    ax.set_xlabel("env steps")
    ax.set_ylabel("value / first value")
    ax.legend(fontsize=7)
  return _save(fig, path)
