"""Aggregate scores over environments and seeds with bootstrap intervals, after
``rliable`` (Agarwal et al., 2021).

Scores are ``{rule: [num_seeds, num_envs]}`` (``[..., num_points]`` for curves)
of normalised scores. Intervals are stratified bootstraps: ``reps`` replications
resampling seeds within each environment (with ``task_bootstrap``, environments
too), of coverage ``confidence``, drawn from ``seed``: each call seeds NumPy's
global random state, which ``rliable`` uses, and restores it (not thread-safe).
Each rule and pair is bootstrapped separately, so adding a rule leaves the
others' intervals unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
import contextlib
import dataclasses
from importlib import metadata
import itertools
import math
from types import ModuleType

import numpy as np

_PANDAS_3_ERROR = (
    "rliable.library failed to import: rliable needs arch<8, and arch 7 "
    "does not work with pandas 3. Install pandas<3: "
    "pip install 'pandas>=2.2,<3' (setup.cfg pins it)."
)


def check_installed_versions(
    version: Callable[[str], str] = metadata.version,
) -> None:
  """ImportError where the installed pandas and arch cannot import
  ``rliable.library`` (pandas 3 with arch 7), read from package metadata without
  importing them."""

  def major(package: str) -> int | None:
    try:
      return int(version(package).split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
      return None

  if (major("pandas") or 0) >= 3 and (major("arch") or 8) < 8:
    raise ImportError(_PANDAS_3_ERROR)


# rliable and scipy are imported where first used (they are slow to import);
# their one known import failure is refused here, before any training starts.
check_installed_versions()


def _rly_metrics() -> ModuleType:
  from rliable import metrics  # pylint: disable=g-import-not-at-top

  return metrics


def _rly_library() -> ModuleType:
  try:
    from rliable import library  # pylint: disable=g-import-not-at-top
  except TypeError as e:  # arch 7 (what rliable allows) under pandas 3
    raise ImportError(_PANDAS_3_ERROR) from e
  return library


ScoreDict = Mapping[str, np.ndarray]

# The aggregate metrics of ``aggregate_metrics``, in this order.
METRICS = ("median", "iqm", "mean", "optimality_gap")
MIN_SEEDS = 2  # a bootstrap over a single seed has no spread


@dataclasses.dataclass(frozen=True)
class Interval:
  """A point estimate and its confidence interval ``[low, high]``."""

  estimate: float
  low: float
  high: float

  def __str__(self) -> str:
    return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}]"

  def contains(self, value: float) -> bool:
    return self.low <= value <= self.high

  @property
  def width(self) -> float:
    return self.high - self.low


@dataclasses.dataclass(frozen=True)
class AggregateResult:
  """Aggregate metrics of one rule: each an ``Interval``. ``median`` and
  ``mean``: over environments of the per-environment mean score; ``iqm``: of all
  scores; ``optimality_gap``: mean shortfall below ``gamma``. Also
  ``num_seeds``, ``num_envs``, ``confidence`` and ``reps``."""

  rule: str
  median: Interval
  iqm: Interval
  mean: Interval
  optimality_gap: Interval
  num_seeds: int
  num_envs: int
  confidence: float
  reps: int

  def metric(self, name: str) -> Interval:
    """The interval of metric ``name`` (one of ``METRICS``)."""
    if name not in METRICS:
      raise ValueError(f"Unknown metric {name!r}; use one of {METRICS}.")
    return getattr(self, name)


@dataclasses.dataclass(frozen=True)
class ImprovementProbability:
  """P(a run of ``rule_x`` scores higher than one of ``rule_y``): the
  per-environment Mann-Whitney estimate (ties count one half) averaged over
  environments; 0.5: no difference."""

  rule_x: str
  rule_y: str
  probability: Interval
  confidence: float
  reps: int


@dataclasses.dataclass(frozen=True)
class Band:
  """A rule's pointwise confidence band over ``P`` points.

  Attributes:
    rule: the rule's name.
    low: ``[P]`` lower bounds of the intervals.
    high: ``[P]`` upper bounds of the intervals.
    confidence: coverage of the intervals.
  """

  rule: str
  low: np.ndarray
  high: np.ndarray
  confidence: float


@dataclasses.dataclass(frozen=True)
class PerformanceProfile(Band):
  """Fraction of runs (or environments) scoring above each threshold, with its
  ``Band``.

  Attributes:
    taus: thresholds ``[P]``.
    fraction: ``[P]`` fraction with a score ``> tau``.
  """

  taus: np.ndarray
  fraction: np.ndarray


@dataclasses.dataclass(frozen=True)
class SampleEfficiencyCurve(Band):
  """IQM over seeds and environments at each evaluation point, with its
  ``Band``.

  Attributes:
    points: ``[P]`` x values (e.g. environment steps).
    iqm: ``[P]`` IQM of the scores at each point.
  """

  points: np.ndarray
  iqm: np.ndarray


# ------------------------------------------------------------ helpers ----


@contextlib.contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
  """Seeds NumPy's global random state (which ``rliable`` draws from) for a
  block, then restores it."""
  saved = np.random.get_state()
  np.random.seed(seed)
  try:
    yield
  finally:
    np.random.set_state(saved)


def check_scores(
    scores: ScoreDict, ndim: int = 2, min_seeds: int = MIN_SEEDS
) -> dict[str, np.ndarray]:
  """The score dict as float64 arrays, in order, of ``ndim`` dimensions (2, or 3
  with points) and at least ``min_seeds`` seeds.

  Raises:
    ValueError: an empty dict, a wrong shape, too few seeds, non-finite values,
      or rules disagreeing on the trailing dimensions.
  """
  if not scores:
    raise ValueError("The score dict is empty; pass {rule: scores}.")
  shape_names = ("num_seeds", "num_envs", "num_points")[:ndim]
  out, trailing = {}, None
  for rule, value in scores.items():
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != ndim:
      raise ValueError(
          f"Scores of rule {rule!r} have shape {array.shape}; expected "
          f"[{', '.join(shape_names)}]."
      )
    if array.shape[0] < min_seeds:
      raise ValueError(
          f"Rule {rule!r} has {array.shape[0]} seed(s); bootstrap intervals "
          f"need at least {min_seeds} seeds."
      )
    if not np.all(np.isfinite(array)):
      raise ValueError(f"Scores of rule {rule!r} contain NaN or inf.")
    if trailing is not None and array.shape[1:] != trailing:
      raise ValueError(
          f"Rule {rule!r} has scores of shape {array.shape} but an earlier "
          f"rule has [num_seeds, {', '.join(map(str, trailing))}]; every rule "
          "needs the same environments (and points)."
      )
    trailing = array.shape[1:]
    out[str(rule)] = array
  return out


def _check_bootstrap_args(reps: int, confidence: float) -> None:
  if int(reps) < 1:
    raise ValueError(f"reps must be >= 1, got {reps}.")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}.")


def _interval_estimate(
    scores: np.ndarray | Sequence[np.ndarray],
    func: Callable[..., np.ndarray],
    reps: int,
    confidence: float,
    seed: int,
    task_bootstrap: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
  """``rliable``'s stratified bootstrap of one entry: ``(point, [2, k])``."""
  with seeded_global_rng(seed):
    points, intervals = _rly_library().get_interval_estimates(
        {"x": scores},
        func,
        reps=int(reps),
        confidence_interval_size=confidence,
        task_bootstrap=task_bootstrap,
    )
  return np.asarray(points["x"], np.float64), np.asarray(
      intervals["x"], np.float64
  )


