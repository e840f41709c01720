"""Learning curves, final scores with uncertainty, plots and CSV files.

Inputs are ``EvalLoop.run``'s metrics ``{name: [S, N]}`` (``S`` seeds,
``N`` iterations) with at least ``episodes`` and ``return_sum``, usually
``env_steps``. Seeds are independent samples; intervals need two. A seed
that diverged (``diverged``) has a NaN curve from then on and no final
score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import csv
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from disco import files

Metrics = Mapping[str, np.ndarray]

# Columns of the CSV that identify a row rather than hold a metric.
SEED, ITERATION, ENV_STEPS = "seed", "iteration", "env_steps"
DIVERGED = "diverged"  # 1 once the seed's learner state is non-finite


def _as_2d(metrics: Metrics, name: str) -> np.ndarray:
  if name not in metrics:
    raise KeyError(
        f"Metrics have no {name!r} entry (they have "
        f"{sorted(metrics)}); pass the output of EvalLoop.run."
    )
  value = np.asarray(metrics[name])
  if value.ndim != 2:
    raise ValueError(
        f"Metric {name!r} has shape {value.shape}; expected "
        "[num_seeds, num_iterations]."
    )
  return value


def num_seeds_and_iterations(metrics: Metrics) -> tuple[int, int]:
  return _as_2d(metrics, "episodes").shape


def concat_metrics(chunks: Sequence[Metrics]) -> dict[str, np.ndarray]:
  """Joins the metrics of consecutive ``run`` calls along the iteration axis."""
  if not chunks:
    return {}
  return {
      k: np.concatenate([np.asarray(c[k]) for c in chunks], axis=1)
      for k in chunks[0]
  }


def diverged_iterations(metrics: Metrics) -> np.ndarray:
  """``[S]`` first iteration after which each seed's learner state was
  non-finite; -1 if never (or without a ``diverged`` metric)."""
  num_seeds, _ = num_seeds_and_iterations(metrics)
  if DIVERGED not in metrics:
    return np.full(num_seeds, -1, np.int64)
  flags = _as_2d(metrics, DIVERGED) > 0
  return np.where(flags.any(axis=1), flags.argmax(axis=1), -1)


def diverged_env_steps(metrics: Metrics) -> list[int | None]:
  """Per seed, the environment steps after which it diverged, or None."""
  steps = np.asarray(metrics[ENV_STEPS]) if ENV_STEPS in metrics else None
  out = []
  for s, i in enumerate(diverged_iterations(metrics)):
    if i < 0:
      out.append(None)
    else:
      out.append(int(steps[s, i]) if steps is not None else int(i + 1))
  return out


# ------------------------------------------------------------- curves ----


def return_curve(metrics: Metrics, min_episodes: int = 100) -> np.ndarray:
  """Windowed mean return ``[S, N]``.

  ``[s, i]`` is the mean return over the shortest trailing window of
  iterations ending at ``i`` holding at least ``min_episodes`` episodes (all
  so far while fewer); NaN before the first episode and after divergence.
  """
  if min_episodes < 1:
    raise ValueError(f"min_episodes must be >= 1, got {min_episodes}.")
  episodes = _as_2d(metrics, "episodes").astype(np.float64)
  return_sum = _as_2d(metrics, "return_sum").astype(np.float64)
  zero = np.zeros_like(episodes[:, :1])
  cum_ep = np.concatenate([zero, np.cumsum(episodes, axis=1)], axis=1)
  cum_ret = np.concatenate([zero, np.cumsum(return_sum, axis=1)], axis=1)
  curve = np.empty_like(episodes)
  for s in range(episodes.shape[0]):
    end = cum_ep[s, 1:]
    # Latest window start j with cum_ep[j] <= end - min_episodes (0 if none).
    start = np.searchsorted(cum_ep[s], end - min_episodes, side="right") - 1
    start = np.clip(start, 0, None)
    count = end - cum_ep[s, start]
    total = cum_ret[s, 1:] - cum_ret[s, start]
    with np.errstate(invalid="ignore", divide="ignore"):
      curve[s] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
  for s, i in enumerate(diverged_iterations(metrics)):
    if i >= 0:
      curve[s, i + 1 :] = np.nan
  return curve


def _t_ppf(q: float, df: np.ndarray) -> np.ndarray:
  """Student's t quantile (scipy imported on first use)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

  return stats.t.ppf(q, df)


