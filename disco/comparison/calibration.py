"""Error rates of the tests and intervals, by simulation (vectorised, seeded):
``false_positive_rate``, how often a ``two_sample`` test rejects at ``alpha``
when both rules' seeds share a distribution, and ``interval_coverage``, how
often a bootstrap interval (a replica of ``rliable``'s) or a Welch interval
contains the true value."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from disco.comparison import two_sample

# Score distributions of the simulated rules (the same for both: the null).
SCORES = ("normal", "discrete")
# The values and probabilities of "discrete" scores: few distinct values,
# so seeds tie, as on an environment whose optimum many seeds reach.
DISCRETE_VALUES = np.array([0.0, 0.5, 1.0])
DISCRETE_PROBS = np.array([0.2, 0.3, 0.5])
# Aggregate metrics whose interval coverage ``interval_coverage`` measures
# (of normal scores, where each equals the distribution's mean), and the
# Welch interval of the difference of two rules' means.
METRICS = ("mean", "iqm", "median", "mean_difference")
_CHUNK = 2_000_000  # resampled scores held at once


@dataclasses.dataclass(frozen=True)
class Rate:
  """A rate measured on ``trials`` simulated data sets.

  Attributes:
    rate: the fraction of data sets with the event (a rejection, a covering
      interval).
    trials: simulated data sets.
    stderr: the Monte-Carlo standard error ``sqrt(rate (1 - rate) / trials)``.
  """

  rate: float
  trials: int

  @property
  def stderr(self) -> float:
    return math.sqrt(self.rate * (1.0 - self.rate) / self.trials)


def null_scores(
    shape: tuple[int, ...], scores: str, rng: np.random.Generator
) -> np.ndarray:
  """Scores of ``shape`` from one of the ``SCORES`` distributions."""
  if scores == "normal":
    return rng.normal(0.0, 1.0, shape)
  if scores == "discrete":
    return rng.choice(DISCRETE_VALUES, size=shape, p=DISCRETE_PROBS)
  raise ValueError(f"Unknown scores {scores!r}; use one of {SCORES}.")


def false_positive_rate(
    test: str,
    num_seeds: int,
    *,
    alpha: float = 0.05,
    trials: int = 2000,
    reps: int = 200,
    scores: str = "normal",
    seed: int = 0,
) -> Rate:
  """The rate of ``p <= alpha`` of ``test`` over ``trials`` simulated
  comparisons where both rules' ``num_seeds`` seeds come from one ``scores``
  distribution; ``reps``: resamples of the resampling tests; ``seed``: of the
  data and resampling.

  Raises:
    ValueError: the test refuses ``num_seeds`` at ``alpha`` (saying how many it
      needs).
  """
  two_sample.check_enough_seeds(test, num_seeds, num_seeds, alpha)
  rng = np.random.default_rng(seed)
  a = null_scores((trials, num_seeds), scores, rng)
  b = null_scores((trials, num_seeds), scores, rng)
  _, p = two_sample.p_values(a, b, test, alpha=alpha, reps=reps, seed=seed + 1)
  return Rate(rate=float(np.mean(p <= alpha)), trials=trials)


def _metric(x: np.ndarray, metric: str) -> np.ndarray:
  """``metric`` of scores ``x`` ``[..., num_seeds, num_envs]`` -> ``[...]``,
  as ``rliable.metrics`` computes it."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

  if metric == "mean":
    return x.mean(axis=(-2, -1))
  if metric == "iqm":
    flat = x.reshape(*x.shape[:-2], -1)
    return stats.trim_mean(flat, 0.25, axis=-1)
  if metric == "median":
    return np.median(x.mean(axis=-2), axis=-1)
  raise ValueError(f"Unknown metric {metric!r}; use mean, iqm or median.")


def stratified_bootstrap_interval(
    x: np.ndarray,
    metric: str,
    *,
    confidence: float = 0.95,
    reps: int = 2000,
    rng: np.random.Generator,
) -> np.ndarray:
  """``[B, 2]`` percentile intervals of ``metric`` (``"mean"``, ``"iqm"`` or
  ``"median"``) of ``[B, num_seeds, num_envs]`` scores by ``rliable``'s
  stratified bootstrap (``reps`` resamples of each environment's seeds, drawn by
  ``rng``)."""
  batch, num_seeds, num_envs = x.shape
  step = max(1, _CHUNK // (reps * num_seeds * num_envs))
  q = 100.0 * np.array([(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
  out = np.empty((batch, 2))
  for start in range(0, batch, step):
    chunk = x[start : start + step]
    idx = rng.integers(0, num_seeds, size=(len(chunk), reps, *x.shape[1:]))
    resampled = np.take_along_axis(chunk[:, None], idx, axis=2)
    values = _metric(resampled, metric)  # [b, reps]
    out[start : start + step] = np.percentile(values, q, axis=1).T
  return out


def interval_coverage(
    metric: str,
    num_seeds: int,
    num_envs: int = 4,
    *,
    confidence: float = 0.95,
    trials: int = 2000,
    reps: int = 500,
    seed: int = 0,
) -> Rate:
  """The rate of ``trials`` intervals (``reps`` bootstrap replications, nominal
  ``confidence``, seeded) of ``metric`` containing the true value: normal scores
  (mean 0.5, std 0.2) on ``num_envs`` environments with ``num_seeds`` seeds,
  whose mean, IQM and median are 0.5; ``"mean_difference"``: the Welch interval
  of two rules' difference of means on one environment (true value 0)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

  if metric not in METRICS:
    raise ValueError(f"Unknown metric {metric!r}; use one of {METRICS}.")
  if num_seeds < 2:
    raise ValueError(f"Intervals need at least 2 seeds, got {num_seeds}.")
  rng = np.random.default_rng(seed)
  if metric == "mean_difference":
    a, b = rng.normal(0.5, 0.2, (2, trials, num_seeds))
    interval = stats.ttest_ind(a, b, equal_var=False, axis=1)
    ci = interval.confidence_interval(confidence_level=confidence)
    covered = (ci.low <= 0.0) & (0.0 <= ci.high)
  else:
    x = rng.normal(0.5, 0.2, (trials, num_seeds, num_envs))
    ci = stratified_bootstrap_interval(
        x, metric, confidence=confidence, reps=reps, rng=rng
    )
    covered = (ci[:, 0] <= 0.5) & (0.5 <= ci[:, 1])
  return Rate(rate=float(np.mean(covered)), trials=trials)
