"""Pairwise significance tests between rules, with effect sizes and power.

Each test compares the per-seed scores of two rules, ``a`` ``[n_a]`` and
``b`` ``[n_b]`` (one environment, or scores aggregated per seed over
environments with ``per_seed_aggregate``); seeds are independent samples.
Every test is two-sided, with the null hypothesis "no difference":

* ``"welch"`` (default): Welch's t-test (unequal variances), which Colas et
  al. (2019, "A Hitchhiker's Guide to Statistical Comparisons of
  Reinforcement Learning Algorithms") recommend for RL;
* ``"mann_whitney"``: the Mann-Whitney U rank test: exact for small samples
  without ties (scipy), and a permutation test of U (exact up to
  ``MW_EXACT_SPLITS`` splits of the seeds) when scores tie, as RL scores
  often do at an environment's optimum;
* ``"bootstrap"``: the studentized bootstrap test of Efron and Tibshirani
  (1993, algorithm 16.2): both samples are shifted to the pooled mean to
  impose the null, each is resampled separately, and the Welch t of every
  resample is compared with the observed one;
* ``"permutation"``: a permutation test of the difference of means (exact
  when the number of distinct relabellings is at most ``reps``).

Welch's t is undefined when neither sample varies (``[1, 1, 1]`` against
``[0, 0, 0]``): the Welch and bootstrap tests then report the permutation
test's p-value instead (exact for small samples), a NaN statistic and a
warning saying so. Every test refuses seed counts with which it cannot
reject at ``alpha`` (``min_seeds``). ``disco.comparison.calibration``
measures the false-positive rate of each test by simulation (the tests of
this package check it stays at most ``alpha``; ``BENCHMARKS.md`` has the
table).

The tests live in ``two_sample`` (``run_test``: one test with its effect
size, interval and power) and the effect sizes and power in
``effect_sizes``; both are importable from here too. This module runs them
on every pair of rules: ``pairwise_table`` runs a test on every pair and
corrects the p-values for multiple comparisons with Holm-Bonferroni
(``apply_holm`` corrects over several tables at once). Each row carries the difference of
means with its Welch confidence interval, an effect size (Hedges' g, and
the rank-biserial correlation for Mann-Whitney) and a power estimate: the
seeds per rule a two-sided two-sample t-test would need to detect an effect
with the requested power at ``alpha`` (noncentral t distribution). The
effect is the a-priori minimum effect of interest ``min_effect`` when given
(Colas et al. recommend fixing it in advance), else the observed |g|. A row
whose rules have fewer seeds gets a warning naming that number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import itertools
import math

import numpy as np

from disco.comparison import effect_sizes
from disco.comparison import two_sample

# The tests and effect sizes under this module's name too (``significance``
# held them all once).
from disco.comparison.two_sample import (
    mean_difference_interval as mean_difference_interval,
)
from disco.scoring import aggregates

# The fields of ``TestResult`` a row reads through (``ComparisonRow``).
_RESULT_FIELDS = frozenset(
    f.name for f in dataclasses.fields(two_sample.TestResult)
)
# The keys of ``ComparisonRow.as_dict`` in order (``statistics.json``): the
# pair, the test and its p-values, the effect, the means and seeds, the rest.
ROW_KEYS = (
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
)


@dataclasses.dataclass(frozen=True)
class ComparisonRow:
  """One row of ``pairwise_table``: the test ``result`` of ``rule_a``
  against ``rule_b``, with the family's correction.

  ``p_holm`` is the Holm-Bonferroni adjusted p-value over the family of
  comparisons (the table's, or several tables' with ``apply_holm``) and
  ``reject`` is ``p_holm <= alpha``. The fields of ``result``
  (``TestResult``: ``p_value``, ``mean_a``, ``seeds_needed``, ...) read as
  the row's own: ``row.p_value`` is ``row.result.p_value``.
  """

  rule_a: str
  rule_b: str
  result: two_sample.TestResult
  p_holm: float
  reject: bool
  alpha: float

  def __getattr__(self, name: str):
    if name in _RESULT_FIELDS:
      return getattr(self.result, name)
    raise AttributeError(
        f"{type(self).__name__!r} object has no attribute {name!r}"
    )

  def as_dict(self) -> dict[str, object]:
    """The row as one flat dict, keys in ``ROW_KEYS`` order."""
    flat = dict(
        dataclasses.asdict(self.result),
        rule_a=self.rule_a,
        rule_b=self.rule_b,
        p_holm=self.p_holm,
        reject=self.reject,
        alpha=self.alpha,
    )
    return {key: flat[key] for key in ROW_KEYS}


# ---------------------------------------------------------- all pairs ----


def per_seed_aggregate(scores: np.ndarray, how: str = "mean") -> np.ndarray:
  """Aggregates ``[num_seeds, num_envs]`` scores over environments per seed.

  Args:
    scores: ``[num_seeds, num_envs]`` (normalised) scores.
    how: ``"mean"``, ``"median"`` or ``"iqm"`` over environments.

  Returns:
    ``[num_seeds]``, one score per seed for the tests.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top

  scores = np.asarray(scores, np.float64)
  if scores.ndim != 2:
    raise ValueError(
        f"scores must be [num_seeds, num_envs], got " f"{scores.shape}."
    )
  if how == "mean":
    return scores.mean(axis=1)
  if how == "median":
    return np.median(scores, axis=1)
  if how == "iqm":
    return stats.trim_mean(scores, 0.25, axis=1)
  raise ValueError(
      f"Unknown aggregate {how!r}; use 'mean', 'median' or " "'iqm'."
  )