def mean_curve(
    curves: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
  """Mean over seeds of ``[S, N]`` curves (NaNs ignored) and a Student-t
  interval.

  Returns:
    ``(mean, low, high)``, each ``[N]``; ``low`` and ``high`` are None for a
    single seed, NaN where fewer than two values are finite.
  """
  curves = np.asarray(curves, dtype=np.float64)
  if curves.ndim != 2:
    raise ValueError(f"curves must be [num_seeds, N], got {curves.shape}.")
  finite = np.isfinite(curves)
  n = finite.sum(axis=0)
  filled = np.where(finite, curves, 0.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    mean = np.where(n > 0, filled.sum(axis=0) / np.maximum(n, 1), np.nan)
  if curves.shape[0] < 2:
    return mean, None, None
  sq = np.where(finite, (curves - mean) ** 2, 0.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    sem = np.sqrt(sq.sum(axis=0) / np.maximum(n - 1, 1)) / np.sqrt(
        np.maximum(n, 1)
    )
    half = _t_ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)) * sem
  half = np.where(n >= 2, half, np.nan)
  return mean, mean - half, mean + half


def text_curve(
    metrics: Metrics, min_episodes: int = 100, rows: int = 10, width: int = 40
) -> str:
  """The seed-mean learning curve as ``rows`` text lines of ``env steps | bar
  | mean return``, the bars over ``width`` characters spanning [-1, 1], or the
  curve's own range where it leaves [-1, 1]."""
  mean, _, _ = mean_curve(return_curve(metrics, min_episodes))
  steps = _as_2d(metrics, "env_steps")[0]
  idx = np.unique(
      np.linspace(0, len(mean) - 1, min(rows, len(mean))).round().astype(int)
  )
  finite = mean[np.isfinite(mean)]
  low, high, scale = -1.0, 1.0, "-1 .. +1"
  if finite.size and (finite.min() < -1.0 or finite.max() > 1.0):
    low, high = float(finite.min()), float(finite.max())
    high = high if high > low else low + 1.0
    scale = f"{low:.4g} .. {high:.4g}"
  lines = []
  for i in idx:
    value = mean[i]
    filled = (
        0
        if not np.isfinite(value)
        else int(
            round((np.clip(value, low, high) - low) / (high - low) * width)
        )
    )
    label = "   n/a" if not np.isfinite(value) else f"{value:+.3f}"
    lines.append(f"{int(steps[i]):>9d} |{'#' * filled:<{width}}| {label}")
  header = f"{'env steps':>9s} |{f'mean return ({scale})':^{width}}|"
  return "\n".join([header] + lines)


# ------------------------------------------------------- final scores ----


def final_scores(metrics: Metrics, last_episodes: int = 500) -> np.ndarray:
  """``[S]`` mean return over (about) the last ``last_episodes`` episodes,
  counted in whole iterations; NaN without episodes or after divergence."""
  if last_episodes < 1:
    raise ValueError(f"last_episodes must be >= 1, got {last_episodes}.")
  episodes = _as_2d(metrics, "episodes")
  return_sum = _as_2d(metrics, "return_sum")
  scores = []
  for ep, rs in zip(episodes, return_sum, strict=True):
    # Whole iterations from the end until they hold last_episodes episodes.
    k = int(np.searchsorted(np.cumsum(ep[::-1]), last_episodes)) + 1
    n = ep[::-1][:k].sum()
    scores.append(rs[::-1][:k].sum() / n if n else np.nan)
  scores = np.asarray(scores, np.float64)
  scores[diverged_iterations(metrics) >= 0] = np.nan
  return scores


def bootstrap_ci(
    scores: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
    method: str = "percentile",
) -> tuple[float, float] | None:
  """Bootstrap interval (``scipy.stats.bootstrap``) of the mean of ``scores``,
  or None with fewer than two finite scores. The default percentile method
  stays defined when all scores are equal (BCa does not)."""
  scores = np.asarray(scores, dtype=np.float64)
  scores = scores[np.isfinite(scores)]
  if scores.size < 2:
    return None
  if np.all(scores == scores[0]):
    return float(scores[0]), float(scores[0])
  from scipy import stats  # pylint: disable=g-import-not-at-top

  result = stats.bootstrap(
      (scores,),
      np.mean,
      confidence_level=confidence,
      n_resamples=n_resamples,
      method=method,
      vectorized=True,
      rng=np.random.default_rng(seed),
  )
  return (
      float(result.confidence_interval.low),
      float(result.confidence_interval.high),
  )


def summarize(
    metrics: Metrics, last_episodes: int = 500, confidence: float = 0.95
) -> dict[str, Any]:
  """A run's final scores and totals, as JSON-friendly values.

  Keys: ``final_return_per_seed`` (None where diverged or without episodes),
  ``final_return_mean`` and ``final_return_ci`` (``[low, high]`` or None)
  over the ``final_return_seeds`` seeds with a score, ``confidence``,
  ``last_episodes``, ``num_seeds``, ``num_diverged_seeds``,
  ``diverged_at_env_step``, ``iterations``, ``episodes`` (per seed),
  ``env_steps`` and ``learner_steps`` (after the last iteration).
  """
  scores = final_scores(metrics, last_episodes)
  finite = scores[np.isfinite(scores)]
  diverged_at = diverged_env_steps(metrics)
  ci = bootstrap_ci(scores, confidence)
  num_seeds, iterations = num_seeds_and_iterations(metrics)

  def last(name):
    if name not in metrics or iterations == 0:
      return None
    return int(np.asarray(metrics[name])[0, -1])

  return dict(
      final_return_per_seed=[_json_float(x) for x in scores],
      final_return_mean=_json_float(finite.mean()) if finite.size else None,
      final_return_ci=None if ci is None else [ci[0], ci[1]],
      final_return_seeds=int(finite.size),
      confidence=confidence,
      last_episodes=int(last_episodes),
      num_seeds=int(num_seeds),
      num_diverged_seeds=sum(x is not None for x in diverged_at),
      diverged_at_env_step=diverged_at,
      iterations=int(iterations),
      episodes=[int(x) for x in np.asarray(metrics["episodes"]).sum(axis=1)],
      env_steps=last("env_steps"),
      learner_steps=last("learner_steps"),
  )


def _json_float(x) -> float | None:
  x = float(x)
  return x if math.isfinite(x) else None


# --------------------------------------------------------------- plots ----


def _x_axis(metrics: Metrics) -> tuple[np.ndarray, str]:
  if ENV_STEPS in metrics:
    return np.asarray(metrics[ENV_STEPS])[0], "environment steps"
  return np.arange(1, num_seeds_and_iterations(metrics)[1] + 1), "iterations"


def plot_learning_curves(
    results: Mapping[str, Metrics],
    path: str | os.PathLike[str] | None = None,
    ax: Any = None,
    min_episodes: int = 100,
    confidence: float = 0.95,
    title: str | None = "Mean episode return",
):
  """Mean return against environment steps, one line per result, with a
  Student-t band for several seeds.

  Args:
    results: ``{label: metrics}``.
    path: save the figure there (drawn off-screen, leaving pyplot alone).
    ax: a matplotlib ``Axes`` to draw into (default: a new figure).
    min_episodes: episodes per window of the curves.
    confidence: level of the band.
    title: axes title (None: none).

  Returns:
    The matplotlib ``Figure``.
  """
  if ax is None:
    if path is not None:
      from matplotlib import figure as figure_lib
      from matplotlib.backends import backend_agg

      fig = figure_lib.Figure(figsize=(7, 4.5), dpi=100)
      backend_agg.FigureCanvasAgg(fig)
      ax = fig.add_subplot()
    else:
      from matplotlib import pyplot as plt

      fig, ax = plt.subplots(figsize=(7, 4.5))
  fig = ax.figure
  xlabel = "environment steps"
  for label, metrics in results.items():
    x, xlabel = _x_axis(metrics)
    curves = return_curve(metrics, min_episodes)
    mean, low, high = mean_curve(curves, confidence)
    num_seeds = curves.shape[0]
    suffix = f" ({num_seeds} seeds)" if num_seeds > 1 else ""
    (line,) = ax.plot(x, mean, label=f"{label}{suffix}")
    if low is not None:
      ax.fill_between(
          x, low, high, color=line.get_color(), alpha=0.25, linewidth=0
      )
  ax.set_xlabel(xlabel)
  ax.set_ylabel(f"mean return (last >= {min_episodes} episodes)")
  if title:
    ax.set_title(title)
  ax.grid(True, alpha=0.3)
  if results:
    ax.legend(loc="best")
  if path is not None:
    files.save_figure(fig, path, bbox_inches="tight")
  return fig


# ----------------------------------------------------------------- CSV ----


def _scalar_names(metrics: Metrics) -> list[str]:
  """Names of ``[S, N]`` metrics, ``env_steps`` first, the rest sorted."""
  names = sorted(
      k
      for k, v in metrics.items()
      if np.ndim(v) == 2 and k not in (SEED, ITERATION)
  )
  if ENV_STEPS in names:
    names.remove(ENV_STEPS)
    names.insert(0, ENV_STEPS)
  return names


def metrics_to_rows(
    metrics: Metrics, seeds: Sequence[int] | None = None
) -> list[dict[str, Any]]:
  """One dict per (seed, iteration), seed-major: ``seed``, ``iteration``
  (0-based), ``env_steps`` and every other ``[S, N]`` metric. ``seeds``
  labels the seeds (default: the ``seed`` metric, else ``0..S-1``)."""
  num_seeds, iterations = num_seeds_and_iterations(metrics)
  if seeds is None:
    seeds = (
        np.asarray(metrics[SEED])[:, 0]
        if SEED in metrics
        else np.arange(num_seeds)
    )
  seeds = [int(s) for s in seeds]
  if len(seeds) != num_seeds:
    raise ValueError(f"{len(seeds)} seed labels for {num_seeds} seeds.")
  names = _scalar_names(metrics)
  values = {k: np.asarray(metrics[k]) for k in names}
  rows = []
  for s, seed in enumerate(seeds):
    for i in range(iterations):
      row = {SEED: seed, ITERATION: i}
      for k in names:
        v = values[k][s, i]
        row[k] = int(v) if np.issubdtype(v.dtype, np.integer) else float(v)
      rows.append(row)
  return rows


def write_metrics_csv(
    path: str | os.PathLike[str],
    metrics: Metrics,
    seeds: Sequence[int] | None = None,
) -> Path:
  """Writes ``metrics_to_rows(metrics, seeds)`` as CSV atomically (exact
  floats, NaN as ``nan``)."""
  path = Path(path)
  rows = metrics_to_rows(metrics, seeds)
  columns = [SEED, ITERATION, *_scalar_names(metrics)]
  with files.atomic_write(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    for row in rows:
      writer.writerow(
          {k: repr(v) if isinstance(v, float) else v for k, v in row.items()}
      )
  return path


def read_metrics_csv(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
  """``{name: [S, N]}`` from a ``write_metrics_csv`` file.

  Seeds keep their order of first appearance; ``seed`` comes back as a
  metric, ``iteration`` does not. All-integer columns are int64.

  Raises:
    ValueError: for a file that is not such a CSV.
  """
  path = Path(path)
  with open(path, newline="") as f:
    reader = csv.DictReader(f)
    columns = reader.fieldnames or []
    rows = list(reader)
  missing = {SEED, ITERATION} - set(columns)
  if missing:
    raise ValueError(
        f"{path} is not a metrics CSV: it lacks the column(s) "
        f"{sorted(missing)}."
    )
  seeds = list(dict.fromkeys(int(r[SEED]) for r in rows))
  by_seed: dict[int, list[dict[str, str]]] = {s: [] for s in seeds}
  for r in rows:
    by_seed[int(r[SEED])].append(r)
  lengths = {len(v) for v in by_seed.values()}
  if len(lengths) > 1:
    raise ValueError(
        f"{path}: seeds have different numbers of iterations "
        f"({sorted(lengths)})."
    )
  for s in seeds:
    by_seed[s].sort(key=lambda r: int(r[ITERATION]))
  out = {}
  for name in columns:
    if name == ITERATION:
      continue
    texts = [[r[name] for r in by_seed[s]] for s in seeds]
    try:
      out[name] = np.array(
          [[int(t) for t in row] for row in texts], dtype=np.int64
      ).reshape(len(seeds), -1)
    except ValueError:
      out[name] = np.array(
          [[float(t) for t in row] for row in texts], dtype=np.float64
      ).reshape(len(seeds), -1)
  return out
