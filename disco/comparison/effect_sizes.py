"""Effect sizes and the power of a two-sample t-test, for per-seed scores ``a``
``[n_a]`` and ``b`` ``[n_b]`` of two rules."""

from __future__ import annotations

from collections.abc import Sequence
import math

import numpy as np

# ------------------------------------------------------------- checks ----


def check_probability(name: str, value: float) -> None:
  """Raises ``ValueError`` unless ``value`` (a level or power) is in
  (0, 1)."""
  if not 0.0 < value < 1.0:
    raise ValueError(f"{name} must be in (0, 1), got {value}.")


def as_sample(name: str, x: Sequence[float]) -> np.ndarray:
  """``x`` as a float64 ``[num_seeds]`` array of finite scores; ValueError
  otherwise."""
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 1:
    raise ValueError(
        f"Sample {name} has shape {x.shape}; expected "
        "[num_seeds] (one score per seed)."
    )
  if not np.all(np.isfinite(x)):
    raise ValueError(f"Sample {name} contains NaN or inf.")
  return x


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
  """Cohen's d of ``a`` ``[n_a]`` over ``b`` ``[n_b]``: difference of means over
  the pooled standard deviation (``+-inf`` if that is 0 and the means differ, 0
  if equal)."""
  a, b = as_sample("a", a), as_sample("b", b)
  if min(a.size, b.size) < 2:
    raise ValueError("Cohen's d needs at least 2 seeds per rule.")
  return _signed_ratio(float(a.mean() - b.mean()), _pooled_sd(a, b))


def hedges_correction(df: int) -> float:
  """Hedges' exact small-sample factor ``J(df) = G(df/2) / (sqrt(df/2)
  G((df-1)/2))``, ``df = n_a + n_b - 2``."""
  from scipy import special  # pylint: disable=g-import-not-at-top

  if df < 2:
    raise ValueError(f"Hedges' correction needs df >= 2, got {df}.")
  return float(
      np.exp(special.gammaln(df / 2) - special.gammaln((df - 1) / 2))
      / np.sqrt(df / 2)
  )


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float:
  """Hedges' g: Cohen's d times ``J(n_a + n_b - 2)``."""
  a, b = as_sample("a", a), as_sample("b", b)
  return cohens_d(a, b) * hedges_correction(a.size + b.size - 2)


def rank_biserial(a: Sequence[float], b: Sequence[float]) -> float:
  """Rank-biserial correlation ``2 U_a / (n_a n_b) - 1`` in [-1, 1]:
  ``P(a > b) - P(a < b)`` over pairs of seeds (ties count one half)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

  a, b = as_sample("a", a), as_sample("b", b)
  u_a = stats.mannwhitneyu(a, b, alternative="two-sided").statistic
  return float(2.0 * u_a / (a.size * b.size) - 1.0)


# --------------------------------------------------------------- power ----


def t_test_power(effect_size: float, n: int, alpha: float = 0.05) -> float:
  """Power of a two-sided two-sample t-test with ``n`` seeds per rule
  (noncentral t, ``2n - 2`` degrees of freedom, noncentrality
  ``d sqrt(n / 2)``)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

  check_probability("alpha", alpha)
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
  ``effect_size`` (Cohen's d or Hedges' g) with ``power`` at ``alpha``, exact
  under normality (d = 1, alpha = 0.05, power = 0.8: 17). None for d = 0; 2 for
  an infinite d."""
  from scipy import stats  # pylint: disable=g-import-not-at-top

  check_probability("alpha", alpha)
  check_probability("power", power)
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