def env_scores(scores: aggregates.ScoreDict, env: int) -> dict[str, np.ndarray]:
  """``{rule: [num_seeds]}``: column ``env`` of ``{rule: [num_seeds,
  num_envs]}`` scores, the input of ``pairwise_table`` for one environment."""
  return {rule: np.asarray(x, np.float64)[:, env] for rule, x in scores.items()}


def pairwise_table(
    scores: Mapping[str, Sequence[float]],
    test: str = two_sample.DEFAULT_TEST,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    reps: int = 10000,
    seed: int = 0,
    pairs: Sequence[tuple[str, str]] | None = None,
    confidence: float = 0.95,
    min_effect: float | None = None,
) -> list[ComparisonRow]:
  """Tests every pair of rules and corrects for multiple comparisons.

  Args:
    scores: ``{rule: [num_seeds]}``: per-seed scores on one environment
      (``env_scores``) or aggregated over environments
      (``per_seed_aggregate``). Rules may have different numbers of seeds.
    test: one of ``TESTS``.
    alpha: family-wise significance level of the Holm-Bonferroni step-down
      procedure over all rows.
    power: target power of the seeds-needed estimate.
    reps: resamples of the bootstrap and permutation tests.
    seed: seed of those tests (the same for every pair).
    pairs: ``(a, b)`` pairs to test; by default each unordered pair once, in
      the order of ``scores``.
    confidence: level of the interval of each difference of means.
    min_effect: the a-priori minimum effect of interest (|Hedges' g|) of the
      seeds-needed estimate; ``None``: the observed |g|.

  Returns:
    One ``ComparisonRow`` per pair, Holm-corrected over the table (see
    ``apply_holm`` for a family of several tables).
  """
  if len(scores) < 2:
    raise ValueError(
        f"Need at least two rules to compare, got " f"{list(scores)}."
    )
  if pairs is None:
    pairs = list(itertools.combinations(scores, 2))
  results = []
  for a, b in pairs:
    for rule in (a, b):
      if rule not in scores:
        raise ValueError(
            f"Unknown rule {rule!r}; the scores hold " f"{list(scores)}."
        )
    try:
      results.append(
          two_sample.run_test(
              scores[a],
              scores[b],
              test,
              alpha=alpha,
              power=power,
              reps=reps,
              seed=seed,
              confidence=confidence,
              min_effect=min_effect,
          )
      )
    except ValueError as e:
      raise ValueError(f"{a} vs {b}: {e}") from e
  p_holm = two_sample.holm_bonferroni([r.p_value for r in results])
  rows = []
  for (a, b), r, ph in zip(pairs, results, p_holm, strict=True):
    rows.append(
        ComparisonRow(
            rule_a=a,
            rule_b=b,
            result=r,
            p_holm=float(ph),
            reject=bool(ph <= alpha),
            alpha=alpha,
        )
    )
  return rows


def apply_holm(
    tables: Mapping[str, Sequence[ComparisonRow]], alpha: float = 0.05
) -> dict[str, list[ComparisonRow]]:
  """Holm-Bonferroni over every row of several tables at once.

  ``pairwise_table`` corrects within one table (one environment); this
  treats all rows of ``tables`` (e.g. every environment's) as one family,
  which controls the family-wise error rate over all of them at ``alpha``
  (at the cost of power).

  Args:
    tables: ``{name: rows}`` of ``pairwise_table``.
    alpha: the family-wise significance level.

  Returns:
    ``{name: rows}`` with ``p_holm``, ``reject`` and ``alpha`` over the whole
    family.
  """
  effect_sizes.check_probability("alpha", alpha)
  flat = [r for rows in tables.values() for r in rows]
  adjusted = iter(two_sample.holm_bonferroni([r.p_value for r in flat]))
  out = {}
  for name, rows in tables.items():
    out[name] = []
    for r in rows:
      p = float(next(adjusted))
      out[name].append(
          dataclasses.replace(r, p_holm=p, reject=bool(p <= alpha), alpha=alpha)
      )
  return out


def format_table(rows: Sequence[ComparisonRow]) -> str:
  """The rows as a fixed-width text table (two-sided tests; ``diff`` is
  ``mean a - mean b`` with its Welch interval), warnings listed
  underneath."""
  header = (
      f"{'rule a':<16} {'rule b':<16} {'test':<12} {'stat':>9} "
      f"{'p':>8} {'p_holm':>8} {'reject':>6} {'effect':>8} "
      f"{'seeds':>6}  diff [interval]"
  )
  lines = [header, "-" * len(header)]
  notes = []
  for row in rows:
    needed = "-" if row.seeds_needed is None else str(row.seeds_needed)
    lines.append(
        f"{row.rule_a:<16.16} {row.rule_b:<16.16} {row.test:<12} "
        f"{row.statistic:>9.3g} {row.p_value:>8.3g} {row.p_holm:>8.3g} "
        f"{'yes' if row.reject else 'no':>6} {row.effect_size:>8.3g} "
        f"{needed:>6}  {difference_text(row)}"
    )
    if row.warning:
      notes.append(f"{row.rule_a} vs {row.rule_b}: {row.warning}")
  return "\n".join(lines + notes)


def difference_text(row: ComparisonRow | two_sample.TestResult) -> str:
  """``mean_a - mean_b [low, high]`` (``n/a`` ends when undefined)."""
  ends = ", ".join(
      "n/a" if math.isnan(x) else f"{x:.3g}"
      for x in (row.diff_low, row.diff_high)
  )
  return f"{row.mean_a - row.mean_b:.3g} [{ends}]"
