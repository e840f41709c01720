"""Two-sided two-sample tests of per-seed scores ``a`` ``[n_a]`` and ``b``
``[n_b]`` (null: no difference): ``"welch"`` (default; unequal variances),
``"mann_whitney"`` (U: exact without ties, a permutation test with ties),
``"bootstrap"`` (studentized, Efron and Tibshirani 1993, algorithm 16.2) and
``"permutation"`` (of the difference of means).

``run_test`` runs one with its effect size, interval and seeds needed;
``p_values`` runs one on a batch; ``holm_bonferroni`` adjusts a family of
p-values.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import functools
import itertools
import math
import warnings

import numpy as np

from disco.comparison import effect_sizes

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
    statistic: Welch's t (Welch, bootstrap; NaN when neither sample varies), U
      of ``a``, or ``mean(a) - mean(b)`` (permutation).
    p_value: two-sided p-value.
    n_a, n_b: seeds.
    mean_a, mean_b: means.
    effect_size: the rank-biserial correlation (Mann-Whitney), else Hedges' g.
    effect_size_name: ``"rank_biserial"`` or ``"hedges_g"``.
    hedges_g: Hedges' g of ``a`` over ``b``.
    seeds_needed: seeds per rule for the requested power at ``alpha`` (None when
      the effect is 0).
    warning: why the result may be unreliable, or None.
    confidence: level of the difference's interval.
    diff_low, diff_high: Welch interval of ``mean_a - mean_b`` (NaN when neither
      sample varies).
    min_effect: the |Hedges' g| of ``seeds_needed`` (None: the observed |g|).
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


# ------------------------------------------------------------- checks ----


def _smallest_rank_p(n_a: int, n_b: int) -> float:
  """Smallest two-sided p-value an exact rank or permutation test of
  ``n_a`` and ``n_b`` distinct values can give: ``2 / C(n_a + n_b, n_a)``."""
  return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def _constant_resample_p(n: int) -> float:
  """Chance that a bootstrap resample of ``n`` distinct values is constant,
  ``n^(1 - n)``."""
  return float(n) ** (1 - n)


def min_seeds(test: str, alpha: float = 0.05) -> int:
  """The fewest seeds per rule with which ``test`` can reject at ``alpha``.

  Welch: 2. Mann-Whitney and permutation: enough for the smallest p-value
  ``2 / C(2n, n)`` to reach ``alpha`` (4 at 0.05). Bootstrap:
  ``n^(2 (1 - n)) <= alpha / 2``, so both resamples are rarely constant (3 at
  0.05).
  """
  if test not in TESTS:
    raise ValueError(f"Unknown test {test!r}; use one of {TESTS}.")
  effect_sizes.check_probability("alpha", alpha)
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
  """``[...]`` Welch's t of ``a`` ``[..., n_a]`` over ``b`` ``[..., n_b]``
  (+-inf if neither varies but the means differ, 0 if equal)."""
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
  from scipy import stats  # pylint: disable=g-import-not-at-top

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
  """``[B]`` two-sided permutation p-values of Mann-Whitney's
  ``|U - n_a n_b / 2|`` (mid-ranks for ties), exact over all splits when at most
  ``max(reps, MW_EXACT_SPLITS)``, else over that many random ones."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

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
  from scipy import stats  # pylint: disable=g-import-not-at-top

  result = stats.mannwhitneyu(a, b, alternative="two-sided", axis=1)
  statistic = np.asarray(result.statistic, np.float64)
  p = np.asarray(result.pvalue, np.float64).copy()
  # With ties scipy falls back to the normal approximation, far off with few
  # seeds: permute the seeds instead.
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
  """``[B]`` counts of resamples of ``null_a`` ``[B, n_a]`` and ``null_b``
  ``[B, n_b]`` whose |Welch t| reaches ``|observed|``."""
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
    # Float noise around an exact tie still counts.
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
  from scipy import stats  # pylint: disable=g-import-not-at-top

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
  """``(statistic, p_value)`` ``[...]`` of ``test`` on a batch of comparisons
  ``a`` ``[..., n_a]`` and ``b`` ``[..., n_b]`` (the same leading shape); the
  other arguments and errors as ``run_test``."""
  if test not in TESTS:
    raise ValueError(f"Unknown test {test!r}; use one of {TESTS}.")
  effect_sizes.check_probability("alpha", alpha)
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
  from scipy import stats  # pylint: disable=g-import-not-at-top

  effect_sizes.check_probability("confidence", confidence)
  a, b = effect_sizes.as_sample("a", a), effect_sizes.as_sample("b", b)
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
    a, b: the two rules' per-seed scores.
    test: one of ``TESTS``.
    alpha: level of the seed check and the power estimate (not of the p-value).
    power: target power of the seeds-needed estimate.
    reps: resamples of the bootstrap and permutation tests.
    seed: their seed.
    confidence: level of the difference's interval.
    min_effect: the a-priori minimum effect (|Hedges' g|) of ``seeds_needed``
      (None: the observed |g|).

  Raises:
    ValueError: an unknown test, bad arguments, non-finite scores or too few
      seeds (saying how many).
  """
  effect_sizes.check_probability("power", power)
  effect_sizes.check_probability("confidence", confidence)
  if min_effect is not None and not (
      math.isfinite(min_effect) and min_effect > 0
  ):
    raise ValueError(f"min_effect must be a number > 0, got {min_effect}.")
  a, b = effect_sizes.as_sample("a", a), effect_sizes.as_sample("b", b)
  statistic, p = p_values(
      a[None], b[None], test, alpha=alpha, reps=reps, seed=seed
  )
  statistic, p = float(statistic[0]), float(p[0])
  g = effect_sizes.hedges_g(a, b)
  if test == "mann_whitney":
    effect, effect_name = effect_sizes.rank_biserial(a, b), RANK_BISERIAL
  else:
    effect, effect_name = g, HEDGES_G
  needed = effect_sizes.seeds_needed(
      g if min_effect is None else min_effect, alpha, power
  )
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
  """Holm-Bonferroni adjusted p-values ``[m]``, in input order: rejecting where
  they are ``<= alpha`` controls the family-wise error rate at ``alpha``."""
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
