"""Aggregate scores over environments and seeds with bootstrap intervals.

Thin, typed wrappers over ``rliable`` (Agarwal et al., 2021, "Deep
Reinforcement Learning at the Edge of the Statistical Precipice"). Every
function takes a score dict ``{rule: scores}`` of normalised scores (see
``disco.scoring.normalization``) where ``scores`` is
``[num_seeds, num_envs]`` (or ``[num_seeds, num_envs, num_points]`` for
sample-efficiency curves), and returns frozen dataclasses.

Intervals are stratified-bootstrap confidence intervals: seeds are resampled
with replacement within each environment (``rliable.library``), ``reps``
times. ``rliable`` draws its bootstrap indices from NumPy's global random
state, so its own ``random_state`` argument does not make the intervals
reproducible; here every call seeds that global state with ``seed`` for its
duration and restores it afterwards (so these functions are not thread-safe).
Each rule (and each pair of rules) is bootstrapped separately from the same
seed, so adding a rule to the dict leaves the intervals of the others
unchanged.
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
  """``ImportError`` where the installed pandas and arch cannot import
  ``rliable.library`` (pandas 3 beside arch 7), read from the packages'
  metadata (``version``) without importing them."""

  def major(package: str) -> int | None:
    try:
      return int(version(package).split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
      return None

  if (major("pandas") or 0) >= 3 and (major("arch") or 8) < 8:
    raise ImportError(_PANDAS_3_ERROR)


# rliable, scipy.stats and what rliable.library brings (arch, statsmodels,
# pandas, matplotlib) take about two seconds to import, which every
# launcher process would pay before parsing its flags: they are imported
# where first used. The one known way for them to fail to import is
# refused here, when this module is imported, before any training starts.
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
  """Aggregate metrics of one rule over ``[num_seeds, num_envs]`` scores.

  Attributes:
    rule: the rule's name.
    median: median over environments of the per-environment mean score.
    iqm: interquartile mean of all ``num_seeds * num_envs`` scores.
    mean: mean over environments of the per-environment mean score.
    optimality_gap: mean shortfall below ``gamma`` (lower is better).
    num_seeds: seeds per environment.
    num_envs: environments.
    confidence: coverage of the intervals.
    reps: bootstrap replications.
  """

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
  """P(a run of ``rule_x`` scores higher than one of ``rule_y``).

  The probability is the Mann-Whitney estimate per environment (ties count
  one half) averaged over environments; 0.5 means no difference.
  """

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
  """Fraction of runs (or of environments) scoring above each threshold,
  with its ``Band``.

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
  """Seeds NumPy's global random state for a block, then restores it.

  ``rliable``'s bootstraps draw their indices with ``np.random.choice``, so
  this is what makes them reproducible.
  """
  saved = np.random.get_state()
  np.random.seed(seed)
  try:
    yield
  finally:
    np.random.set_state(saved)


