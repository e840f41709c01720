"""Tests of disco.comparison.significance and disco.scoring.aggregates."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from disco.comparison import effect_sizes
from disco.comparison import report
from disco.comparison import significance
from disco.comparison import two_sample
from disco.scoring import aggregates

REPS = 200  # bootstrap replications: small, these tests only check behaviour


def _shifted_samples(n=10, shift=3.0, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(0.0, 1.0, n), rng.normal(shift, 1.0, n)


# ------------------------------------------------------- significance ----


@pytest.mark.parametrize("test", two_sample.TESTS)
def test_identical_samples_give_p_near_one(test):
  a, _ = _shifted_samples()
  result = two_sample.run_test(a, a.copy(), test, reps=REPS)
  assert result.p_value > 0.9
  assert result.effect_size == 0.0
  assert result.seeds_needed is None
  assert "effect size is 0" in result.warning


@pytest.mark.parametrize("test", two_sample.TESTS)
def test_equal_constant_samples_give_p_one(test):
  result = two_sample.run_test(np.ones(5), np.ones(5), test, reps=REPS)
  assert result.p_value == pytest.approx(1.0)


@pytest.mark.parametrize("test", two_sample.TESTS)
def test_clear_shift_is_significant(test):
  a, b = _shifted_samples()
  result = two_sample.run_test(a, b, test, alpha=0.05, reps=REPS)
  assert result.p_value < 0.05
  assert result.effect_size < 0  # a is the lower rule
  assert result.n_a == result.n_b == 10


def test_welch_matches_scipy():
  rng = np.random.default_rng(1)
  a, b = rng.normal(0.0, 1.0, 7), rng.normal(0.8, 2.5, 12)
  expected = stats.ttest_ind(a, b, equal_var=False)
  result = two_sample.run_test(a, b, "welch")
  assert result.statistic == pytest.approx(expected.statistic, rel=1e-12)
  assert result.p_value == pytest.approx(expected.pvalue, rel=1e-12)


def test_mann_whitney_matches_scipy_and_rank_biserial():
  a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0, 8.0, 9.0])
  result = two_sample.run_test(a, b, "mann_whitney")
  expected = stats.mannwhitneyu(a, b, alternative="two-sided")
  assert result.p_value == pytest.approx(expected.pvalue)
  assert result.statistic == 0.0
  # Every seed of a is below every seed of b: P(a > b) - P(a < b) = -1.
  assert result.effect_size == -1.0
  assert result.effect_size_name == "rank_biserial"


@pytest.mark.parametrize("test", ["bootstrap", "permutation"])
def test_resampling_tests_are_seeded(test):
  rng = np.random.default_rng(2)
  a, b = rng.normal(0.0, 1.0, 8), rng.normal(0.7, 1.0, 8)
  first = two_sample.run_test(a, b, test, reps=REPS, seed=3)
  again = two_sample.run_test(a, b, test, reps=REPS, seed=3)
  assert first.p_value == again.p_value
  p_values = {
      two_sample.run_test(a, b, test, reps=REPS, seed=s).p_value
      for s in range(5)
  }
  assert len(p_values) > 1


def test_permutation_is_exact_for_small_samples():
  # 4 vs 4 fully separated seeds: 70 relabellings, 2 as extreme as observed.
  a, b = np.arange(4.0), np.arange(4.0) + 10
  result = two_sample.run_test(a, b, "permutation", reps=10000)
  assert result.p_value == pytest.approx(2 / 70)


def test_bootstrap_test_is_studentized():
  """The issue's example: the raw-difference bootstrap gave p = 1e-4 where
  Welch gives 0.2; resampling Welch's t keeps the two close."""
  a, b = [0.1, 0.3, 0.2], [0.5, 0.9, 0.7]
  welch = two_sample.run_test(a, b, "welch")
  boot = two_sample.run_test(a, b, "bootstrap", reps=2000)
  assert welch.p_value > 0.01
  assert boot.p_value > 0.01
  assert boot.statistic == pytest.approx(welch.statistic)