def approximate_coverage(
    num_seeds: int, num_envs: int, confidence: float = 0.95
) -> float:
  """The actual coverage of a nominal ``confidence`` stratified-bootstrap
  interval of the mean of ``num_seeds`` seeds on ``num_envs`` environments:
  ``P(|T_{E(n-1)}| <= z sqrt((n-1)/n))`` (the plug-in variance makes few-seed
  intervals too narrow: 76% for 95% with 2 seeds on 4 environments).

  Raises:
    ValueError: fewer than 2 seeds or 1 environment.
  """
  if num_seeds < 2 or num_envs < 1:
    raise ValueError(
        f"Need >= 2 seeds and >= 1 environment, got {num_seeds} and "
        f"{num_envs}."
    )
  from scipy import stats  # pylint: disable=g-import-not-at-top

  z = stats.norm.ppf(0.5 + confidence / 2.0)
  shrink = math.sqrt((num_seeds - 1) / num_seeds)
  df = num_envs * (num_seeds - 1)
  return float(2.0 * stats.t.cdf(z * shrink, df) - 1.0)


def short_coverage(
    num_seeds: int, num_envs: int, confidence: float = 0.95
) -> float | None:
  """``approximate_coverage`` where it falls short of ``confidence`` by a point
  or more, else None."""
  actual = approximate_coverage(num_seeds, num_envs, confidence)
  return None if confidence - actual < 0.01 else actual


