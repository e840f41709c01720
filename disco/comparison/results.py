"""The results of a comparison, read back from ``disco-eval`` output folders:
``load_run`` reads one (a rule on an environment, several seeds); ``Results``
holds a grid and gives final scores ``{rule: [num_seeds, num_envs]}``, learning
curves ``{rule: [num_seeds, num_envs, num_points]}`` at shared points (raw or
normalised) and ``results.csv``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import csv
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from disco import files
from disco.environments import reference_scores
from disco.training import analysis

CURVE_EPISODES = 100  # episodes per window of the learning curves
SUMMARY = "summary.json"  # written last: a run folder with it is complete

CSV_COLUMNS = (
    "rule",
    "env",
    "seed",
    "env_steps",
    "return",
    "normalized_return",
)


class RunError(ValueError):
  """A run folder is missing, unreadable or inconsistent."""


@dataclasses.dataclass(frozen=True)
class Run:
  """One rule on one environment, several seeds.

  Attributes:
    rule: the rule's label.
    env: the environment's normalisation key, e.g. ``catch/5x5``.
    seeds: ``[S]`` seeds.
    metrics: ``{name: [S, N]}`` per-iteration metrics.
    last_episodes: episodes of the final score.
    path: the run folder.
  """

  rule: str
  env: str
  seeds: tuple[int, ...]
  metrics: Mapping[str, np.ndarray]
  last_episodes: int
  path: Path

  def final_scores(self) -> np.ndarray:
    """``[S]`` mean return of the last ``last_episodes`` episodes."""
    return analysis.final_scores(self.metrics, self.last_episodes)

  def curve_at(self, env_steps: Sequence[int]) -> np.ndarray:
    """``[S, P]`` windowed mean return after the iteration reaching each of
    ``env_steps`` (the last iteration beyond the run's end)."""
    curve = analysis.return_curve(self.metrics, CURVE_EPISODES)
    steps = np.asarray(self.metrics["env_steps"])[0]
    idx = np.minimum(np.searchsorted(steps, env_steps), steps.size - 1)
    return curve[:, idx]


def load_run(path: str | os.PathLike[str]) -> Run:
  """Reads a ``disco-eval`` output folder.

  Raises:
    RunError: naming the folder and what is wrong with it.
  """
  path = Path(path).expanduser()
  if not (path / SUMMARY).is_file() and (path / "config.json").is_file():
    raise RunError(
        f"The run in {path} did not finish (no {SUMMARY}): run it again, or "
        "leave it out."
    )
  try:
    config = json.loads((path / "config.json").read_text())["config"]
    rule = str(json.loads((path / SUMMARY).read_text())["rule"])
    metrics = analysis.read_metrics_csv(path / "metrics.csv")
    seeds = tuple(int(s) for s in np.asarray(metrics.pop("seed"))[:, 0])
    env = reference_scores.env_key(config["env"], config.get("env_settings"))
    last = int(config["last_episodes"])
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise RunError(
        f"Cannot read the run folder {path} ({type(e).__name__}: {e}); it "
        f"must hold the config.json, metrics.csv and {SUMMARY} of a "
        "disco-eval run."
    ) from None
  return Run(
      rule=rule,
      env=env,
      seeds=seeds,
      metrics=metrics,
      last_episodes=last,
      path=path,
  )


@dataclasses.dataclass(frozen=True)
class Results:
  """A grid of runs: every rule on every environment.

  Attributes:
    rules: rule labels, in order.
    envs: environment keys, in order.
    runs: ``{(rule, env): Run}`` for every pair.
  """

  rules: tuple[str, ...]
  envs: tuple[str, ...]
  runs: Mapping[tuple[str, str], Run]

  @classmethod
  def from_runs(cls, runs: Sequence[Run]) -> Results:
    """The grid of ``runs``.

    Raises:
      RunError: a pair missing or given twice, a rule's runs with different
        numbers of seeds, or a seed that diverged or ended no episode.
    """
    rules = tuple(dict.fromkeys(r.rule for r in runs))
    envs = tuple(dict.fromkeys(r.env for r in runs))
    grid = {}
    for r in runs:
      if (r.rule, r.env) in grid:
        raise RunError(
            f"Two runs of rule {r.rule!r} on {r.env!r}: {grid[r.rule, r.env].path}"
            f" and {r.path}; pass one of them."
        )
      grid[r.rule, r.env] = r
    missing = [f"{a} on {e}" for a in rules for e in envs if (a, e) not in grid]
    if missing:
      raise RunError(
          f"The runs do not cover every rule on every environment: missing "
          f"{', '.join(missing)}."
      )
    diverged = [
        f"seed {seed} of {r.rule} on {r.env} at env step {at}"
        for r in runs
        for seed, at in zip(
            r.seeds, analysis.diverged_env_steps(r.metrics), strict=True
        )
        if at is not None
    ]
    if diverged:
      raise RunError(
          f"Diverged (non-finite agent parameters): {', '.join(diverged)}. "
          "A diverged seed has no score to compare: change the rule's "
          "settings (e.g. a lower learning rate) or leave the run out."
      )
    no_episodes = [
        f"seed {seed} of {r.rule} on {r.env}"
        for r in runs
        for seed, n in zip(
            r.seeds, np.asarray(r.metrics["episodes"]).sum(axis=1), strict=True
        )
        if n == 0
    ]
    if no_episodes:
      raise RunError(
          f"No episode ended in {', '.join(no_episodes)}, so it has no "
          "score: raise total_env_steps (or shorten the episodes)."
      )
    for rule in rules:
      counts = {len(grid[rule, e].seeds) for e in envs}
      if len(counts) > 1:
        raise RunError(
            f"Rule {rule!r} has runs with different numbers of seeds "
            f"({sorted(counts)}); use the same seeds on every environment."
        )
    return cls(rules=rules, envs=envs, runs=grid)

  def evaluation_points(self, num_points: int) -> np.ndarray:
    """``[P]`` environment steps shared by every run: ``num_points`` evenly
    spaced up to the shortest run's end, less those where some seed has not yet
    ended an episode.

    Raises:
      RunError: no point is left.
    """
    last = min(
        int(np.asarray(r.metrics["env_steps"])[0, -1])
        for r in self.runs.values()
    )
    points = np.unique(
        np.linspace(last / num_points, last, num_points)
        .round()
        .astype(np.int64)
    )
    ended = np.ones(points.shape, bool)
    for run in self.runs.values():
      ended &= ~np.isnan(run.curve_at(points)).any(axis=0)
    if not ended.any():
      raise RunError(
          f"Some seed has ended no episode by env step {last}, where the "
          "shortest run ends, so no learning-curve point is shared: give "
          "every run the same, longer total_env_steps."
      )
    return points[ended]

  def final_scores(
      self,
      normalized: bool = False,
      references: Mapping[str, Any] | None = None,
  ) -> dict[str, np.ndarray]:
    """``{rule: [num_seeds, num_envs]}`` final returns (or normalised)."""
    return self._per_rule(Run.final_scores, normalized, references)

  def curves(
      self,
      points: Sequence[int],
      normalized: bool = False,
      references: Mapping[str, Any] | None = None,
  ) -> dict[str, np.ndarray]:
    """``{rule: [num_seeds, num_envs, num_points]}`` learning curves."""
    return self._per_rule(
        lambda run: run.curve_at(points), normalized, references
    )

  def _per_rule(self, scores_of, normalized, references):
    """``{rule: [num_seeds, num_envs, ...]}`` of ``scores_of(run)``, normalised
    per environment if ``normalized``."""
    out = {}
    for rule in self.rules:
      columns = []
      for env in self.envs:
        x = scores_of(self.runs[rule, env])
        columns.append(
            reference_scores.normalize(x, env, references) if normalized else x
        )
      out[rule] = np.stack(columns, axis=1)
    return out

  def write_csv(
      self,
      path: str | os.PathLike[str],
      points: Sequence[int],
      references: Mapping[str, Any] | None = None,
  ) -> Path:
    """``results.csv``: one row per rule, environment, seed and evaluation
    point."""
    path = Path(path)
    with files.atomic_write(path, "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(CSV_COLUMNS)
      for (rule, env), run in self.runs.items():
        raw = run.curve_at(points)
        try:
          norm = reference_scores.normalize(raw, env, references)
        except reference_scores.MissingReferenceError:
          norm = np.full_like(raw, np.nan)
        for s, seed in enumerate(run.seeds):
          for p, steps in enumerate(points):
            writer.writerow(
                [
                    rule,
                    env,
                    seed,
                    int(steps),
                    _cell(raw[s, p]),
                    _cell(norm[s, p]),
                ]
            )
    return path


def _cell(x: float) -> str:
  return "" if not np.isfinite(x) else repr(float(x))
