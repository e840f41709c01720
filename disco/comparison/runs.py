"""The runs of a comparison: a ``Cell`` per rule and environment, in
``output_dir/runs/<rule>/<env>``. A cell is finished (``Cell.status``) when its
folder holds a complete summary and the settings and input files (by SHA-256)
the comparison would give it, so a killed sweep continues and a changed setting
or file runs again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from disco import errors
from disco import evaluation
from disco import run_folders
from disco.comparison import report as report_lib
from disco.comparison import results as results_lib
from disco.comparison import settings as settings_lib
from disco.environments import reference_scores
from disco.environments import registry as env_registry
from disco.evaluation import outputs as eval_outputs
from disco.update_rules import migrations
from disco.update_rules import resolve

RUNS_DIR = "runs"
TUNED_SUFFIX = "-tuned"
# Settings of a disco-eval run that do not change its results, or whose
# effect is compared in the rule's resolved settings (``rule_settings``)
# rather than as given.
UNCOMPARED_KEYS = (
    "preset",
    "hyper_params",
    "rule_kwargs",
    "output_dir",
    "overwrite",
    "tracking",
    "compilation_cache",
    "distributed",
)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of the grid: ``rule`` (as given) on registry environment ``env``
  with ``env_settings``, writing to ``output_dir``; the rule's ``overrides`` of
  the disco-eval settings, ``hyper_params`` and ``rule_kwargs``; its ``label``
  in the results (``<rule>-tuned`` for a tuned baseline) and whether it is
  ``tuned``."""

  rule: str
  env: str
  env_settings: dict[str, Any]
  overrides: dict[str, Any]
  output_dir: Path
  hyper_params: dict[str, Any] = dataclasses.field(default_factory=dict)
  rule_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
  label: str = ""
  tuned: bool = False

  @property
  def env_key(self) -> str:
    return reference_scores.env_key(self.env, self.env_settings)

  def eval_config(self, settings: settings_lib.CompareSettings):
    """The ``disco-eval`` config of this run."""
    return settings_lib.eval_config(
        settings,
        rule=self.rule,
        env=self.env,
        env_settings=self.env_settings,
        output_dir=self.output_dir,
        overrides=self.overrides,
        hyper_params=self.hyper_params,
        rule_kwargs=self.rule_kwargs,
    )

  def build(
      self, settings: settings_lib.CompareSettings
  ) -> evaluation.EvalPlan:
    """``evaluation.build`` of this run, under this cell's label."""
    plan = evaluation.build(self.eval_config(settings), log=lambda _: None)
    if self.label and self.label != plan.label:
      plan = dataclasses.replace(
          plan, rule=dataclasses.replace(plan.rule, label=self.label)
      )
    return plan

  def status(
      self, settings: settings_lib.CompareSettings
  ) -> tuple[bool, str | None]:
    """``(finished, why not)``: finished when the folder holds a complete
    ``summary.json`` and a ``config.json`` with this comparison's settings for
    the run (old spellings upgraded) and the same input-file digests;
    ``why not`` names what is damaged or stale (None: never finished)."""
    out = self.output_dir
    if not (out / results_lib.SUMMARY).exists():
      return False, None
    try:
      summary = json.loads((out / results_lib.SUMMARY).read_text())
      if not isinstance(summary, dict) or "rule" not in summary:
        raise ValueError("it is not a disco-eval summary")
    except (OSError, ValueError) as e:
      return (
          False,
          f"its {results_lib.SUMMARY} is damaged ({errors.one_line(e)})",
      )
    try:
      record = json.loads((out / "config.json").read_text())
      run = record.get("run")
      saved = dict(
          migrations.upgraded_eval_config(record["config"]),
          # As today's version would have written them.
          rule_settings=migrations.upgraded_settings(
              record["rule_settings"],
              str(out / "config.json"),
              run.get("disco_version") if isinstance(run, dict) else None,
          ),
      )
    except (OSError, ValueError, KeyError, TypeError) as e:
      return False, f"its config.json is damaged ({errors.one_line(e)})"
    plan = self.build(settings)
    current = dict(
        evaluation.resolved_config(plan),
        rule_settings=plan.rule.settings.to_dict(),
    )
    diff = run_folders.setting_differences(saved, current, UNCOMPARED_KEYS)
    if diff:
      more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
      return False, (
          f"it ran with other settings ({'; '.join(diff[:3])}{more})"
      )
    try:
      inputs = eval_outputs.input_files(plan)
    except errors.UsageError as e:
      return False, errors.one_line(e).rstrip(".")
    changes = eval_outputs.input_file_changes(
        run.get(eval_outputs.INPUT_FILES) if isinstance(run, dict) else None,
        inputs,
    )
    if changes:
      return False, "; ".join(changes)
    return True, None


