"""Calibration by simulation: every test keeps its false-positive rate and
the intervals' coverage is what the report says (disco.comparison.calibration).

Each check simulates a few thousand null data sets at once (seeded, a second
or less each); a rate may exceed its promise by at most three Monte-Carlo
standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from disco.comparison import calibration
from disco.comparison import two_sample
from disco.scoring import aggregates

ALPHA = 0.05
TRIALS = 2000
SEEDS = (2, 3, 5, 10)


def _bound(rate: float, trials: int = TRIALS) -> float:
  """``rate`` plus three standard errors of a rate measured at ``rate``."""
  return rate + 3.0 * math.sqrt(rate * (1.0 - rate) / trials)


@pytest.mark.parametrize("scores", calibration.SCORES)
@pytest.mark.parametrize("num_seeds", SEEDS)
@pytest.mark.parametrize("test", two_sample.TESTS)
def test_false_positive_rate_is_at_most_alpha(test, num_seeds, scores):
  """Normal scores, and "discrete" ones (three values: most seeds tie, as at
  an environment's optimum, and whole samples are often constant)."""
  if num_seeds < two_sample.min_seeds(test, ALPHA):
    with pytest.raises(ValueError, match="needs at least") as info:
      calibration.false_positive_rate(test, num_seeds, alpha=ALPHA)
    assert "\n" not in str(info.value)
    return
  measured = calibration.false_positive_rate(
      test,
      num_seeds,
      alpha=ALPHA,
      trials=TRIALS,
      scores=scores,
      seed=num_seeds,
  )
  assert measured.rate <= _bound(ALPHA), measured


def test_false_positive_rate_at_a_stricter_alpha():
  for test in two_sample.TESTS:
    measured = calibration.false_positive_rate(
        test, 6, alpha=0.01, trials=4000, seed=1
    )
    assert measured.rate <= _bound(0.01, 4000), (test, measured)


@pytest.mark.parametrize("num_seeds", SEEDS)
def test_coverage_of_the_mean_matches_the_report_note(num_seeds):
  measured = calibration.interval_coverage(
      "mean", num_seeds, num_envs=4, trials=TRIALS, reps=400, seed=num_seeds
  )
  predicted = aggregates.approximate_coverage(num_seeds, 4, 0.95)
  assert abs(measured.rate - predicted) <= 3 * measured.stderr + 0.01
  note = aggregates.coverage_note(num_seeds, 4, 0.95)
  # Short of the nominal 95% at every one of these seed counts.
  assert measured.rate < 0.95 - 2 * measured.stderr
  assert note is not None and f"{predicted:.0%}, not 95%" in note


@pytest.mark.parametrize("metric", ["iqm", "median"])
def test_coverage_of_other_aggregates_falls_short_at_few_seeds(metric):
  for num_seeds in (2, 3):
    measured = calibration.interval_coverage(
        metric, num_seeds, num_envs=4, trials=1000, reps=400, seed=num_seeds
    )
    assert measured.rate < 0.9, (num_seeds, measured)
    assert aggregates.coverage_note(num_seeds, 4, 0.95) is not None


def test_no_note_with_many_seeds_or_a_task_bootstrap():
  assert aggregates.coverage_note(50, 4, 0.95) is None
  assert aggregates.coverage_note(2, 4, 0.95, task_bootstrap=True) is None
  assert aggregates.approximate_coverage(2, 4, 0.5) < 0.5


@pytest.mark.parametrize("num_seeds", SEEDS)
def test_welch_interval_of_the_difference_keeps_its_coverage(num_seeds):
  measured = calibration.interval_coverage(
      "mean_difference", num_seeds, trials=TRIALS, seed=num_seeds
  )
  assert measured.rate >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / TRIALS)


def test_bootstrap_replica_matches_rliable():
  """The simulated intervals are rliable's (up to resampling noise)."""
  rng = np.random.default_rng(4)
  x = rng.normal(0.5, 0.2, (5, 3))
  (result,) = aggregates.aggregate_metrics({"r": x}, reps=5000).values()
  for metric in ("mean", "iqm", "median"):
    expected = result.metric(metric)
    low, high = calibration.stratified_bootstrap_interval(
        x[None], metric, reps=5000, rng=rng
    )[0]
    tol = 0.05 * expected.width
    assert low == pytest.approx(expected.low, abs=tol), metric
    assert high == pytest.approx(expected.high, abs=tol), metric


def test_bad_arguments():
  with pytest.raises(ValueError, match="Unknown scores"):
    calibration.false_positive_rate("welch", 3, scores="uniform")
  with pytest.raises(ValueError, match="Unknown metric"):
    calibration.interval_coverage("mode", 3)