def test_bootstrap_false_positive_rate_at_five_seeds():
  # Old (unstudentized) test: 0.12 here; alpha + 3 standard errors is 0.088.
  rng = np.random.default_rng(11)
  trials, alpha = 300, 0.05
  rejected = sum(
      two_sample.run_test(
          rng.normal(size=5), rng.normal(size=5), "bootstrap", reps=200, seed=i
      ).p_value
      <= alpha
      for i in range(trials)
  )
  assert rejected / trials <= alpha + 3 * math.sqrt(
      alpha * (1 - alpha) / trials
  )


def test_bootstrap_refuses_two_seeds():
  with pytest.raises(ValueError, match="at least 3 seeds per rule"):
    two_sample.run_test([0.1, 0.3], [0.5, 0.9], "bootstrap")


def test_mann_whitney_with_ties_is_exact():
  # All 70 splits of the 8 values: 10 give a |U - 8| of at least 6.
  a, b = [1.0, 1.0, 1.0, 1.0], [1.0, 0.95, 0.9, 0.8]
  result = two_sample.run_test(a, b, "mann_whitney")
  assert result.p_value == pytest.approx(10 / 70)
  assert result.statistic == 14.0


@pytest.mark.parametrize("test", ["welch", "bootstrap"])
def test_constant_samples_fall_back_to_the_exact_permutation_test(test):
  result = two_sample.run_test([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], test)
  # Welch's t is 0/0 scaled: undefined. Of the 20 splits of the six values,
  # 2 separate them as much as observed.
  assert math.isnan(result.statistic)
  assert result.p_value == pytest.approx(2 / 20)
  assert "no variance" in result.warning.lower()
  same = two_sample.run_test([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], test)
  assert same.p_value == 1.0


def _strict_json(text):
  def refuse(name):
    raise ValueError(f"{name} is not JSON")

  return json.loads(text, parse_constant=refuse)


def test_statistics_of_constant_samples_are_strict_json():
  rows = significance.pairwise_table(
      {"a": [1.0, 1.0, 1.0], "b": [0.0, 0.0, 0.0]}
  )
  text = report.json_text({"tests": [r.as_dict() for r in rows]})
  row = _strict_json(text)["tests"][0]
  assert row["statistic"] is None  # Welch's t is undefined
  assert row["hedges_g"] is None  # infinite
  assert row["p_value"] == pytest.approx(0.1)
  assert report.jsonable({"x": (np.float64(2.0), np.int64(3), -math.inf)}) == {
      "x": [2.0, 3, None]
  }


def test_rows_carry_the_welch_interval_of_the_difference():
  a, b = _shifted_samples(n=6, shift=1.0)
  (row,) = significance.pairwise_table(
      {"a": a, "b": b}, test="mann_whitney", confidence=0.9
  )
  expected = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.9)
  assert (row.diff_low, row.diff_high) == pytest.approx(
      (expected.low, expected.high)
  )
  assert row.diff_low < row.mean_a - row.mean_b < row.diff_high
  assert row.confidence == 0.9
  wide = two_sample.run_test(a, b, confidence=0.99)
  assert wide.diff_high - wide.diff_low > row.diff_high - row.diff_low
  assert "[" in significance.format_table([row])


def test_rows_hold_their_test_result_and_keep_their_json_layout():
  a, b = _shifted_samples(n=6, shift=1.0)
  (row,) = significance.pairwise_table({"a": a, "b": b}, reps=REPS)
  assert row.result == two_sample.run_test(a, b, reps=REPS)
  assert row.p_value is row.result.p_value and row.mean_b == row.result.mean_b
  with pytest.raises(AttributeError, match="no attribute 'nope'"):
    row.nope  # noqa: B018
  assert copy.deepcopy(row) == row
  assert pickle.loads(pickle.dumps(row)) == row
  flat = row.as_dict()
  # statistics.json's layout: every field of the test and of the row, flat,
  # in this order.
  assert list(flat) == [
      "rule_a",
      "rule_b",
      "test",
      "statistic",
      "p_value",
      "p_holm",
      "reject",
      "alpha",
      "effect_size",
      "effect_size_name",
      "hedges_g",
      "mean_a",
      "mean_b",
      "n_a",
      "n_b",
      "seeds_needed",
      "warning",
      "confidence",
      "diff_low",
      "diff_high",
      "min_effect",
  ]
  fields = {f.name for f in dataclasses.fields(two_sample.TestResult)}
  fields |= {f.name for f in dataclasses.fields(row)} - {"result"}
  assert set(flat) == fields
  assert flat["p_value"] == row.p_value and flat["p_holm"] == row.p_holm


