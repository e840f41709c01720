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

``pairwise_table`` runs a test on every pair of rules and corrects the
p-values for multiple comparisons with Holm-Bonferroni (``apply_holm``
corrects over several tables at once). Each row carries the difference of
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
import functools
import itertools
import math
import warnings

import numpy as np
from scipy import special
from scipy import stats

from disco.comparison import aggregates

TESTS = ("welch", "mann_whitney", "bootstrap", "permutation")
DEFAULT_TEST = "welch"
# Mann-Whitney with tied scores enumerates every split of the seeds up to
# this many (9 against 9 seeds); beyond, it draws this many at random.
MW_EXACT_SPLITS = 50_000
NO_VARIANCE = (
    "No variance: neither sample varies, so Welch's t is undefined; the "
    "p-value is the permutation test's."
)
HEDGES_G, RANK_BISERIAL = "hedges_g", "rank_biserial"


@dataclasses.dataclass(frozen=True)
class TestResult:
  """One two-sided test of ``a`` against ``b``.

  Attributes:
    test: one of ``TESTS``.
    statistic: the test statistic: Welch's t (Welch and bootstrap; NaN when
      neither sample varies), U of ``a``, or the difference of means
      ``mean(a) - mean(b)`` (permutation).
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
      the minimum effect of interest, or |g| without one (``None`` when that
      is 0: no number suffices).
    warning: why the result may be unreliable, or ``None``.
    confidence: level of the interval of the difference of means.
    diff_low: lower end of the Welch interval of ``mean_a - mean_b`` (NaN
      when neither sample varies).
    diff_high: upper end of that interval.
    min_effect: the minimum effect of interest (|Hedges' g|) of
      ``seeds_needed``, or ``None`` when it is the observed |g|.
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
  confidence: float = 0.95
  diff_low: float = math.nan
  diff_high: float = math.nan
  min_effect: float | None = None


@dataclasses.dataclass(frozen=True)
class ComparisonRow:
  """One row of ``pairwise_table``: a test of ``rule_a`` against ``rule_b``.

  ``p_holm`` is the Holm-Bonferroni adjusted p-value over the family of
  comparisons (the table's, or several tables' with ``apply_holm``) and
  ``reject`` is ``p_holm <= alpha``. The other fields are those of
  ``TestResult``.
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
  confidence: float = 0.95
  diff_low: float = math.nan
  diff_high: float = math.nan
  min_effect: float | None = None

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


def _constant_resample_p(n: int) -> float:
  """Chance that a bootstrap resample of ``n`` distinct values is constant,
  ``n^(1 - n)``."""
  return float(n) ** (1 - n)


def min_seeds(test: str, alpha: float = 0.05) -> int:
  """The fewest seeds per rule with which ``test`` can be run at ``alpha``.

  Welch's t-test needs 2 seeds per rule (a variance). The Mann-Whitney and
  permutation tests need enough seeds for their smallest possible p-value,
  ``2 / C(2n, n)``, to reach ``alpha``; with fewer they can never reject (4
  seeds at alpha = 0.05, 5 at 0.01). The bootstrap test needs enough seeds
  that both resamples are rarely constant (their Welch t is then infinite,
  at least as extreme as any observed one): ``n^(2 (1 - n)) <= alpha / 2``,
  i.e. 3 seeds at alpha = 0.05 and 4 at 0.01; with 2 it can never reject.
  """
  if test not in TESTS:
    raise ValueError(f"Unknown test {test!r}; use one of {TESTS}.")
  _check_probability("alpha", alpha)
  if test == "welch":
    return 2
  n = 2
  if test == "bootstrap":
    while _constant_resample_p(n) ** 2 > alpha / 2:
      n += 1
    return n
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
  if rank_based:
    enough = min(n_a, n_b) >= 2 and _smallest_rank_p(n_a, n_b) <= alpha
  else:
    enough = min(n_a, n_b) >= needed
  if enough:
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
    g: float,
    n_a: int,
    n_b: int,
    alpha: float,
    power: float,
    needed: int | None,
    min_effect: float | None = None,
) -> str | None:
  effect = (
      f"|g|={abs(g):.3g}"
      if min_effect is None
      else f"a minimum effect of interest of |g|={abs(min_effect):.3g}"
  )
  if needed is None:
    return (
        f"The observed effect size is 0: no number of seeds gives "
        f"{power:.0%} power at alpha={alpha}."
    )
  if min(n_a, n_b) < needed:
    return (
        f"Underpowered: to detect {effect} a two-sided t-test at "
        f"alpha={alpha} needs {needed} seeds per rule for {power:.0%} "
        f"power; this comparison has {n_a} and {n_b}."
    )
  return None


