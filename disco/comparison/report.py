"""The files of a comparison: statistics of a ``results.Results`` grid.

``write_report`` computes normalised final scores and their aggregates with
bootstrap intervals (and, with few seeds, their approximate actual coverage),
the probability of improvement, performance profiles and sample-efficiency
curves (``disco.scoring.aggregates``), and pairwise two-sided tests on every
environment and on the per-seed mean normalised score (``significance``). It
writes ``report.md``, ``results.csv``, ``statistics.json`` and the figures
``aggregates.png``, ``profiles.png``, ``improvement.png``,
``sample_efficiency.png``, ``curves_<env>.png`` and, for rules that log
their tuned hyper-parameters, ``hyper_params_<env>.png``.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import datetime
import json
import math
from pathlib import Path
import re
from typing import Any

import numpy as np

from disco import files
from disco.comparison import plots
from disco.comparison import results as results_lib
from disco.comparison import significance
from disco.comparison import two_sample
from disco.environments import reference_scores
from disco.scoring import aggregates
from disco.training import analysis
from disco.update_rules import self_tuning


@dataclasses.dataclass(frozen=True)
class ReportSettings:
  """How a comparison's statistics are computed.

  Attributes:
    test: the two-sided pairwise test (``two_sample.TESTS``).
    alpha: the family-wise significance level of each table (of all, with
      ``holm_across_envs``).
    power: target power of the seeds-needed estimate.
    reps: bootstrap replications (intervals, resampling tests).
    seed: seed of every resampling.
    num_points: points of the sample-efficiency curves (less those before every
      seed ended an episode).
    confidence: level of every interval.
    task_bootstrap: aggregate, profile and curve intervals also resample
      environments.
    min_effect: the a-priori minimum effect (|Hedges' g|) of the seeds-needed
      estimate (None: observed).
    holm_across_envs: one Holm-Bonferroni family over every pairwise table.
  """

  test: str = two_sample.DEFAULT_TEST
  alpha: float = 0.05
  power: float = 0.8
  reps: int = 2000
  seed: int = 0
  num_points: int = 20
  confidence: float = 0.95
  task_bootstrap: bool = False
  min_effect: float | None = None
  holm_across_envs: bool = False


def required_seeds(settings: ReportSettings, num_rules: int) -> tuple[int, str]:
  """``(seeds per rule, what needs them)``: ``aggregates.MIN_SEEDS`` for the
  bootstrap intervals, and with several rules the test's
  ``two_sample.min_seeds``."""
  needed, what = aggregates.MIN_SEEDS, "the bootstrap intervals"
  if num_rules > 1:
    needed = max(needed, two_sample.min_seeds(settings.test, settings.alpha))
    what = f"the {settings.test} test at alpha={settings.alpha} and {what}"
  return needed, what


def check(
    results: results_lib.Results,
    settings: ReportSettings,
    references: Mapping[str, Any] | None = None,
) -> None:
  """Raises ValueError (one line, naming the fix) if the statistics cannot be
  computed: an environment without a reference return, or too few seeds."""
  for env in results.envs:
    reference_scores.normalize(0.0, env, references)
  needed, what = required_seeds(settings, len(results.rules))
  for rule in results.rules:
    n = len(results.runs[rule, results.envs[0]].seeds)
    if n < needed:
      raise ValueError(
          f"Rule {rule!r} has {n} seed(s); {what} need at least {needed} "
          "per rule: raise num_seeds."
      )


def jsonable(x: Any) -> Any:
  """``x`` as strict JSON values: containers as dicts and lists, NumPy values as
  Python ones, NaN and +-inf as ``None``."""
  if isinstance(x, Mapping):
    return {str(k): jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple, np.ndarray)):
    return [jsonable(v) for v in x]
  if isinstance(x, (bool, np.bool_)):
    return bool(x)
  if isinstance(x, (int, np.integer)):
    return int(x)
  if isinstance(x, (float, np.floating)):
    return float(x) if math.isfinite(x) else None
  return x


def json_text(x: Any) -> str:
  """``x`` as strict JSON text (see ``jsonable``)."""
  return json.dumps(jsonable(x), indent=2, allow_nan=False) + "\n"


def file_name(env: str) -> str:
  """A file name for environment key ``env`` (or a rule label): letters, digits,
  ``_``, ``.`` and ``-``, never starting with ``.``; ``""`` when nothing is
  left."""
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", env).lstrip(".").strip("_")


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
  return [
      "| " + " | ".join(header) + " |",
      "|" + "---|" * len(header),
      *("| " + " | ".join(r) + " |" for r in rows),
  ]


def _test_rows(rows: list[significance.ComparisonRow]) -> list[list[str]]:
  out = []
  for r in rows:
    needed = "-" if r.seeds_needed is None else str(r.seeds_needed)
    out.append(
        [
            r.rule_a,
            r.rule_b,
            f"{r.mean_a:.3f}",
            f"{r.mean_b:.3f}",
            f"{r.p_value:.3g}",
            f"{r.p_holm:.3g}",
            "yes" if r.reject else "no",
            f"{r.effect_size_name} {r.effect_size:.2f}",
            needed,
            significance.difference_text(r),
        ]
    )
  return out


def _pairwise_tests(
    results: results_lib.Results,
    raw: dict[str, np.ndarray],
    scores: dict[str, np.ndarray],
    settings: ReportSettings,
) -> dict[str, list[significance.ComparisonRow]]:
  """Every pair of rules on each environment (final returns) and, with several
  environments, on the mean normalised score; ``{}`` for one rule."""
  if len(results.rules) < 2:
    return {}
  test_kw = dict(
      reps=settings.reps,
      seed=settings.seed,
      confidence=settings.confidence,
      test=settings.test,
      alpha=settings.alpha,
      power=settings.power,
      min_effect=settings.min_effect,
  )
  tests = {
      env: significance.pairwise_table(
          significance.env_scores(raw, i), **test_kw
      )
      for i, env in enumerate(results.envs)
  }
  if len(results.envs) > 1:
    tests["all environments (mean normalised score)"] = (
        significance.pairwise_table(
            {
                r: significance.per_seed_aggregate(x, "mean")
                for r, x in scores.items()
            },
            **test_kw,
        )
    )
  if settings.holm_across_envs:
    tests = significance.apply_holm(tests, settings.alpha)
  return tests


def _figures(
    results: results_lib.Results, out: Path, agg, profiles, curves, improvement
) -> list[Path]:
  """Draws the report's figures into ``out``; returns their paths."""
  figures = [
      plots.plot_aggregate_intervals(agg, out / "aggregates.png"),
      plots.plot_performance_profiles(profiles, out / "profiles.png"),
      plots.plot_sample_efficiency(curves, out / "sample_efficiency.png"),
  ]
  if improvement:
    figures.append(
        plots.plot_probability_of_improvement(
            improvement, out / "improvement.png"
        )
    )
  for env in results.envs:
    path = out / f"curves_{file_name(env)}.png"
    analysis.plot_learning_curves(
        {rule: results.runs[rule, env].metrics for rule in results.rules},
        path=path,
        min_episodes=results_lib.CURVE_EPISODES,
        title=env,
    )
    figures.append(path)
    # Rules that tune their own hyper-parameters log them: how they moved.
    tuned = plots.plot_hyper_parameters(
        {rule: results.runs[rule, env].metrics for rule in results.rules},
        f"learner/{self_tuning.LOG_PREFIX}",
        out / f"hyper_params_{file_name(env)}.png",
        title=env,
    )
    if tuned is not None:
      figures.append(tuned)
  return figures


def write_report(
    results: results_lib.Results,
    out: str | Path,
    settings: ReportSettings = ReportSettings(),
    references: Mapping[str, Any] | None = None,
    title: str = "Comparison",
) -> dict[str, Any]:
  """Computes the statistics and writes the files into folder ``out``.

  Returns:
    The statistics as JSON values (as in ``statistics.json``; NaN and infinities
      are None).

  Raises:
    ValueError: see ``check``.
  """
  check(results, settings, references)
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  kw = dict(
      reps=settings.reps, seed=settings.seed, confidence=settings.confidence
  )
  task_kw = dict(kw, task_bootstrap=settings.task_bootstrap)
  points = results.evaluation_points(settings.num_points)
  results.write_csv(out / "results.csv", points, references)
  raw = results.final_scores()
  scores = results.final_scores(normalized=True, references=references)
  agg = aggregates.aggregate_metrics(scores, **task_kw)
  profiles = aggregates.performance_profiles(scores, **task_kw)
  curves = aggregates.sample_efficiency_curves(
      results.curves(points, normalized=True, references=references),
      points,
      **task_kw,
  )
  improvement = {}
  if len(results.rules) > 1:
    improvement = aggregates.probability_of_improvement(scores, **kw)
  tests = _pairwise_tests(results, raw, scores, settings)
  figures = _figures(results, out, agg, profiles, curves, improvement)
  stats = dict(
      rules=list(results.rules),
      envs=list(results.envs),
      settings=dataclasses.asdict(settings),
      evaluation_points=points.tolist(),
      final_returns={r: x.tolist() for r, x in raw.items()},
      normalized_final_scores={r: x.tolist() for r, x in scores.items()},
      aggregates={r: dataclasses.asdict(a) for r, a in agg.items()},
      interval_coverage={r: _coverage(a, settings) for r, a in agg.items()},
      probability_of_improvement=[
          dict(x=x, y=y, **dataclasses.asdict(p.probability))
          for (x, y), p in improvement.items()
      ],
      tests={k: [r.as_dict() for r in rows] for k, rows in tests.items()},
      references=[
          dataclasses.asdict(reference_scores.get_entry(e, references))
          for e in results.envs
      ],
      figures=[Path(f).name for f in figures],
  )
  stats = jsonable(stats)
  files.write_text(out / "statistics.json", json_text(stats))
  files.write_text(
      out / "report.md",
      _markdown(
          results, settings, raw, agg, improvement, tests, references, title
      )
      + "\n",
  )
  return stats


def _coverage(
    agg: aggregates.AggregateResult, settings: ReportSettings
) -> dict[str, Any]:
  """The nominal and approximate actual coverage of a rule's intervals (None
  with the task bootstrap), and the note when it falls short."""
  return dict(
      nominal=settings.confidence,
      approximate=None
      if settings.task_bootstrap
      else aggregates.approximate_coverage(
          agg.num_seeds, agg.num_envs, settings.confidence
      ),
      note=aggregates.coverage_note(
          agg.num_seeds,
          agg.num_envs,
          settings.confidence,
          settings.task_bootstrap,
      ),
  )


def _header(results, settings: ReportSettings, title: str) -> list[str]:
  seeds = {
      r: len(results.runs[r, results.envs[0]].seeds) for r in results.rules
  }
  holm = (
      "over all tables together"
      if settings.holm_across_envs
      else "within each table"
  )
  power = (
      f"{settings.power:.0%} power to detect the minimum effect of "
      f"interest |g|={settings.min_effect:g}"
      if settings.min_effect is not None
      else f"{settings.power:.0%} power at the observed effect size"
  )
  return [
      f"# {title}",
      "",
      f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. "
      f"Rules: {', '.join(f'{r} ({n} seeds)' for r, n in seeds.items())}. "
      f"Environments: {', '.join(results.envs)}. Intervals are "
      f"{settings.confidence:.0%} stratified-bootstrap intervals "
      f"({settings.reps} resamples"
      + (", environments resampled too" if settings.task_bootstrap else "")
      + f"); tests are two-sided {settings.test} tests (null hypothesis: no "
      f"difference) at alpha={settings.alpha}, Holm-Bonferroni corrected "
      + holm
      + "; seeds needed: for "
      + power
      + ".",
  ]


def _returns_section(results, raw) -> list[str]:
  rows = [
      [rule]
      + [
          f"{raw[rule][:, i].mean():.3f} ({', '.join(f'{v:.2f}' for v in raw[rule][:, i])})"
          for i in range(len(results.envs))
      ]
      for rule in results.rules
  ]
  return [
      "",
      "## Final returns (mean of the last episodes; mean over seeds, "
      "per-seed values)",
      "",
      *_markdown_table(["rule", *results.envs], rows),
  ]


def _normalisation_section(results, references) -> list[str]:
  entries = (
      reference_scores.get_entry(env, references) for env in results.envs
  )
  return [
      "",
      "## Normalisation",
      "",
      "Scores are normalised per environment: 0 is a uniform random "
      "policy, 1 the reference.",
      "",
      *_markdown_table(
          [
              "environment",
              "random",
              "reference",
              "reference algorithm",
              "budget (env steps)",
              "source",
          ],
          [
              [
                  e.env,
                  f"{e.random_return:g}",
                  f"{e.reference_return:g}",
                  e.reference_algorithm,
                  _budget_text(e),
                  e.source,
              ]
              for e in entries
          ],
      ),
  ]


def _budget_text(entry) -> str:
  """A reference's training budget for the report."""
  if isinstance(entry.budget_env_steps, int):
    return f"{entry.budget_env_steps:,}"
  if entry.budget_env_steps:
    return str(entry.budget_env_steps)
  if "optimal" in entry.reference_algorithm:
    return "none (an optimum)"
  return "not stated"


def _aggregates_section(agg, settings: ReportSettings) -> list[str]:
  notes = {r: _coverage(a, settings)["note"] for r, a in agg.items()}
  lines = ["", "## Aggregates of the normalised scores", ""]
  lines += _markdown_table(
      ["rule", "IQM", "mean", "median", "optimality gap", "coverage"],
      [
          [
              r,
              str(a.iqm),
              str(a.mean),
              str(a.median),
              str(a.optimality_gap),
              notes[r] or f"about {settings.confidence:.0%}",
          ]
          for r, a in agg.items()
      ],
  )
  if any(notes.values()):
    lines += [
        "",
        "With few seeds the bootstrap intervals are too narrow: the "
        "coverage column is the approximate actual coverage of the "
        "intervals of a mean (normal scores; the documentation's statistics design page, 'Error rates and interval coverage'). "
        "Add seeds for intervals that keep their nominal level.",
    ]
  return lines


def _tests_section(name: str, rows, settings: ReportSettings) -> list[str]:
  lines = ["", f"## Pairwise tests: {name}", ""]
  lines += _markdown_table(
      [
          "rule a",
          "rule b",
          "mean a",
          "mean b",
          "p",
          "p (Holm)",
          f"reject at {settings.alpha}",
          "effect size",
          "seeds needed",
          f"mean a - mean b [{settings.confidence:.0%} interval]",
      ],
      _test_rows(rows),
  )
  warnings = [
      f"- {r.rule_a} vs {r.rule_b}: {r.warning}" for r in rows if r.warning
  ]
  if warnings:
    lines += ["", *warnings]
  return lines


def _markdown(
    results, settings, raw, agg, improvement, tests, references, title
) -> str:
  lines = _header(results, settings, title)
  lines += _returns_section(results, raw)
  lines += _normalisation_section(results, references)
  lines += _aggregates_section(agg, settings)
  if improvement:
    lines += ["", "## Probability of improvement P(X > Y)", ""]
    lines += _markdown_table(
        ["X", "Y", "P(X > Y)"],
        [[x, y, str(p.probability)] for (x, y), p in improvement.items()],
    )
  for name, rows in tests.items():
    lines += _tests_section(name, rows, settings)
  lines += [
      "",
      "## Figures",
      "",
      "`aggregates.png`, `profiles.png`, `sample_efficiency.png`"
      + (", `improvement.png`" if improvement else "")
      + ", the learning curves `curves_<environment>.png` (and, where a "
      "rule tunes its own hyper-parameters, their course in "
      "`hyper_params_<environment>.png`); every "
      "value is in `results.csv` and `statistics.json`.",
  ]
  return "\n".join(lines)