def coverage_note(
    num_seeds: int,
    num_envs: int,
    confidence: float = 0.95,
    task_bootstrap: bool = False,
) -> str | None:
  """A note for intervals whose actual coverage (``approximate_coverage``) falls
  short of ``confidence`` by a point or more, else None (always None for
  task-bootstrap intervals)."""
  if task_bootstrap:
    return None
  actual = short_coverage(num_seeds, num_envs, confidence)
  if actual is None:
    return None
  return (
      f"covers about {actual:.0%}, not {confidence:.0%}, with {num_seeds} "
      f"seeds on {num_envs} environment(s)"
  )


# ------------------------------------------------------------ metrics ----


def iqm(scores: np.ndarray) -> float:
  """Interquartile mean (25% trimmed mean) of all entries of ``scores``."""
  return float(_rly_metrics().aggregate_iqm(np.asarray(scores, np.float64)))


def _all_metrics(gamma: float) -> Callable[[np.ndarray], np.ndarray]:
  rly_metrics = _rly_metrics()

  def func(x: np.ndarray) -> np.ndarray:
    return np.array(
        [
            rly_metrics.aggregate_median(x),
            rly_metrics.aggregate_iqm(x),
            rly_metrics.aggregate_mean(x),
            rly_metrics.aggregate_optimality_gap(x, gamma),
        ]
    )

  return func


def aggregate_metrics(
    scores: ScoreDict,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    gamma: float = 1.0,
    task_bootstrap: bool = False,
) -> dict[str, AggregateResult]:
  """``{rule: AggregateResult}`` (in order): median, IQM, mean and optimality
  gap below ``gamma`` (1.0: the reference score) with intervals."""
  _check_bootstrap_args(reps, confidence)
  scores = check_scores(scores)
  results = {}
  for rule, x in scores.items():
    point, interval = _interval_estimate(
        x, _all_metrics(gamma), reps, confidence, seed, task_bootstrap
    )
    fields = {
        name: Interval(
            float(point[i]), float(interval[0, i]), float(interval[1, i])
        )
        for i, name in enumerate(METRICS)
    }
    results[rule] = AggregateResult(
        rule=rule,
        num_seeds=x.shape[0],
        num_envs=x.shape[1],
        confidence=confidence,
        reps=int(reps),
        **fields,
    )
  return results


