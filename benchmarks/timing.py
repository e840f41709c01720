"""The benchmarks' one timing harness: timed calls, warm-up, interleaved
rounds of several candidates, medians and the large-matmul reference.

A *candidate* is a call that runs one unit of work to completion and returns
the seconds it took: ``Stepper`` makes one of a step function and its state,
and a script may write its own (a published notebook's loop that times its
own iterations). ``interleave`` warms every candidate up, then times them
round-robin, so that on a shared machine every candidate sees the same load:

  ours = timing.Stepper(population.step, state, logs=True)
  theirs = timing.Stepper(other_step, other_state)
  times = timing.interleave(dict(ours=ours, theirs=theirs), rounds=5)
  times.first["ours"]         # the first call: compile + run
  times.median("ours")        # median seconds over the rounds
  times.ratio("theirs", "ours")

``Matmul`` is the reference the scripts state achieved GFLOP/s against: one
large float32 matrix product, compiled once. ``Stopwatch`` measures CPU and
wall seconds of a phase, or the wall seconds of each iteration of a loop
that the script does not drive itself (``lap``). JAX is imported on first use, so that a script can
set ``XLA_FLAGS`` before it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import dataclasses
import resource
import statistics
import time
from typing import Any


def block(value: Any) -> Any:
  """``value`` once every array in it is computed (``jax.block_until_ready``
  over a pytree; other leaves pass through)."""
  import jax  # pylint: disable=g-import-not-at-top

  return jax.block_until_ready(value)


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any):
  """``(fn(*args, **kwargs), seconds)``, the output computed to the end."""
  start = time.perf_counter()
  out = block(fn(*args, **kwargs))
  return out, time.perf_counter() - start


def median(seconds: Iterable[float]) -> float:
  """The median (the mean of the middle two of an even count)."""
  return float(statistics.median(list(seconds)))


class Stepper:
  """A candidate: each call advances ``state = step(state)`` (to completion)
  and returns its seconds; ``state`` holds the latest state. With
  ``logs=True``, ``step`` returns ``(state, logs)`` (a meta-step's) and
  ``logs`` holds the latest logs."""

  def __init__(self, step: Callable[[Any], Any], state: Any, logs=False):
    self.step, self.state, self._has_logs = step, state, logs
    self.logs = None

  def __call__(self) -> float:
    out, seconds = timed(self.step, self.state)
    if self._has_logs:
      self.state, self.logs = out
    else:
      self.state = out
    return seconds


@dataclasses.dataclass
class Timings:
  """Seconds of every candidate: ``warmup`` calls (``first``: the first of
  them, which compiles), then one per round (``rounds``)."""

  warmup: dict[str, list[float]]
  rounds: dict[str, list[float]]

  @property
  def first(self) -> dict[str, float]:
    return {name: s[0] for name, s in self.warmup.items() if s}

  def median(self, name: str) -> float:
    return median(self.rounds[name])

  def mean(self, name: str) -> float:
    return float(statistics.fmean(self.rounds[name]))

  def ratio(self, name: str, reference: str) -> float:
    """Median seconds of ``name`` over those of ``reference``."""
    return self.median(name) / self.median(reference)

  def compile_seconds(self, name: str) -> float:
    """The first call less a steady one (the median round), at least 0."""
    return max(0.0, self.first[name] - self.median(name))


def interleave(
    candidates: Mapping[str, Callable[[], float]],
    rounds: int,
    warmup: int = 1,
    on_warm: Callable[[str, list[float]], None] | None = None,
    on_round: Callable[[int, dict[str, float]], None] | None = None,
) -> Timings:
  """Times ``candidates`` (each call returns its seconds) round-robin.

  Args:
    candidates: name -> candidate, timed in this order in every round.
    rounds: timed rounds after the warm-up.
    warmup: untimed calls of each candidate first, one candidate after the
      other (the first compiles); their seconds are kept.
    on_warm: called with ``(name, its warm-up seconds)`` after each
      candidate's warm-up (to print its compile time as it comes).
    on_round: called with ``(round, {name: seconds})`` after each round.

  Returns:
    Every call's seconds.
  """
  times = Timings(
      warmup={name: [] for name in candidates},
      rounds={name: [] for name in candidates},
  )
  for name, candidate in candidates.items():
    for _ in range(warmup):
      times.warmup[name].append(candidate())
    if on_warm is not None:
      on_warm(name, times.warmup[name])
  for i in range(rounds):
    this_round = {}
    for name, candidate in candidates.items():
      this_round[name] = candidate()
      times.rounds[name].append(this_round[name])
    if on_round is not None:
      on_round(i, this_round)
  return times


def repeat(candidate: Callable[[], float], calls: int, warmup: int = 1):
  """One candidate alone: ``(seconds of the first call, seconds of each of
  ``calls`` more)`` (``warmup`` calls first, the first of them kept)."""
  times = interleave(dict(only=candidate), calls, warmup)
  first = times.warmup["only"][0] if warmup else None
  return first, times.rounds["only"]


class Matmul:
  """GFLOP/s of one square float32 matrix product, compiled once: the
  reference the benchmarks state their achieved GFLOP/s against."""

  def __init__(self, size: int = 4096):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

    self.size = size
    self._a = jax.random.normal(jax.random.PRNGKey(0), (size, size))
    self._dot = jax.jit(jnp.dot)
    block(self._dot(self._a, self._a))

  def seconds(self) -> float:
    """A candidate: one product's seconds."""
    return timed(self._dot, self._a, self._a)[1]

  def gflops(self, reps: int) -> float:
    """GFLOP/s of the median of ``reps`` products."""
    seconds = median(self.seconds() for _ in range(reps))
    return 2 * self.size**3 / seconds / 1e9


def _cpu_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


class Stopwatch:
  """CPU (user + system, this process) and wall seconds of a ``with`` block
  (``cpu``, ``wall`` after it), or wall seconds since it started
  (``seconds``) or since the last ``lap``."""

  def __init__(self):
    self.restart()

  def restart(self) -> None:
    self._cpu, self._wall = _cpu_seconds(), time.perf_counter()
    self.cpu = self.wall = 0.0

  def seconds(self) -> float:
    """Wall seconds so far."""
    return time.perf_counter() - self._wall

  def lap(self) -> float:
    """Wall seconds since the start or the last lap (a loop's iteration)."""
    now = time.perf_counter()
    seconds, self._wall = now - self._wall, now
    return seconds

  def __enter__(self) -> Stopwatch:
    self.restart()
    return self

  def __exit__(self, *exc) -> None:
    self.cpu = _cpu_seconds() - self._cpu
    self.wall = time.perf_counter() - self._wall