def test_min_effect_sets_the_seeds_needed():
  a, b = _shifted_samples(n=10, shift=3.0)
  observed = two_sample.run_test(a, b)
  assert observed.warning is None  # a large observed effect: enough seeds
  planned = two_sample.run_test(a, b, min_effect=0.5)
  assert planned.seeds_needed == 64  # Cohen's table, d = 0.5
  assert planned.min_effect == 0.5
  assert "minimum effect of interest of |g|=0.5" in planned.warning
  same = two_sample.run_test(a, a.copy(), min_effect=1.0)
  assert same.seeds_needed == 17
  assert "effect size is 0" not in same.warning
  with pytest.raises(ValueError, match="min_effect"):
    two_sample.run_test(a, b, min_effect=0.0)


def test_apply_holm_over_several_tables():
  rng = np.random.default_rng(12)
  tables = {
      env: significance.pairwise_table(
          {r: rng.normal(i * shift, 1.0, 6) for i, r in enumerate("xyz")}
      )
      for env, shift in (("e1", 1.0), ("e2", 0.3))
  }
  joint = significance.apply_holm(tables, alpha=0.05)
  flat = [r for rows in tables.values() for r in rows]
  np.testing.assert_allclose(
      [r.p_holm for rows in joint.values() for r in rows],
      two_sample.holm_bonferroni([r.p_value for r in flat]),
  )
  for name in tables:
    for separate, together in zip(tables[name], joint[name], strict=True):
      assert together.p_holm >= separate.p_holm
      assert together.reject == (together.p_holm <= 0.05)
      assert together.p_value == separate.p_value


def test_holm_bonferroni_hand_example():
  # Sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, max(0.04*1, 0.06)=0.06.
  adjusted = two_sample.holm_bonferroni([0.01, 0.04, 0.03, 0.005])
  np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02])
  # 0.02*2 = 0.04; 0.03*1 = 0.03 is raised to 0.04 (monotone step-down).
  np.testing.assert_allclose(
      two_sample.holm_bonferroni([0.03, 0.02]), [0.04, 0.04]
  )
  np.testing.assert_allclose(two_sample.holm_bonferroni([0.6, 0.9]), [1.0, 1.0])


def test_hedges_g_hand_example():
  a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0, 7.0]
  # Means 3 and 5, both variances 2.5: d = -2 / sqrt(2.5).
  d = -2.0 / math.sqrt(2.5)
  assert effect_sizes.cohens_d(a, b) == pytest.approx(d)
  # J(8) = G(4) / (sqrt(4) G(3.5)) with G(4) = 6, G(3.5) = 15 sqrt(pi) / 8.
  j = 6.0 / (2.0 * 15.0 * math.sqrt(math.pi) / 8.0)
  assert j == pytest.approx(0.902703, abs=1e-6)
  assert effect_sizes.hedges_g(a, b) == pytest.approx(d * j)
  assert effect_sizes.hedges_g(a, b) == pytest.approx(-1.141839, abs=1e-6)


def test_seeds_needed_matches_power_tables():
  # Two-sided two-sample t-test, alpha 0.05, power 0.8 (Cohen 1988).
  assert effect_sizes.seeds_needed(1.0) == 17
  assert effect_sizes.seeds_needed(0.5) == 64
  assert effect_sizes.seeds_needed(-0.8) == 26
  assert effect_sizes.t_test_power(1.0, 17) >= 0.8
  assert effect_sizes.t_test_power(1.0, 16) < 0.8
  assert effect_sizes.t_test_power(1.0, 16) == pytest.approx(0.7813, abs=1e-3)
  assert effect_sizes.seeds_needed(0.0) is None
  assert effect_sizes.seeds_needed(math.inf) == 2