@dataclasses.dataclass(frozen=True)
class ComparePlan:
  """A comparison: its settings, its runs and where it writes."""

  settings: settings_lib.CompareSettings
  cells: list[Cell]
  output_dir: Path

  @property
  def run_dirs(self) -> tuple[Path, ...]:
    return self.settings.run_dirs

  @property
  def references(self) -> dict[str, reference_scores.ReferenceEntry]:
    return self.settings.references

  @property
  def shard(self) -> tuple[int, int]:
    return self.settings.shard

  @property
  def tuning(self) -> settings_lib.Tuning | None:
    return self.settings.tuning

  def my_cells(self) -> list[Cell]:
    index, count = self.shard
    return self.cells[index::count]


# The names the launchers give the rule files they write: such a file is
# named by its folder too, so two runs' files can be compared side by side.
GENERIC_RULE_FILES = ("meta_params", "best_meta_params", "student")


def label(rule: str) -> str:
  """A rule's name in the results and its folder name: a registered name, or a
  rule file's stem (``<folder>-<stem>`` for ``GENERIC_RULE_FILES``), made a
  safe file name so every run folder stays inside ``output_dir``."""
  if resolve.is_rule_path(rule):
    path = Path(rule)
    rule = path.stem
    if rule in GENERIC_RULE_FILES and path.parent.name:
      rule = f"{path.parent.name}-{rule}"
  return report_lib.file_name(rule) or "rule"


def make_cells(
    settings: settings_lib.CompareSettings, output_dir: Path
) -> list[Cell]:
  """Every run of the grid in order (a tuned rule: its tuned run, and with
  ``keep_untuned`` its own too).

  Raises:
    UsageError: an unknown environment or setting, a run given twice, or a rule
      file whose folder would be outside ``output_dir``.
  """
  tuned_rules = settings.tuning.rules if settings.tuning is not None else ()
  cells = []
  for rule in settings.rules:
    variants = [(label(rule), False)]
    if rule in tuned_rules:
      variants = [(label(rule) + TUNED_SUFFIX, True)]
      if settings.tuning.keep_untuned:
        variants.insert(0, (label(rule), False))
    for env in settings.envs:
      full = _env_settings(env)
      key = reference_scores.env_key(env.name, full)
      for name, tuned in variants:
        cell = Cell(
            rule=rule,
            env=env.name,
            env_settings=full,
            overrides=settings.rule_overrides.get(rule, {}),
            output_dir=output_dir / RUNS_DIR / name / report_lib.file_name(key),
            hyper_params=settings.hyper_params.get(rule, {}),
            rule_kwargs=settings.rule_kwargs.get(rule, {}),
            label=name,
            tuned=tuned,
        )
        _check_inside(cell.output_dir, output_dir, rule)
        if any(c.output_dir == cell.output_dir for c in cells):
          raise errors.UsageError(
              f"config.rules and config.envs give the run {rule} on {key} "
              "twice: list every rule and environment once."
          )
        cells.append(cell)
  return cells


def _env_settings(env: settings_lib.EnvSpec) -> dict[str, Any]:
  """Every setting of ``env``: its registered defaults with those given."""
  try:
    entry = env_registry.get_entry(env.name)
    env_registry.make_env(env.name, 1, **env.settings)  # checks the settings
  except (ValueError, TypeError) as e:
    raise errors.UsageError(
        f"config.envs {env.spec!r}: {errors.one_line(e)}"
    ) from None
  return {**entry.settings, **env.settings}


def _check_inside(folder: Path, output_dir: Path, rule: str) -> None:
  root = output_dir.expanduser().resolve()
  if not folder.expanduser().resolve().is_relative_to(root):
    raise errors.UsageError(
        f"The run folder of rule {rule!r} ({folder}) would be outside "
        f"output_dir {output_dir}: rename the rule file."
    )