def check_scores(
    scores: ScoreDict, ndim: int = 2, min_seeds: int = MIN_SEEDS
) -> dict[str, np.ndarray]:
  """Validates a score dict and returns it as float64 arrays.

  Args:
    scores: ``{rule: [num_seeds, num_envs]}`` (``ndim=2``) or
      ``{rule: [num_seeds, num_envs, num_points]}`` (``ndim=3``).
    ndim: expected number of dimensions.
    min_seeds: fewest seeds accepted.

  Returns:
    ``{rule: float64 array}`` in the same order.

  Raises:
    ValueError: if the dict is empty, an array has the wrong shape, too few
      seeds or non-finite values, or the rules disagree on the trailing
      dimensions (environments, points).
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
  interval of the mean over ``num_seeds`` seeds on each of ``num_envs``
  environments, by a normal approximation.

  The percentile bootstrap estimates the variance of a mean with the
  plug-in (divide-by-n) variance and normal quantiles, so with few seeds
  its intervals are too narrow: roughly ``xbar +- z s sqrt((n-1)/n) /
  sqrt(n E)`` where ``(xbar - mu) sqrt(n E) / s`` is t-distributed with
  ``E (n - 1)`` degrees of freedom, which gives
  ``P(|T_{E(n-1)}| <= z sqrt((n-1)/n))``: 76% for a nominal 95% with 2
  seeds on 4 environments, 85% with 3, 90% with 5, 93% with 10. The
  simulated coverage of the mean, IQM and median of normal scores
  (``calibration.interval_coverage``) is within 2 points of it
  (``BENCHMARKS.md``).
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


def coverage_note(
    num_seeds: int,
    num_envs: int,
    confidence: float = 0.95,
    task_bootstrap: bool = False,
) -> str | None:
  """A note for intervals whose actual coverage falls short of
  ``confidence`` by a percentage point or more (``approximate_coverage``),
  else ``None``. Task-bootstrap intervals (which also resample
  environments) are not calibrated here: ``None``."""
  if task_bootstrap:
    return None
  actual = approximate_coverage(num_seeds, num_envs, confidence)
  if confidence - actual < 0.01:
    return None
  return (
      f"covers about {actual:.0%}, not {confidence:.0%}, with {num_seeds} "
      f"seeds on {num_envs} environment(s)"
  )


# ------------------------------------------------------------ metrics ----


def iqm(scores: np.ndarray) -> float:
  """Interquartile mean (25% trimmed mean) of all entries of ``scores``.

  Args:
    scores: ``[num_seeds, num_envs]`` (any shape is flattened).
  """
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
  """Median, IQM, mean and optimality gap of each rule with intervals.

  Args:
    scores: ``{rule: [num_seeds, num_envs]}`` normalised scores.
    reps: bootstrap replications (``rliable`` uses 50000 in its paper; a few
      thousand are usually enough; use tens in tests).
    confidence: coverage of the intervals.
    seed: seed of the bootstrap.
    gamma: the optimality-gap threshold (1.0: the reference score).
    task_bootstrap: also resample environments (``rliable``'s task
      bootstrap: the uncertainty of a new set of environments as well as of
      new seeds; wider intervals). ``probability_of_improvement`` has no
      such option in ``rliable``.

  Returns:
    ``{rule: AggregateResult}`` in the order of ``scores``.
  """
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
  """P(X > Y) for every ordered pair of rules, with intervals.

  Args:
    scores: ``{rule: [num_seeds, num_envs]}``; rules may have different
      numbers of seeds but need the same environments.
    pairs: ``(x, y)`` pairs to compare; by default every ordered pair of
      distinct rules.
    reps: bootstrap replications (each resamples both rules' seeds
      independently, within each environment).
    confidence: coverage of the intervals.
    seed: seed of the bootstrap.

  Returns:
    ``{(x, y): ImprovementProbability}``.
  """
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
  """Score distributions (performance profiles) with pointwise intervals.

  Args:
    scores: ``{rule: [num_seeds, num_envs]}``.
    taus: ``[num_taus]`` thresholds; ``default_taus(scores)`` if ``None``.
    use_score_distribution: fraction of all runs above ``tau`` (``True``,
      recommended by ``rliable``) or fraction of environments whose mean
      score is above ``tau`` (``False``).
    reps: bootstrap replications.
    confidence: coverage of the intervals.
    seed: seed of the bootstrap.
    task_bootstrap: also resample environments (see ``aggregate_metrics``).

  Returns:
    ``{rule: PerformanceProfile}``.
  """
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
  """IQM with intervals at every evaluation point of a learning curve.

  Args:
    scores: ``{rule: [num_seeds, num_envs, num_points]}``.
    points: ``[num_points]`` x values, e.g. environment steps (default
      ``0 .. num_points - 1``).
    reps: bootstrap replications. ``rliable`` draws the seeds of a
      replication independently for every environment and every point, so
      the band is pointwise: each point's interval has the nominal
      coverage, not the whole curve's.
    confidence: coverage of the intervals.
    seed: seed of the bootstrap.
    task_bootstrap: also resample environments (see ``aggregate_metrics``).

  Returns:
    ``{rule: SampleEfficiencyCurve}``.
  """
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