def test_underpowered_comparison_warns_with_seeds_needed():
  rng = np.random.default_rng(5)
  a, b = rng.normal(0.0, 1.0, 5), rng.normal(0.5, 1.0, 5)
  result = two_sample.run_test(a, b)
  needed = effect_sizes.seeds_needed(result.hedges_g)
  assert needed > 5
  assert result.seeds_needed == needed
  assert f"needs {needed} seeds per rule" in result.warning
  a, b = _shifted_samples(n=10, shift=3.0)
  assert two_sample.run_test(a, b).warning is None


@pytest.mark.parametrize(
    "test,n,alpha,needed",
    [
        ("welch", 1, 0.05, 2),
        ("bootstrap", 2, 0.05, 3),
        ("bootstrap", 3, 0.01, 4),
        ("mann_whitney", 3, 0.05, 4),
        ("permutation", 3, 0.05, 4),
        ("mann_whitney", 4, 0.01, 5),
    ],
)
def test_too_few_seeds_name_the_minimum(test, n, alpha, needed):
  assert two_sample.min_seeds(test, alpha) == needed
  a, b = _shifted_samples(n=n)
  with pytest.raises(ValueError, match=f"at least {needed} seeds per rule"):
    two_sample.run_test(a, b, test, alpha=alpha)
  a, b = _shifted_samples(n=needed)
  two_sample.run_test(a, b, test, alpha=alpha, reps=REPS)


def test_bad_arguments_raise():
  a, b = _shifted_samples()
  with pytest.raises(ValueError, match="Unknown test"):
    two_sample.run_test(a, b, "t_test")
  with pytest.raises(ValueError, match="alpha"):
    two_sample.run_test(a, b, alpha=1.5)
  with pytest.raises(ValueError, match="NaN"):
    two_sample.run_test(np.append(a, np.nan), b)


def test_pairwise_table_applies_holm_over_all_pairs():
  rng = np.random.default_rng(6)
  scores = {
      "low": rng.normal(0.0, 1.0, 10),
      "high": rng.normal(3.0, 1.0, 10),
      "low_too": rng.normal(0.0, 1.0, 10),
  }
  rows = significance.pairwise_table(scores, alpha=0.05)
  assert [(r.rule_a, r.rule_b) for r in rows] == [
      ("low", "high"),
      ("low", "low_too"),
      ("high", "low_too"),
  ]
  np.testing.assert_allclose(
      [r.p_holm for r in rows],
      two_sample.holm_bonferroni([r.p_value for r in rows]),
  )
  assert [r.reject for r in rows] == [True, False, True]
  assert all(r.p_holm >= r.p_value for r in rows)
  text = significance.format_table(rows)
  assert "low_too" in text and "p_holm" in text


def test_pairwise_table_rejects_on_the_holm_p_value():
  base = np.arange(6.0)
  scores = {"x": base, "y": base + 2.7, "z": base + 0.5}
  rows = significance.pairwise_table(scores, alpha=0.05)
  # x vs y alone would be significant, but not after the correction for
  # three comparisons.
  assert rows[0].p_value < 0.05 < rows[0].p_holm
  assert not rows[0].reject
  assert [r.reject for r in rows] == [r.p_holm <= 0.05 for r in rows]


def test_pairwise_table_on_one_env_and_on_aggregates():
  rng = np.random.default_rng(7)
  scores = {
      "a": rng.normal(0.0, 0.1, (6, 3)),
      "b": rng.normal(1.0, 0.1, (6, 3)),
  }
  per_env = significance.pairwise_table(
      significance.env_scores(scores, 1), test="mann_whitney"
  )
  assert per_env[0].p_value < 0.05
  aggregated = {
      r: significance.per_seed_aggregate(x, "iqm") for r, x in scores.items()
  }
  assert aggregated["a"].shape == (6,)
  rows = significance.pairwise_table(aggregated, test="welch")
  assert rows[0].reject


