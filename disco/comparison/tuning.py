"""Baseline tuning in a comparison: each tuned rule trains every point of
``CompareSettings.tuning.grid`` on the tuning seeds into
``output_dir/tuning/<rule>/<env>/<point>``; the best point (``choose``) trains
the reported seeds as ``<rule>-tuned``. ``write`` adds ``tuning.csv``,
``statistics.json``'s ``tuning`` and a ``report.md`` section."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from typing import Any

import numpy as np

from disco import errors
from disco import files
from disco import run_folders
from disco.comparison import report as report_lib
from disco.comparison import results as results_lib
from disco.comparison import runs
from disco.comparison import settings as settings_lib
from disco.environments import reference_scores
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve

TUNING_DIR = "tuning"
TUNING_CSV = "tuning.csv"


def point_name(point: dict[str, float]) -> str:
  """A folder name for a grid point."""
  return report_lib.file_name("_".join(f"{k}={v:g}" for k, v in point.items()))


def apply_point(cell: runs.Cell, point: dict[str, float]) -> runs.Cell:
  """``cell`` with the settings of a grid point."""
  overrides, hyper = settings_lib.apply_point(
      cell.overrides, cell.hyper_params, point
  )
  return dataclasses.replace(cell, overrides=overrides, hyper_params=hyper)


def _rule_hyper_params(rule: str) -> dict[str, float]:
  """A rule's hyper-parameters with their defaults."""
  if resolve.is_rule_path(rule):
    settings = resolve.resolve_rule(rule).settings
  else:
    try:
      settings = rule_registry.default_settings(rule)
    except ValueError as e:
      raise errors.UsageError(errors.one_line(e)) from None
  return {k: float(v) for k, v in settings.hyper_params.items()}


def check_grid(tuning: settings_lib.Tuning) -> None:
  """Raises a ``UsageError`` for a grid setting a tuned rule lacks
  (``TUNABLE_SETTINGS`` or its hyper-parameters)."""
  for rule in tuning.rules:
    valid = (
        *settings_lib.TUNABLE_SETTINGS,
        *sorted(_rule_hyper_params(rule)),
    )
    unknown = sorted(set(tuning.grid) - set(valid))
    if unknown:
      raise errors.UsageError(
          f"config.tune.grid: unknown setting(s) {unknown} for rule "
          f"{rule!r}; valid: {', '.join(valid)}."
      )


def tuning_cells(
    plan: runs.ComparePlan, cell: runs.Cell
) -> list[tuple[dict, runs.Cell]]:
  """A tuned ``cell``'s grid points ``[(point, Cell)]``."""
  tuning = plan.tuning
  out = []
  for point in tuning.points():
    tuned = apply_point(cell, point)
    out.append(
        (
            point,
            dataclasses.replace(
                tuned,
                overrides=dict(
                    tuned.overrides,
                    seed=tuning.seeds[0],
                    num_seeds=len(tuning.seeds),
                    total_env_steps=tuning.total_env_steps,
                ),
                output_dir=plan.output_dir
                / TUNING_DIR
                / runs.label(cell.rule)
                / report_lib.file_name(cell.env_key)
                / point_name(point),
                label=runs.label(cell.rule),
                tuned=False,
            ),
        )
    )
  return out


def status(plan: runs.ComparePlan, cell: runs.Cell) -> tuple[bool, str | None]:
  """``Cell.status`` of ``cell`` as it runs: a tuned cell is finished when its
  tuning runs are and its run has the chosen settings."""
  if not cell.tuned:
    return cell.status(plan.settings)
  for _, tuning_cell in tuning_cells(plan, cell):
    if not tuning_cell.status(plan.settings)[0]:
      return False, None
  return apply_point(cell, choose(plan, cell)["point"]).status(plan.settings)


