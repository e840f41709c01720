"""Baseline tuning in a comparison: each tuned rule trains every point of
``CompareSettings.tuning.grid`` on the tuning seeds into
``output_dir/tuning/<rule>/<env>/<point>`` (as one vmapped program or point by
point: ``GRID_RECORD`` beside them says which); the best point (``choose``)
trains the reported seeds as ``<rule>-tuned``, and ``with_reported`` sets its
score on the tuning seeds beside the reported seeds'. ``write`` adds
``tuning.csv``, ``statistics.json``'s ``tuning`` and a ``report.md``
section."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
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
from disco.training import analysis
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve

TUNING_DIR = "tuning"
TUNING_CSV = "tuning.csv"
# How a rule's grid on an environment was last trained, beside its points'
# folder: ``tuning/<rule>/<env>.grid.json``, ``{"mode": "vmapped" |
# "separate", "why": reason for separate runs or None, "points": points
# trained}``.
GRID_RECORD = ".grid.json"


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


def grid_dir(plan: runs.ComparePlan, cell: runs.Cell) -> Path:
  """The folder of ``cell``'s grid points."""
  return (
      plan.output_dir
      / TUNING_DIR
      / runs.label(cell.rule)
      / report_lib.file_name(cell.env_key)
  )


def _grid_record_path(plan: runs.ComparePlan, cell: runs.Cell) -> Path:
  folder = grid_dir(plan, cell)
  return folder.parent / (folder.name + GRID_RECORD)


def write_grid_record(
    plan: runs.ComparePlan,
    cell: runs.Cell,
    why_separate: str | None,
    num_points: int,
) -> None:
  """Records how ``num_points`` points of ``cell``'s grid were trained: one
  vmapped program (``why_separate`` None) or separately."""
  path = _grid_record_path(plan, cell)
  run_folders.make_dir(path.parent)
  run_folders.write_json(
      path,
      dict(
          mode="vmapped" if why_separate is None else "separate",
          why=why_separate,
          points=num_points,
      ),
  )


def grid_record(plan: runs.ComparePlan, cell: runs.Cell) -> dict | None:
  """``cell``'s ``GRID_RECORD`` (None: none, or unreadable)."""
  try:
    record = json.loads(_grid_record_path(plan, cell).read_text())
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) else None


def grid_text(record: dict | None) -> str:
  """How a grid was trained, in words (``GRID_RECORD``'s ``record``)."""
  if record is None:
    return "not recorded"
  if record.get("mode") == "vmapped":
    return f"one vmapped program ({record.get('points')} points)"
  return f"point by point ({record.get('why')})"


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
                output_dir=grid_dir(plan, cell) / point_name(point),
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


def _scores(
    plan: runs.ComparePlan, cell: runs.Cell, folder: Path
) -> tuple[np.ndarray, np.ndarray]:
  """``(raw, normalised)`` final scores ``[S]`` of the run in ``folder``."""
  try:
    raw = results_lib.load_run(folder).final_scores()
    return raw, reference_scores.normalize(raw, cell.env_key, plan.references)
  except ValueError as e:
    raise errors.UsageError(errors.one_line(e)) from None


def _mean_and_interval(
    norm: np.ndarray, confidence: float
) -> tuple[float | None, list[float] | None]:
  """The mean of the finite scores ``norm`` ``[S]`` and its Student-t
  ``confidence`` interval (None: no finite score, or fewer than two)."""
  finite = norm[np.isfinite(norm)]
  if not finite.size:
    return None, None
  _, low, high = analysis.mean_curve(finite[:, None], confidence)
  if low is None or not np.isfinite(low[0]):
    return float(finite.mean()), None
  return float(finite.mean()), [float(low[0]), float(high[0])]


