"""Pairwise significance tests between rules (``two_sample``), with effect sizes
and power.

``pairwise_table`` tests every pair of rules (on one environment, or per-seed
aggregates over environments) and Holm-Bonferroni-corrects the p-values
(``apply_holm``: over several tables). Each row carries the difference of means
with its Welch interval, an effect size (Hedges' g; rank-biserial for
Mann-Whitney) and the seeds per rule a t-test would need for the requested power
at ``alpha``, for the a-priori ``min_effect`` (else the observed |g|); a row
with fewer seeds gets a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import itertools
import math

import numpy as np

from disco.comparison import effect_sizes
from disco.comparison import two_sample
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
  """One row of ``pairwise_table``: the test ``result`` of ``rule_a`` against
  ``rule_b`` (whose fields read as the row's own, ``row.p_value``), with
  ``p_holm`` adjusted over the family and ``reject`` = ``p_holm <= alpha``."""

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
  """``[num_seeds]`` scores from ``[num_seeds, num_envs]`` ones, aggregated over
  environments by ``how`` (``"mean"``, ``"median"`` or ``"iqm"``)."""
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
  """``{rule: [num_seeds]}``: column ``env`` of
  ``{rule: [num_seeds, num_envs]}`` scores."""
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
  """Tests every pair of rules, Holm-Bonferroni-corrected over the table; one
  ``ComparisonRow`` per pair.

  Args:
    scores: ``{rule: [num_seeds]}`` on one environment (``env_scores``) or
      aggregated (``per_seed_aggregate``).
    test: one of ``two_sample.TESTS``.
    alpha: family-wise significance level over all rows.
    power: target power of the seeds-needed estimate.
    reps: resamples of the bootstrap and permutation tests.
    seed: their seed (the same for every pair).
    pairs: ``(a, b)`` pairs (default: each unordered pair once, in order).
    confidence: level of the intervals of the differences of means.
    min_effect: the a-priori minimum effect (|Hedges' g|) of the seeds-needed
      estimate; None: the observed |g|.

  Raises:
    ValueError: fewer than two rules, an unknown rule, or a pair the test
      refuses (named).
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
  """Holm-Bonferroni over every row of ``tables`` (``{name: rows}``, e.g. every
  environment's) as one family at ``alpha``: the rows with ``p_holm``,
  ``reject`` and ``alpha`` redone."""
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
  """The rows as a fixed-width text table (``diff``: ``mean a - mean b`` with
  its Welch interval), warnings underneath."""
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