def choose(plan: runs.ComparePlan, cell: runs.Cell) -> dict[str, Any]:
  """The grid point of a tuned ``cell``: the best mean normalised final return
  over the tuning seeds (all seeds diverged: -inf; first wins ties).

  Returns:
    ``dict(rule, label, env, point, score, seeds, total_env_steps, points)``;
      ``points`` lists every point's ``dict(point, score, mean_return,
      per_seed)``.
  """
  points = []
  for point, tuning_cell in tuning_cells(plan, cell):
    try:
      raw = results_lib.load_run(tuning_cell.output_dir).final_scores()
      norm = reference_scores.normalize(raw, cell.env_key, plan.references)
    except ValueError as e:
      raise errors.UsageError(errors.one_line(e)) from None
    finite = np.isfinite(norm)
    points.append(
        dict(
            point=point,
            score=float(norm[finite].mean()) if finite.any() else None,
            mean_return=(
                float(raw[np.isfinite(raw)].mean())
                if np.isfinite(raw).any()
                else None
            ),
            per_seed=[float(x) for x in raw],
        )
    )
  scores = [-math.inf if p["score"] is None else p["score"] for p in points]
  best = int(np.argmax(scores))
  return dict(
      rule=cell.rule,
      label=cell.label,
      env=cell.env_key,
      point=points[best]["point"],
      score=points[best]["score"],
      seeds=list(plan.tuning.seeds),
      total_env_steps=plan.tuning.total_env_steps,
      points=points,
  )


def write(
    plan: runs.ComparePlan, choices: list[dict[str, Any]], stats: dict[str, Any]
) -> None:
  """``tuning.csv``, the ``tuning`` entry of ``statistics.json`` (and of
  ``stats``) and the tuning section of ``report.md``."""
  _write_csv(plan, choices)
  tuning = plan.tuning
  entry = dict(
      rules=list(tuning.rules),
      grid={k: list(v) for k, v in tuning.grid.items()},
      seeds=list(tuning.seeds),
      total_env_steps=tuning.total_env_steps,
      keep_untuned=tuning.keep_untuned,
      choices=choices,
  )
  stats["tuning"] = entry
  path = plan.output_dir / "statistics.json"
  saved = json.loads(path.read_text())
  saved["tuning"] = run_folders.to_jsonable(entry)
  files.write_text(path, report_lib.json_text(saved))
  report = plan.output_dir / "report.md"
  files.write_text(
      report,
      report.read_text() + "\n".join(_report_lines(plan, choices)) + "\n",
  )


def _write_csv(plan: runs.ComparePlan, choices: list[dict[str, Any]]) -> None:
  keys = list(plan.tuning.grid)
  with files.atomic_write(plan.output_dir / TUNING_CSV, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(
        ["rule", "env", *keys, "score", "mean_return", "per_seed", "chosen"]
    )
    for choice in choices:
      for p in choice["points"]:
        writer.writerow(
            [
                choice["rule"],
                choice["env"],
                *(p["point"][k] for k in keys),
                "" if p["score"] is None else p["score"],
                "" if p["mean_return"] is None else p["mean_return"],
                " ".join(f"{x:g}" for x in p["per_seed"]),
                int(p["point"] == choice["point"]),
            ]
        )


def _report_lines(
    plan: runs.ComparePlan, choices: list[dict[str, Any]]
) -> list[str]:
  tuning, keys = plan.tuning, list(plan.tuning.grid)
  lines = [
      "",
      "## Tuned baselines",
      "",
      f"Each of {', '.join(tuning.rules)} was tuned per environment: "
      f"every point of the grid trained seeds {list(tuning.seeds)} "
      f"(kept apart from the reported seeds) for "
      f"{tuning.total_env_steps} environment steps; the point with the "
      "best mean normalised final return trained the reported seeds, "
      f"reported as `<rule>{runs.TUNED_SUFFIX}`. Every point's score: "
      f"`{TUNING_CSV}`.",
      "",
      f"| rule | environment | chosen | score | grid ({', '.join(keys)}: "
      "score) |",
      "|---|---|---|---|---|",
  ]
  for choice in choices:
    chosen = ", ".join(f"{k}={v:g}" for k, v in choice["point"].items())
    grid = "; ".join(
        "/".join(f"{p['point'][k]:g}" for k in keys)
        + f": {run_folders.fmt(p['score'], 2)}"
        for p in choice["points"]
    )
    lines.append(
        f"| {choice['label']} | {choice['env']} | {chosen} | "
        f"{run_folders.fmt(choice['score'], 3)} | {grid} |"
    )
  return lines