def choose(plan: runs.ComparePlan, cell: runs.Cell) -> dict[str, Any]:
  """The grid point of a tuned ``cell``: the best mean normalised final return
  over the tuning seeds (all seeds diverged: -inf; first wins ties).

  Returns:
    ``dict(rule, label, env, point, score, interval, seeds, total_env_steps,
      points, grid)``; ``points`` lists every point's ``dict(point, score,
      interval, mean_return, per_seed)`` (``interval``: the score's Student-t
      interval at ``config.confidence``); ``grid``: the ``GRID_RECORD``.
  """
  confidence = plan.settings.statistics.confidence
  points = []
  for point, tuning_cell in tuning_cells(plan, cell):
    raw, norm = _scores(plan, cell, tuning_cell.output_dir)
    score, interval = _mean_and_interval(norm, confidence)
    points.append(
        dict(
            point=point,
            score=score,
            interval=interval,
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
      interval=points[best]["interval"],
      seeds=list(plan.tuning.seeds),
      total_env_steps=plan.tuning.total_env_steps,
      points=points,
      grid=grid_record(plan, cell),
  )


def with_reported(
    plan: runs.ComparePlan, cell: runs.Cell, choice: dict[str, Any]
) -> dict[str, Any]:
  """``reported_check`` of ``choice`` (``choose``'s, of the tuned ``cell``)
  with the final scores of ``cell``'s finished run."""
  raw, norm = _scores(plan, cell, cell.output_dir)
  return reported_check(choice, raw, norm, plan.settings.statistics.confidence)


def reported_check(
    choice: dict[str, Any],
    raw: np.ndarray,
    norm: np.ndarray,
    confidence: float,
) -> dict[str, Any]:
  """``choice`` with ``reported``: the chosen point's ``dict(score, interval,
  per_seed)`` on the reported seeds (their final returns ``raw`` and
  normalised scores ``norm``, ``[S]``), and ``warning``: one line where the
  ``confidence`` interval of that score and the tuning seeds' do not overlap
  (else None)."""
  score, interval = _mean_and_interval(np.asarray(norm), confidence)
  tuning = choice["interval"]
  warning = None
  if (
      tuning is not None
      and interval is not None
      and (tuning[1] < interval[0] or interval[1] < tuning[0])
  ):
    warning = (
        f"{choice['label']} on {choice['env']}: the chosen point scores "
        f"{_interval_text(choice['score'], tuning)} on the tuning seeds but "
        f"{_interval_text(score, interval)} on the reported seeds (their "
        f"{confidence:.0%} intervals do not overlap): the tuning seeds did "
        "not tell it from a lucky draw; tune on more seeds "
        "(config.tune.num_seeds)."
    )
  return dict(
      choice,
      reported=dict(
          score=score, interval=interval, per_seed=[float(x) for x in raw]
      ),
      warning=warning,
  )


def _interval_text(score: float | None, interval: list[float] | None) -> str:
  text = run_folders.fmt(score, 3)
  if interval is not None:
    text += f" [{interval[0]:.3f}, {interval[1]:.3f}]"
  return text


def write(
    plan: runs.ComparePlan, choices: list[dict[str, Any]], stats: dict[str, Any]
) -> None:
  """``tuning.csv``, the ``tuning`` entry of ``statistics.json`` (and of
  ``stats``) and the tuning section of ``report.md`` (``choices``: those of
  ``with_reported``)."""
  _write_csv(plan, choices)
  tuning = plan.tuning
  entry = dict(
      rules=list(tuning.rules),
      grid={k: list(v) for k, v in tuning.grid.items()},
      seeds=list(tuning.seeds),
      total_env_steps=tuning.total_env_steps,
      keep_untuned=tuning.keep_untuned,
      vmap=tuning.vmap,
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


def _bounds(interval: list[float] | None) -> list[Any]:
  return ["", ""] if interval is None else list(interval)


def _write_csv(plan: runs.ComparePlan, choices: list[dict[str, Any]]) -> None:
  keys = list(plan.tuning.grid)
  with files.atomic_write(plan.output_dir / TUNING_CSV, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(
        [
            "rule",
            "env",
            *keys,
            "score",
            "score_low",
            "score_high",
            "mean_return",
            "per_seed",
            "chosen",
            "reported_score",
            "reported_low",
            "reported_high",
            "trained",
        ]
    )
    for choice in choices:
      for p in choice["points"]:
        chosen = p["point"] == choice["point"]
        reported = choice.get("reported") if chosen else None
        writer.writerow(
            [
                choice["rule"],
                choice["env"],
                *(p["point"][k] for k in keys),
                "" if p["score"] is None else p["score"],
                *_bounds(p["interval"]),
                "" if p["mean_return"] is None else p["mean_return"],
                " ".join(f"{x:g}" for x in p["per_seed"]),
                int(chosen),
                ""
                if not reported or reported["score"] is None
                else reported["score"],
                *_bounds(reported["interval"] if reported else None),
                grid_text(choice.get("grid")),
            ]
        )


def _report_lines(
    plan: runs.ComparePlan, choices: list[dict[str, Any]]
) -> list[str]:
  tuning, keys = plan.tuning, list(plan.tuning.grid)
  level = f"{plan.settings.statistics.confidence:.0%}"
  lines = [
      "",
      "## Tuned baselines",
      "",
      f"Each of {', '.join(tuning.rules)} was tuned per environment: "
      f"every point of the grid trained seeds {list(tuning.seeds)} "
      f"(kept apart from the reported seeds) for "
      f"{tuning.total_env_steps} environment steps; the point with the "
      "best mean normalised final return trained the reported seeds, "
      f"reported as `<rule>{runs.TUNED_SUFFIX}`. Its score on the tuning "
      f"seeds and on the reported seeds (means with {level} Student-t "
      "intervals) should agree: the best of several points on few seeds "
      f"flatters it. Every point's score: `{TUNING_CSV}`.",
      "",
      "| rule | environment | chosen | tuning seeds | reported seeds | "
      f"trained as | grid ({', '.join(keys)}: score) |",
      "|---|---|---|---|---|---|---|",
  ]
  warnings = []
  for choice in choices:
    chosen = ", ".join(f"{k}={v:g}" for k, v in choice["point"].items())
    grid = "; ".join(
        "/".join(f"{p['point'][k]:g}" for k in keys)
        + f": {run_folders.fmt(p['score'], 2)}"
        for p in choice["points"]
    )
    reported = choice.get("reported") or {}
    lines.append(
        f"| {choice['label']} | {choice['env']} | {chosen} | "
        f"{_interval_text(choice['score'], choice['interval'])} | "
        f"{_interval_text(reported.get('score'), reported.get('interval'))} "
        f"| {grid_text(choice.get('grid'))} | {grid} |"
    )
    if choice.get("warning"):
      warnings.append(choice["warning"])
  if warnings:
    lines += ["", *(f"**Warning:** {w}" for w in warnings)]
  return lines