def test_pairwise_table_names_the_pair_with_too_few_seeds():
  scores = {"a": [0.1, 0.2, 0.3], "b": [0.4, 0.5, 0.6]}
  with pytest.raises(ValueError, match="a vs b.*at least 4 seeds"):
    significance.pairwise_table(scores, test="mann_whitney")


# --------------------------------------------------------- aggregates ----


def test_iqm_of_known_array():
  # The middle half of 0..6 and an outlier is 2, 3, 4, 5.
  scores = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 100.0]])
  assert aggregates.iqm(scores) == pytest.approx(3.5)


def _normal_scores(num_seeds, num_envs=4, mean=0.5, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(mean, 0.2, (num_seeds, num_envs))


def test_aggregate_intervals_contain_estimates():
  scores = {"a": _normal_scores(5), "b": _normal_scores(5, mean=0.8, seed=1)}
  results = aggregates.aggregate_metrics(scores, reps=REPS)
  assert list(results) == ["a", "b"]
  for result in results.values():
    for name in aggregates.METRICS:
      interval = result.metric(name)
      assert interval.contains(interval.estimate)
      assert interval.width > 0
  a = results["a"]
  assert a.iqm.estimate == pytest.approx(aggregates.iqm(scores["a"]))
  assert a.mean.estimate == pytest.approx(scores["a"].mean())
  assert a.median.estimate == pytest.approx(np.median(scores["a"].mean(axis=0)))
  assert a.optimality_gap.estimate == pytest.approx(
      1.0 - np.minimum(scores["a"], 1.0).mean()
  )
  assert (a.num_seeds, a.num_envs, a.reps) == (5, 4, REPS)


def test_confidence_sets_the_interval_width():
  scores = {"a": _normal_scores(8)}
  wide = aggregates.aggregate_metrics(scores, reps=REPS, confidence=0.95)
  narrow = aggregates.aggregate_metrics(scores, reps=REPS, confidence=0.5)
  assert narrow["a"].iqm.width < 0.75 * wide["a"].iqm.width
  assert narrow["a"].confidence == 0.5


def test_aggregate_intervals_shrink_with_more_seeds():
  few = aggregates.aggregate_metrics({"r": _normal_scores(4)}, reps=REPS)
  many = aggregates.aggregate_metrics({"r": _normal_scores(64)}, reps=REPS)
  for name in aggregates.METRICS:
    assert many["r"].metric(name).width < 0.5 * few["r"].metric(name).width


def test_bootstrap_is_reproducible_and_leaves_global_rng_alone():
  scores = {"a": _normal_scores(5), "b": _normal_scores(5, seed=1)}
  np.random.seed(123)
  expected_next = np.random.random()
  np.random.seed(123)
  first = aggregates.aggregate_metrics(scores, reps=REPS, seed=7)
  assert np.random.random() == expected_next
  again = aggregates.aggregate_metrics(scores, reps=REPS, seed=7)
  other = aggregates.aggregate_metrics(scores, reps=REPS, seed=8)
  assert first == again
  assert first["a"].iqm != other["a"].iqm
  # A rule's intervals do not depend on the other rules in the dict.
  alone = aggregates.aggregate_metrics({"b": scores["b"]}, reps=REPS, seed=7)
  assert alone["b"] == first["b"]


def test_probability_of_improvement_identical_and_shifted():
  a, b = _shifted_samples(n=10, shift=3.0)
  scores = {"a": a[:, None], "same": a[:, None].copy(), "b": b[:, None]}
  results = aggregates.probability_of_improvement(scores, reps=REPS)
  assert len(results) == 6  # every ordered pair
  assert results[("a", "same")].probability.estimate == 0.5
  assert results[("b", "a")].probability.estimate > 0.95
  assert results[("a", "b")].probability.estimate < 0.05
  assert (
      results[("a", "b")].probability.estimate
      + results[("b", "a")].probability.estimate
  ) == pytest.approx(1.0)
  interval = results[("b", "a")].probability
  assert interval.contains(interval.estimate)


def test_performance_profiles():
  scores = {"a": _normal_scores(5), "b": _normal_scores(5, mean=0.9, seed=1)}
  taus = np.linspace(-1.0, 2.0, 31)
  profiles = aggregates.performance_profiles(scores, taus, reps=REPS)
  for profile in profiles.values():
    assert profile.fraction.shape == profile.low.shape == (31,)
    assert profile.fraction[0] == 1.0 and profile.fraction[-1] == 0.0
    assert np.all(np.diff(profile.fraction) <= 0)
    assert np.all(profile.low <= profile.fraction + 1e-12)
    assert np.all(profile.fraction <= profile.high + 1e-12)
  # b's scores are higher: its profile lies on or above a's.
  assert np.all(profiles["b"].fraction >= profiles["a"].fraction)
  default = aggregates.performance_profiles(scores, reps=REPS)
  assert default["a"].taus[0] <= 0.0 and default["a"].taus[-1] >= 1.0


def test_sample_efficiency_curves():
  rng = np.random.default_rng(8)
  learning = np.linspace(0.0, 1.0, 5)
  scores = {"r": learning + rng.normal(0.0, 0.05, (6, 3, 5))}
  curves = aggregates.sample_efficiency_curves(
      scores, points=[0, 1e4, 2e4, 3e4, 4e4], reps=REPS
  )
  curve = curves["r"]
  assert curve.iqm.shape == curve.low.shape == curve.high.shape == (5,)
  assert np.all(np.diff(curve.iqm) > 0)
  assert np.all((curve.low <= curve.iqm) & (curve.iqm <= curve.high))
  for i in range(5):
    assert curve.iqm[i] == pytest.approx(aggregates.iqm(scores["r"][..., i]))
  with pytest.raises(ValueError, match="points"):
    aggregates.sample_efficiency_curves(scores, points=[0, 1], reps=REPS)


def test_sample_efficiency_bands_draw_seeds_per_point():
  # Two identical points: seeds drawn once per replication for all points
  # would give them identical intervals; rliable draws them per point.
  rng = np.random.default_rng(9)
  column = rng.normal(0.5, 0.2, (5, 2, 1))
  curve = aggregates.sample_efficiency_curves(
      {"r": np.concatenate([column, column], axis=2)}, reps=REPS
  )["r"]
  assert curve.iqm[0] == curve.iqm[1]
  assert (curve.low[0], curve.high[0]) != (curve.low[1], curve.high[1])


def _band_widths(x, task_bootstrap):
  kw = dict(reps=REPS, seed=1, task_bootstrap=task_bootstrap)
  curve = aggregates.sample_efficiency_curves({"r": x}, **kw)["r"]
  profile = aggregates.performance_profiles({"r": x[..., 0]}, **kw)["r"]
  return (
      float(np.mean(curve.high - curve.low)),
      float(np.mean(profile.high - profile.low)),
  )


def test_task_bootstrap_widens_profiles_and_curves():
  rng = np.random.default_rng(13)
  # Environments of very different difficulty: resampling them matters.
  offsets = np.array([0.0, 0.3, 0.6, 0.9])[:, None]
  x = rng.normal(0.0, 0.05, (6, 4, 3)) + offsets
  seeds_only = _band_widths(x, task_bootstrap=False)
  with_tasks = _band_widths(x, task_bootstrap=True)
  assert with_tasks[0] > 2 * seeds_only[0]
  assert with_tasks[1] > 1.2 * seeds_only[1]


def test_aggregate_input_errors():
  with pytest.raises(ValueError, match="at least 2 seeds"):
    aggregates.aggregate_metrics({"a": np.ones((1, 3))}, reps=REPS)
  with pytest.raises(ValueError, match="num_seeds, num_envs"):
    aggregates.aggregate_metrics({"a": np.ones(3)}, reps=REPS)
  with pytest.raises(ValueError, match="same environments"):
    aggregates.aggregate_metrics(
        {"a": np.ones((3, 2)), "b": np.ones((3, 4))}, reps=REPS
    )
  with pytest.raises(ValueError, match="NaN"):
    aggregates.aggregate_metrics({"a": np.full((3, 2), np.nan)}, reps=REPS)