# --------------------------------------------------------------- tests ----
#
# The tests run on batches: ``a`` ``[B, n_a]`` and ``b`` ``[B, n_b]`` hold
# ``B`` independent comparisons (one in ``run_test``, thousands of simulated
# ones in ``disco.comparison.calibration``); each returns the statistics and
# p-values ``[B]``.


def _constant(x: np.ndarray) -> np.ndarray:
  """``[B]``: whether every seed of each row of ``x`` ``[B, n]`` is equal."""
  return np.all(x == x[:, :1], axis=1)


def _has_ties(x: np.ndarray) -> np.ndarray:
  """``[B]``: whether a row of ``x`` ``[B, n]`` holds a value twice."""
  return np.any(np.diff(np.sort(x, axis=1), axis=1) == 0, axis=1)


def _welch_t(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """``[...]`` Welch's t of ``a`` ``[..., n_a]`` over ``b`` ``[..., n_b]``:
  +-inf where neither varies but the means differ, 0 where they are
  equal."""
  diff = a.mean(axis=-1) - b.mean(axis=-1)
  se = np.sqrt(
      a.var(axis=-1, ddof=1) / a.shape[-1]
      + b.var(axis=-1, ddof=1) / b.shape[-1]
  )
  with np.errstate(divide="ignore", invalid="ignore"):
    t = diff / se
  return np.where(
      se > 0, t, np.where(diff == 0, 0.0, np.copysign(np.inf, diff))
  )


def _no_variance_fallback(
    a: np.ndarray,
    b: np.ndarray,
    statistic: np.ndarray,
    p: np.ndarray,
    reps: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
  """Rows where neither sample varies get a NaN statistic and the
  permutation test's p-value (see ``NO_VARIANCE``)."""
  flat = _constant(a) & _constant(b)
  if np.any(flat):
    statistic, p = statistic.copy(), p.copy()
    statistic[flat] = np.nan
    p[flat] = _permutation(a[flat], b[flat], reps, rng)[1]
  return statistic, p


def _welch(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
  with warnings.catch_warnings():  # constant rows: handled below
    warnings.simplefilter("ignore", RuntimeWarning)
    result = stats.ttest_ind(a, b, equal_var=False, axis=1)
  statistic = np.asarray(result.statistic, np.float64)
  p = np.asarray(result.pvalue, np.float64)
  return _no_variance_fallback(a, b, statistic, p, reps, rng)


@functools.lru_cache(maxsize=8)
def _all_splits(n: int, n_a: int) -> np.ndarray:
  """``[C(n, n_a), n]`` float masks of every choice of ``n_a`` of ``n``."""
  chosen = np.array(list(itertools.combinations(range(n), n_a)), np.intp)
  masks = np.zeros((len(chosen), n))
  np.put_along_axis(masks, chosen, 1.0, axis=1)
  return masks


def _rank_permutation_p(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> np.ndarray:
  """``[B]`` two-sided permutation p-values of Mann-Whitney's U (mid-ranks
  for ties), with the statistic ``|U - n_a n_b / 2|``: exact over every
  split of the seeds when there are at most ``max(reps, MW_EXACT_SPLITS)``,
  else over that many random splits (the same for every row)."""
  n_a = a.shape[1]
  ranks = stats.rankdata(np.concatenate([a, b], axis=1), axis=1)
  n = ranks.shape[1]
  draws = max(int(reps), MW_EXACT_SPLITS)
  exact = math.comb(n, n_a) <= draws
  if exact:
    masks = _all_splits(n, n_a)
  else:
    order = np.argsort(rng.random((draws, n)), axis=1)[:, :n_a]
    masks = np.zeros((draws, n))
    np.put_along_axis(masks, order, 1.0, axis=1)
  centre = n_a * (n + 1) / 2.0  # the mean rank sum of a
  observed = np.abs(ranks[:, :n_a].sum(axis=1) - centre)
  count = np.empty(len(ranks))
  step = max(1, 4_000_000 // len(masks))
  for start in range(0, len(ranks), step):
    sums = ranks[start : start + step] @ masks.T  # [b, splits]
    count[start : start + step] = np.count_nonzero(
        np.abs(sums - centre) >= observed[start : start + step, None] - 1e-9,
        axis=1,
    )
  if exact:
    return count / len(masks)
  return (1.0 + count) / (1.0 + len(masks))


def _mann_whitney(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
  result = stats.mannwhitneyu(a, b, alternative="two-sided", axis=1)
  statistic = np.asarray(result.statistic, np.float64)
  p = np.asarray(result.pvalue, np.float64).copy()
  # With ties scipy's "auto" falls back to the normal approximation, which
  # is far off with few seeds: permute the seeds instead (vectorised over
  # the rows; scipy's PermutationMethod gives the same p-values, one row at
  # a time).
  tied = _has_ties(np.concatenate([a, b], axis=1))
  if np.any(tied):
    p[tied] = _rank_permutation_p(a[tied], b[tied], reps, rng)
  return statistic, np.minimum(p, 1.0)


def _mean_difference(x, y, axis=-1):
  return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _bootstrap_extreme(
    null_a: np.ndarray,
    null_b: np.ndarray,
    observed: np.ndarray,
    reps: int,
    rng: np.random.Generator,
) -> np.ndarray:
  """``[B]`` resamples of ``null_a`` ``[B, n_a]`` and ``null_b`` ``[B,
  n_b]`` (each resampled separately) whose |Welch t| reaches
  ``|observed|``."""
  batch, n_a, n_b = null_a.shape[0], null_a.shape[1], null_b.shape[1]
  idx_a = rng.integers(0, n_a, size=(batch, reps, n_a))
  idx_b = rng.integers(0, n_b, size=(batch, reps, n_b))
  boot_a = np.take_along_axis(null_a[:, None, :], idx_a, axis=2)
  boot_b = np.take_along_axis(null_b[:, None, :], idx_b, axis=2)
  # A shifted resample's mean difference is float noise when the seeds it
  # drew were the same: round it to 0 so that its t is 0, not +-inf.
  scale = np.abs(null_a).max(axis=1) + np.abs(null_b).max(axis=1)
  diff = boot_a.mean(axis=2) - boot_b.mean(axis=2)
  diff = np.where(np.abs(diff) <= 1e-12 * scale[:, None], 0.0, diff)
  se = np.sqrt(
      boot_a.var(axis=2, ddof=1) / n_a + boot_b.var(axis=2, ddof=1) / n_b
  )
  with np.errstate(divide="ignore", invalid="ignore"):
    t = np.where(
        se > 1e-12 * scale[:, None],
        diff / se,
        np.where(diff == 0, 0.0, np.inf),
    )
    # A small tolerance so that float noise around an exact tie still
    # counts. (Rows where neither sample varies get a fallback.)
    tol = 1e-9 * np.maximum(1.0, np.abs(observed))
    return np.count_nonzero(
        np.abs(t) >= (np.abs(observed) - tol)[:, None], axis=1
    )


def _bootstrap(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
  """Efron and Tibshirani's (1993) algorithm 16.2: resample each sample,
  shifted to the pooled mean, and compare the resamples' Welch t."""
  observed = _welch_t(a, b)  # [B]
  pooled = np.concatenate([a, b], axis=1).mean(axis=1, keepdims=True)
  null_a = a - a.mean(axis=1, keepdims=True) + pooled
  null_b = b - b.mean(axis=1, keepdims=True) + pooled
  extreme = np.empty(len(a))
  step = max(1, 4_000_000 // (reps * (a.shape[1] + b.shape[1])))
  for i in range(0, len(a), step):
    rows = slice(i, i + step)
    extreme[rows] = _bootstrap_extreme(
        null_a[rows], null_b[rows], observed[rows], reps, rng
    )
  p = (1.0 + extreme) / (1.0 + reps)
  return _no_variance_fallback(a, b, observed, p, reps, rng)


def _permutation(
    a: np.ndarray, b: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
  result = stats.permutation_test(
      (a, b),
      _mean_difference,
      permutation_type="independent",
      vectorized=True,
      n_resamples=reps,
      alternative="two-sided",
      axis=1,
      rng=rng,
  )
  statistic = np.asarray(result.statistic, np.float64).reshape(a.shape[0])
  p = np.asarray(result.pvalue, np.float64).reshape(a.shape[0])
  return statistic, np.minimum(p, 1.0)


_TEST_FUNCTIONS = {
    "welch": _welch,
    "mann_whitney": _mann_whitney,
    "bootstrap": _bootstrap,
    "permutation": _permutation,
}


def _as_batch(name: str, x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim < 1:
    raise ValueError(f"Sample {name} must be [..., num_seeds], got a scalar.")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"Sample {name} contains NaN or inf.")
  return x


def p_values(
    a: np.ndarray,
    b: np.ndarray,
    test: str = DEFAULT_TEST,
    *,
    alpha: float = 0.05,
    reps: int = 10000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
  """Runs ``test`` on a batch of independent comparisons at once.

  The p-values are those ``run_test`` gives (the resampling tests draw
  different resamples, from the same kind of generator); this is what the
  calibration by simulation (``disco.comparison.calibration``) calls.

  Args:
    a: ``[..., n_a]`` per-seed scores of the first rule of each comparison.
    b: ``[..., n_b]`` those of the second rule (same leading shape).
    test: one of ``TESTS``.
    alpha: significance level of the seed check (``min_seeds``).
    reps: resamples of the bootstrap and permutation tests.
    seed: seed of those tests.

  Returns:
    ``(statistic, p_value)``, both ``[...]``.

  Raises:
    ValueError: as ``run_test``.
  """
  if test not in TESTS:
    raise ValueError(f"Unknown test {test!r}; use one of {TESTS}.")
  _check_probability("alpha", alpha)
  if int(reps) < 1:
    raise ValueError(f"reps must be >= 1, got {reps}.")
  a, b = _as_batch("a", a), _as_batch("b", b)
  if a.shape[:-1] != b.shape[:-1]:
    raise ValueError(
        f"Samples a {a.shape} and b {b.shape} differ in their leading "
        "(batch) shape."
    )
  check_enough_seeds(test, a.shape[-1], b.shape[-1], alpha)
  batch = a.shape[:-1]
  statistic, p = _TEST_FUNCTIONS[test](
      a.reshape(-1, a.shape[-1]),
      b.reshape(-1, b.shape[-1]),
      int(reps),
      np.random.default_rng(seed),
  )
  return statistic.reshape(batch), p.reshape(batch)


def mean_difference_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> tuple[float, float]:
  """Welch's ``confidence`` interval of ``mean(a) - mean(b)`` (scipy's
  ``ttest_ind(...).confidence_interval``); NaN when neither sample
  varies."""
  _check_probability("confidence", confidence)
  a, b = _as_sample("a", a), _as_sample("b", b)
  if min(a.size, b.size) < 2:
    raise ValueError("The interval needs at least 2 seeds per rule.")
  if np.var(a) == 0 and np.var(b) == 0:
    return math.nan, math.nan
  with warnings.catch_warnings():  # scipy warns when one sample is constant
    warnings.simplefilter("ignore", RuntimeWarning)
    interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(
        confidence_level=confidence
    )
  return float(interval.low), float(interval.high)


def run_test(
    a: Sequence[float],
    b: Sequence[float],
    test: str = DEFAULT_TEST,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    reps: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
    min_effect: float | None = None,
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
    confidence: level of the interval of the difference of means.
    min_effect: the minimum effect of interest, as |Hedges' g| (fixed
      before the experiment): ``seeds_needed`` is for it rather than for the
      observed |g|.

  Returns:
    A ``TestResult``.

  Raises:
    ValueError: for an unknown test, bad arguments, non-finite scores or too
      few seeds for the test (the message says how many it needs).
  """
  _check_probability("power", power)
  _check_probability("confidence", confidence)
  if min_effect is not None and not (
      math.isfinite(min_effect) and min_effect > 0
  ):
    raise ValueError(f"min_effect must be a number > 0, got {min_effect}.")
  a, b = _as_sample("a", a), _as_sample("b", b)
  statistic, p = p_values(
      a[None], b[None], test, alpha=alpha, reps=reps, seed=seed
  )
  statistic, p = float(statistic[0]), float(p[0])
  g = hedges_g(a, b)
  if test == "mann_whitney":
    effect, effect_name = rank_biserial(a, b), RANK_BISERIAL
  else:
    effect, effect_name = g, HEDGES_G
  needed = seeds_needed(g if min_effect is None else min_effect, alpha, power)
  warnings = [
      _power_warning(g, a.size, b.size, alpha, power, needed, min_effect)
  ]
  if test in ("welch", "bootstrap") and math.isnan(statistic):
    warnings.insert(0, NO_VARIANCE)
  low, high = mean_difference_interval(a, b, confidence)
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
      warning=" ".join(w for w in warnings if w) or None,
      confidence=confidence,
      diff_low=low,
      diff_high=high,
      min_effect=None if min_effect is None else float(min_effect),
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
          run_test(
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
  _check_probability("alpha", alpha)
  flat = [r for rows in tables.values() for r in rows]
  adjusted = iter(holm_bonferroni([r.p_value for r in flat]))
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


def difference_text(row: ComparisonRow | TestResult) -> str:
  """``mean_a - mean_b [low, high]`` (``n/a`` ends when undefined)."""
  ends = ", ".join(
      "n/a" if math.isnan(x) else f"{x:.3g}"
      for x in (row.diff_low, row.diff_high)
  )
  return f"{row.mean_a - row.mean_b:.3g} [{ends}]"
