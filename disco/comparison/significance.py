"""Pairwise significance tests between rules, with effect sizes and power.

Each test compares the per-seed scores of two rules, ``a`` ``[n_a]`` and
``b`` ``[n_b]`` (one environment, or scores aggregated per seed over
environments with ``per_seed_aggregate``); seeds are independent samples. All
tests are two-sided with the null hypothesis "no difference":

* ``"welch"`` (default): Welch's t-test (unequal variances), which Colas et
  al. (2019, "A Hitchhiker's Guide to Statistical Comparisons of
  Reinforcement Learning Algorithms") recommend for RL;
* ``"mann_whitney"``: the Mann-Whitney U rank test (exact for small samples
  without ties);
* ``"bootstrap"``: a bootstrap test of the difference of means (both samples
  shifted to the pooled mean to impose the null, then resampled);
* ``"permutation"``: a permutation test of the difference of means (exact
  when the number of distinct relabellings is at most ``reps``).

``pairwise_table`` runs a test on every pair of rules and corrects the
p-values for multiple comparisons with Holm-Bonferroni. Each row carries an
effect size (Hedges' g, and the rank-biserial correlation for Mann-Whitney)
and a power estimate: the seeds per rule a two-sided two-sample t-test would
need to detect the observed |g| with the requested power at ``alpha``
(noncentral t distribution). A row whose rules have fewer seeds gets a
warning naming that number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import itertools
import math

import numpy as np
from scipy import special
from scipy import stats

from disco.comparison import aggregates

TESTS = ("welch", "mann_whitney", "bootstrap", "permutation")
DEFAULT_TEST = "welch"
HEDGES_G, RANK_BISERIAL = "hedges_g", "rank_biserial"


@dataclasses.dataclass(frozen=True)
class TestResult:
  """One two-sided test of ``a`` against ``b``.

  Attributes:
    test: one of ``TESTS``.
    statistic: the test statistic: Welch's t, U of ``a``, or the difference
      of means ``mean(a) - mean(b)`` (bootstrap and permutation).
    p_value: two-sided p-value.
    n_a: seeds of ``a``.
    n_b: seeds of ``b``.
    mean_a: mean of ``a``.
    mean_b: mean of ``b``.
    effect_size: the test's effect size: the rank-biserial correlation for
      Mann-Whitney (in [-1, 1]; ``2 P(a > b) - 1``), Hedges' g otherwise.
    effect_size_name: ``"rank_biserial"`` or ``"hedges_g"``.
    hedges_g: Hedges' g of ``a`` over ``b`` for every test.
    seeds_needed: seeds per rule for the requested power at ``alpha`` given
      |g| (``None`` when g is 0: no number suffices).
    warning: why the result may be unreliable, or ``None``.
  """

  __test__ = False  # not a pytest test class

  test: str
  statistic: float
  p_value: float
  n_a: int
  n_b: int
  mean_a: float
  mean_b: float
  effect_size: float
  effect_size_name: str
  hedges_g: float
  seeds_needed: int | None
  warning: str | None


@dataclasses.dataclass(frozen=True)
class ComparisonRow:
  """One row of ``pairwise_table``: a test of ``rule_a`` against ``rule_b``.

  ``p_holm`` is the Holm-Bonferroni adjusted p-value over the table's family
  of comparisons and ``reject`` is ``p_holm <= alpha``. The other fields are
  those of ``TestResult``.
  """

  rule_a: str
  rule_b: str
  test: str
  statistic: float
  p_value: float
  p_holm: float
  reject: bool
  alpha: float
  effect_size: float
  effect_size_name: str
  hedges_g: float
  mean_a: float
  mean_b: float
  n_a: int
  n_b: int
  seeds_needed: int | None
  warning: str | None

  def as_dict(self) -> dict[str, object]:
    return dataclasses.asdict(self)


# ------------------------------------------------------------- checks ----


def _check_probability(name: str, value: float) -> None:
  if not 0.0 < value < 1.0:
    raise ValueError(f"{name} must be in (0, 1), got {value}.")


def _as_sample(name: str, x: Sequence[float]) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 1:
    raise ValueError(
        f"Sample {name} has shape {x.shape}; expected "
        "[num_seeds] (one score per seed)."
    )
  if not np.all(np.isfinite(x)):
    raise ValueError(f"Sample {name} contains NaN or inf.")
  return x


def _smallest_rank_p(n_a: int, n_b: int) -> float:
  """Smallest two-sided p-value an exact rank or permutation test of
  ``n_a`` and ``n_b`` distinct values can give: ``2 / C(n_a + n_b, n_a)``."""
  return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def min_seeds(test: str, alpha: float = 0.05) -> int:
  """The fewest seeds per rule with which ``test`` can be run at ``alpha``.

  Welch's t-test and the bootstrap test need 2 seeds per rule (a variance,
  a resample that varies). The Mann-Whitney and permutation tests need enough
  seeds for their smallest possible p-value, ``2 / C(2n, n)``, to reach
  ``alpha``; with fewer they can never reject (4 seeds at alpha = 0.05, 5 at
  0.01).
  """
  if test not in TESTS:
    raise ValueError(f"Unknown test {test!r}; use one of {TESTS}.")
  _check_probability("alpha", alpha)
  if test in ("welch", "bootstrap"):
    return 2
  n = 2
  while _smallest_rank_p(n, n) > alpha:
    n += 1
  return n


def check_enough_seeds(
    test: str, n_a: int, n_b: int, alpha: float = 0.05
) -> None:
  """Raises ``ValueError`` saying how many seeds ``test`` needs if ``n_a``
  or ``n_b`` seeds are too few (see ``min_seeds``)."""
  needed = min_seeds(test, alpha)
  rank_based = test in ("mann_whitney", "permutation")
  if min(n_a, n_b) >= 2 and not (
      rank_based and _smallest_rank_p(n_a, n_b) > alpha
  ):
    return
  why = ""
  if rank_based and min(n_a, n_b) >= 1:
    why = (
        f" (with {n_a} and {n_b} seeds its smallest possible p-value is "
        f"{_smallest_rank_p(n_a, n_b):.3g} > alpha)"
    )
  raise ValueError(
      f"Too few seeds for the {test} test at alpha={alpha}: got {n_a} and "
      f"{n_b}{why}; it needs at least {needed} seeds per rule."
  )


# -------------------------------------------------------- effect sizes ----


def _pooled_sd(a: np.ndarray, b: np.ndarray) -> float:
  n_a, n_b = a.size, b.size
  pooled_var = (
      (n_a - 1) * np.var(a, ddof=1) + (n_b - 1) * np.var(b, ddof=1)
  ) / (n_a + n_b - 2)
  return float(np.sqrt(pooled_var))


def _signed_ratio(diff: float, scale: float) -> float:
  if scale > 0:
    return diff / scale
  return 0.0 if diff == 0 else math.copysign(math.inf, diff)


def cohens_d(a: Sequence[float], b: Sequence[float]) -> float:
  """Cohen's d of ``a`` ``[n_a]`` over ``b`` ``[n_b]``: the difference of
  means over the pooled standard deviation (``+-inf`` if that is 0 and the
  means differ, 0 if both are equal)."""
  a, b = _as_sample("a", a), _as_sample("b", b)
  if min(a.size, b.size) < 2:
    raise ValueError("Cohen's d needs at least 2 seeds per rule.")
  return _signed_ratio(float(a.mean() - b.mean()), _pooled_sd(a, b))


def hedges_correction(df: int) -> float:
  """Hedges' exact small-sample factor ``J(df) = G(df/2) / (sqrt(df/2)
  G((df-1)/2))`` for ``df = n_a + n_b - 2`` degrees of freedom."""
  if df < 2:
    raise ValueError(f"Hedges' correction needs df >= 2, got {df}.")
  return float(
      np.exp(special.gammaln(df / 2) - special.gammaln((df - 1) / 2))
      / np.sqrt(df / 2)
  )


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float:
  """Hedges' g of ``a`` ``[n_a]`` over ``b`` ``[n_b]``: Cohen's d times the
  exact correction ``J(n_a + n_b - 2)`` for its small-sample bias."""
  a, b = _as_sample("a", a), _as_sample("b", b)
  return cohens_d(a, b) * hedges_correction(a.size + b.size - 2)


def rank_biserial(a: Sequence[float], b: Sequence[float]) -> float:
  """Rank-biserial correlation ``2 U_a / (n_a n_b) - 1`` in [-1, 1], i.e.
  ``P(a > b) - P(a < b)`` over all pairs of seeds (ties count one half)."""
  a, b = _as_sample("a", a), _as_sample("b", b)
  u_a = stats.mannwhitneyu(a, b, alternative="two-sided").statistic
  return float(2.0 * u_a / (a.size * b.size) - 1.0)


# --------------------------------------------------------------- power ----


def t_test_power(effect_size: float, n: int, alpha: float = 0.05) -> float:
  """Power of a two-sided two-sample t-test with ``n`` seeds per rule.

  Under the alternative the statistic follows a noncentral t distribution
  with ``2n - 2`` degrees of freedom and noncentrality ``d sqrt(n / 2)``.
  """
  _check_probability("alpha", alpha)
  if n < 2:
    raise ValueError(f"A t-test needs n >= 2 seeds per rule, got {n}.")
  df = 2 * n - 2
  nc = abs(effect_size) * math.sqrt(n / 2.0)
  crit = stats.t.ppf(1.0 - alpha / 2.0, df)
  return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_needed(
    effect_size: float, alpha: float = 0.05, power: float = 0.8
) -> int | None:
  """Fewest seeds per rule for a two-sided two-sample t-test to detect
  ``effect_size`` (Cohen's d or Hedges' g) with ``power`` at ``alpha``.

  Exact under normality (noncentral t, see ``t_test_power``); for example
  d = 1, alpha = 0.05, power = 0.8 gives 17. Returns ``None`` for d = 0 (no
  number of seeds suffices) and 2 for an infinite d.
  """
  _check_probability("alpha", alpha)
  _check_probability("power", power)
  d = abs(float(effect_size))
  if math.isnan(d):
    raise ValueError("effect_size is NaN.")
  if d == 0.0:
    return None
  if math.isinf(d):
    return 2
  # The normal approximation is a slight underestimate; step up from below.
  z = stats.norm.ppf(1.0 - alpha / 2.0) + stats.norm.ppf(power)
  n = max(2, int(math.floor(2.0 * (z / d) ** 2)) - 1)
  while t_test_power(d, n, alpha) < power:
    n += 1
  return n


def _power_warning(
    g: float, n_a: int, n_b: int, alpha: float, power: float, needed: int | None
) -> str | None:
  if needed is None:
    return (
        f"The observed effect size is 0: no number of seeds gives "
        f"{power:.0%} power at alpha={alpha}."
    )
  if min(n_a, n_b) < needed:
    return (
        f"Underpowered: with |g|={abs(g):.3g} a two-sided t-test at "
        f"alpha={alpha} needs {needed} seeds per rule for {power:.0%} "
        f"power; this comparison has {n_a} and {n_b}."
    )
  return None


# --------------------------------------------------------------- tests ----


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
  if np.var(a) == 0 and np.var(b) == 0:
    # scipy gives NaN here; the limit is clear.
    diff = float(a.mean() - b.mean())
    return (0.0, 1.0) if diff == 0 else (math.copysign(math.inf, diff), 0.0)
  result = stats.ttest_ind(a, b, equal_var=False)
  return float(result.statistic), float(result.pvalue)


def _mann_whitney(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
  result = stats.mannwhitneyu(a, b, alternative="two-sided", method="auto")
  return float(result.statistic), float(result.pvalue)


def _mean_difference(x, y, axis=-1):
  return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _bootstrap(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[float, float]:
  observed = float(a.mean() - b.mean())
  pooled = np.concatenate([a, b]).mean()
  null_a, null_b = a - a.mean() + pooled, b - b.mean() + pooled
  boot_a = null_a[rng.integers(0, a.size, size=(reps, a.size))]
  boot_b = null_b[rng.integers(0, b.size, size=(reps, b.size))]
  diffs = _mean_difference(boot_a, boot_b)
  # A small tolerance so that float noise around an exact tie still counts.
  tol = 1e-12 * max(1.0, abs(observed))
  extreme = np.count_nonzero(np.abs(diffs) >= abs(observed) - tol)
  return observed, float((1 + extreme) / (1 + reps))


def _permutation(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[float, float]:
  result = stats.permutation_test(
      (a, b),
      _mean_difference,
      permutation_type="independent",
      vectorized=True,
      n_resamples=reps,
      alternative="two-sided",
      rng=rng,
  )
  return float(result.statistic), float(min(1.0, result.pvalue))


def run_test(
    a: Sequence[float],
    b: Sequence[float],
    test: str = DEFAULT_TEST,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    reps: int = 10000,
    seed: int = 0,
) -> TestResult:
  """Runs one two-sided test of ``a`` ``[n_a]`` against ``b`` ``[n_b]``.

  Args:
    a: per-seed scores of the first rule.
    b: per-seed scores of the second rule.
    test: one of ``TESTS``.
    alpha: significance level, used for the seed check and the power
      estimate (the p-value does not depend on it).
    power: target power of the seeds-needed estimate.
    reps: resamples of the bootstrap and permutation tests.
    seed: seed of the bootstrap and permutation tests.

  Returns:
    A ``TestResult``.

  Raises:
    ValueError: for an unknown test, bad arguments, non-finite scores or too
      few seeds for the test (the message says how many it needs).
  """
  if test not in TESTS:
    raise ValueError(f"Unknown test {test!r}; use one of {TESTS}.")
  _check_probability("alpha", alpha)
  _check_probability("power", power)
  if int(reps) < 1:
    raise ValueError(f"reps must be >= 1, got {reps}.")
  a, b = _as_sample("a", a), _as_sample("b", b)
  check_enough_seeds(test, a.size, b.size, alpha)
  rng = np.random.default_rng(seed)
  if test == "welch":
    statistic, p = _welch(a, b)
  elif test == "mann_whitney":
    statistic, p = _mann_whitney(a, b)
  elif test == "bootstrap":
    statistic, p = _bootstrap(a, b, int(reps), rng)
  else:
    statistic, p = _permutation(a, b, int(reps), rng)
  g = hedges_g(a, b)
  if test == "mann_whitney":
    effect, effect_name = rank_biserial(a, b), RANK_BISERIAL
  else:
    effect, effect_name = g, HEDGES_G
  needed = seeds_needed(g, alpha, power)
  return TestResult(
      test=test,
      statistic=statistic,
      p_value=p,
      n_a=a.size,
      n_b=b.size,
      mean_a=float(a.mean()),
      mean_b=float(b.mean()),
      effect_size=effect,
      effect_size_name=effect_name,
      hedges_g=g,
      seeds_needed=needed,
      warning=_power_warning(g, a.size, b.size, alpha, power, needed),
  )


# ------------------------------------------------ multiple comparisons ----


def holm_bonferroni(p_values: Sequence[float]) -> np.ndarray:
  """Holm-Bonferroni adjusted p-values ``[m]`` (same order as the input).

  With the p-values sorted ascending, ``p_(i)`` becomes
  ``max_{j <= i} min(1, (m - j + 1) p_(j))`` (1-based ``i``); rejecting where
  the adjusted p-value is ``<= alpha`` controls the family-wise error rate at
  ``alpha``.
  """
  p = np.asarray(p_values, dtype=np.float64)
  if p.ndim != 1:
    raise ValueError(f"p_values must be 1-D, got shape {p.shape}.")
  if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
    raise ValueError("p_values must be in [0, 1].")
  m = p.size
  order = np.argsort(p, kind="stable")
  scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
  adjusted = np.empty(m)
  adjusted[order] = np.maximum.accumulate(scaled)
  return adjusted


# ---------------------------------------------------------- all pairs ----


def per_seed_aggregate(scores: np.ndarray, how: str = "mean") -> np.ndarray:
  """Aggregates ``[num_seeds, num_envs]`` scores over environments per seed.

  Args:
    scores: ``[num_seeds, num_envs]`` (normalised) scores.
    how: ``"mean"``, ``"median"`` or ``"iqm"`` over environments.

  Returns:
    ``[num_seeds]``, one score per seed for the tests.
  """
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
    test: str = DEFAULT_TEST,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    reps: int = 10000,
    seed: int = 0,
    pairs: Sequence[tuple[str, str]] | None = None,
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

  Returns:
    One ``ComparisonRow`` per pair.
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
          run_test(
              scores[a],
              scores[b],
              test,
              alpha=alpha,
              power=power,
              reps=reps,
              seed=seed,
          )
      )
    except ValueError as e:
      raise ValueError(f"{a} vs {b}: {e}") from e
  p_holm = holm_bonferroni([r.p_value for r in results])
  rows = []
  for (a, b), r, ph in zip(pairs, results, p_holm, strict=True):
    rows.append(
        ComparisonRow(
            rule_a=a,
            rule_b=b,
            p_holm=float(ph),
            reject=bool(ph <= alpha),
            alpha=alpha,
            **dataclasses.asdict(r),
        )
    )
  return rows


def format_table(rows: Sequence[ComparisonRow]) -> str:
  """The rows as a fixed-width text table, warnings listed underneath."""
  header = (
      f"{'rule a':<16} {'rule b':<16} {'test':<12} {'stat':>9} "
      f"{'p':>8} {'p_holm':>8} {'reject':>6} {'effect':>8} "
      f"{'seeds':>6}"
  )
  lines = [header, "-" * len(header)]
  notes = []
  for row in rows:
    needed = "-" if row.seeds_needed is None else str(row.seeds_needed)
    lines.append(
        f"{row.rule_a:<16.16} {row.rule_b:<16.16} {row.test:<12} "
        f"{row.statistic:>9.3g} {row.p_value:>8.3g} {row.p_holm:>8.3g} "
        f"{'yes' if row.reject else 'no':>6} {row.effect_size:>8.3g} "
        f"{needed:>6}"
    )
    if row.warning:
      notes.append(f"{row.rule_a} vs {row.rule_b}: {row.warning}")
  return "\n".join(lines + notes)
