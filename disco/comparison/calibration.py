"""Error rates of the tests and intervals, measured by simulation.

A test promises a false-positive rate of at most ``alpha`` and an interval
a coverage of ``confidence``; with the few seeds of RL experiments the
approximations behind them can break that promise. This module measures
both on many simulated data sets at once (vectorised NumPy, seeded):

* ``false_positive_rate``: how often a test of ``significance`` rejects at
  ``alpha`` when both rules' seeds come from the same distribution (the
  null hypothesis holds), through the same code as ``run_test``;
* ``interval_coverage``: how often an interval contains the known value:
  the aggregates' stratified-bootstrap intervals (a vectorised replica of
  ``rliable``'s percentile bootstrap, see ``stratified_bootstrap_interval``)
  of the mean, IQM and median of normal scores, and the Welch interval of a
  difference of means.

The tests of this package check every test's rate at 2, 3, 5 and 10 seeds;
``benchmarks/stats_calibration.py`` prints the table in ``BENCHMARKS.md``.
"""

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
    rate: the fraction of data sets with the event (a rejection, an interval
      containing the true value).
    trials: simulated data sets.
    stderr: the Monte-Carlo standard error ``sqrt(rate (1 - rate) /
      trials)``.
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
  """How often ``test`` rejects at ``alpha`` under the null hypothesis.

  Args:
    test: one of ``two_sample.TESTS``.
    num_seeds: seeds per rule.
    alpha: the significance level.
    trials: simulated comparisons (each two rules' seeds drawn from the same
      ``scores`` distribution).
    reps: resamples of the bootstrap and permutation tests (their p-values
      stay valid with few).
    scores: one of ``SCORES``.
    seed: seed of the data and the resampling.

  Returns:
    The rate of ``p <= alpha``.

  Raises:
    ValueError: if the test refuses ``num_seeds`` at ``alpha`` (one line
      saying how many it needs).
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
  """Percentile intervals of ``rliable``'s stratified bootstrap, for a batch.

  Like ``rliable.library.StratifiedBootstrap`` (and so
  ``aggregates.aggregate_metrics``), each replication draws the seeds of
  every environment independently with replacement, and the interval is
  the ``(1 -+ confidence) / 2`` percentiles of the replications' metric.

  Args:
    x: ``[B, num_seeds, num_envs]`` scores of ``B`` data sets.
    metric: ``"mean"``, ``"iqm"`` or ``"median"``.
    confidence: the nominal coverage.
    reps: bootstrap replications.
    rng: the generator of the resamples.

  Returns:
    ``[B, 2]`` (low, high).
  """
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
  """How often an interval of ``metric`` contains the true value.

  The scores are normal (mean 0.5, standard deviation 0.2, the same on
  every environment), so the mean, IQM and median over environments all
  equal 0.5; ``"mean_difference"`` is the Welch interval of the difference
  of two rules' means (``significance.mean_difference_interval``, on
  ``num_seeds`` seeds per rule of one environment; true value 0).

  Args:
    metric: one of ``METRICS``.
    num_seeds: seeds per environment (per rule).
    num_envs: environments of the aggregate metrics.
    confidence: the nominal coverage.
    trials: simulated data sets.
    reps: bootstrap replications per interval.
    seed: seed of the data and the resampling.

  Returns:
    The rate of intervals containing the true value.
  """
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