def probability_of_improvement(
    scores: ScoreDict,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[tuple[str, str], ImprovementProbability]:
  """``{(x, y): ImprovementProbability}`` with intervals, for ``pairs``
  (default: every ordered pair of rules); rules may differ in seeds, not
  environments."""
  _check_bootstrap_args(reps, confidence)
  scores = check_scores(scores)
  if pairs is None:
    pairs = list(itertools.permutations(scores, 2))
  results = {}
  for x, y in pairs:
    for rule in (x, y):
      if rule not in scores:
        raise ValueError(
            f"Unknown rule {rule!r}; the scores hold " f"{list(scores)}."
        )
    point, interval = _interval_estimate(
        [scores[x], scores[y]],
        lambda a, b: np.array(
            [_rly_metrics().probability_of_improvement(a, b)]
        ),
        reps,
        confidence,
        seed,
    )
    results[(x, y)] = ImprovementProbability(
        rule_x=x,
        rule_y=y,
        probability=Interval(
            float(point[0]), float(interval[0, 0]), float(interval[1, 0])
        ),
        confidence=confidence,
        reps=int(reps),
    )
  return results


def default_taus(scores: ScoreDict, num_taus: int = 101) -> np.ndarray:
  """``[num_taus]`` thresholds from the lowest to the highest score (at
  least ``[0, 1]``)."""
  values = np.concatenate(
      [np.ravel(np.asarray(v, np.float64)) for v in scores.values()]
  )
  low = min(0.0, float(np.min(values)))
  high = max(1.0, float(np.max(values)))
  return np.linspace(low, high, num_taus)


def performance_profiles(
    scores: ScoreDict,
    taus: np.ndarray | None = None,
    *,
    use_score_distribution: bool = True,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    task_bootstrap: bool = False,
) -> dict[str, PerformanceProfile]:
  """``{rule: PerformanceProfile}``: score distributions over ``taus``
  ``[num_taus]`` (None: ``default_taus``) with pointwise intervals; the fraction
  of all runs above each ``tau`` (``use_score_distribution``, as ``rliable``
  recommends), else of environments whose mean score is."""
  _check_bootstrap_args(reps, confidence)
  scores = check_scores(scores)
  taus = default_taus(scores) if taus is None else np.asarray(taus, np.float64)
  if taus.ndim != 1 or taus.size < 1:
    raise ValueError(f"taus must be a non-empty 1-D array, got {taus.shape}.")
  results = {}
  for rule, x in scores.items():
    with seeded_global_rng(seed):
      profile, cis = _rly_library().create_performance_profile(
          {rule: x},
          taus,
          use_score_distribution=use_score_distribution,
          reps=int(reps),
          confidence_interval_size=confidence,
          task_bootstrap=task_bootstrap,
      )
    low, high = np.asarray(cis[rule], np.float64)
    results[rule] = PerformanceProfile(
        rule=rule,
        taus=taus,
        fraction=np.asarray(profile[rule], np.float64),
        low=low,
        high=high,
        confidence=confidence,
    )
  return results


def sample_efficiency_curves(
    scores: ScoreDict,
    points: Sequence[float] | None = None,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    task_bootstrap: bool = False,
) -> dict[str, SampleEfficiencyCurve]:
  """``{rule: SampleEfficiencyCurve}``: IQM of ``{rule: [num_seeds, num_envs,
  num_points]}`` scores at ``points`` ``[num_points]`` (default
  ``0 .. num_points - 1``) with pointwise intervals."""
  _check_bootstrap_args(reps, confidence)
  scores = check_scores(scores, ndim=3)
  num_points = next(iter(scores.values())).shape[2]
  points = (
      np.arange(num_points, dtype=np.float64)
      if points is None
      else np.asarray(points, np.float64)
  )
  if points.shape != (num_points,):
    raise ValueError(
        f"points has shape {points.shape}; the scores have "
        f"{num_points} evaluation points."
    )

  rly_metrics = _rly_metrics()

  def iqm_per_point(x: np.ndarray) -> np.ndarray:
    return np.array(
        [rly_metrics.aggregate_iqm(x[..., i]) for i in range(x.shape[-1])]
    )

  results = {}
  for rule, x in scores.items():
    point, interval = _interval_estimate(
        x, iqm_per_point, reps, confidence, seed, task_bootstrap
    )
    results[rule] = SampleEfficiencyCurve(
        rule=rule,
        points=points,
        iqm=point,
        low=interval[0],
        high=interval[1],
        confidence=confidence,
    )
  return results
