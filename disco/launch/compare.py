r"""Comparison launcher: rules x environments x seeds, with statistics.

  disco-compare --config.rules="('disco103', 'actor_critic', 'ppo')" \
      --config.envs="('catch', 'delayed_chain', 'gymnax/CartPole-v1')"

(or ``python -m disco.launch.compare ...``). The settings live in
``configs/compare.py``. Every rule runs on every environment with
``num_seeds`` seeds through the ``disco-eval`` steps (``evaluate.build``,
``run``, ``write``) into ``output_dir/runs/<rule>/<environment>``; runs
that finished are skipped, so a killed sweep continues where it stopped.
Then ``output_dir`` gets ``report.md``, ``results.csv``,
``statistics.json`` and figures (``disco.comparison.report``). With
``run_dirs`` it only aggregates existing ``disco-eval`` folders; with
``shard="i/n"`` it runs every n-th run (for n processes sharing a sweep).
``--config.hyper_params.<rule>.<key>=VALUE`` sets a rule's hyper-parameter
and ``--config.network.<key>=VALUE`` every rule's agent network; ``tune``
tunes baselines per environment on seeds kept apart from the reported ones
(see ``configs/compare.py`` and ``Tuning``).
Bad input ends the program with one line on stderr and exit status 2 before
anything is trained.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
import csv
import dataclasses
import itertools
import json
import math
from pathlib import Path
import re
from typing import Any

from ml_collections import config_dict
import numpy as np

from disco import checks
from disco import errors
from disco import files
from disco import run_folders
from disco import stopping
from disco.comparison import aggregates
from disco.comparison import normalization
from disco.comparison import report as report_lib
from disco.comparison import results as results_lib
from disco.comparison import significance
from disco.environments import registry as env_registry
from disco.launch import common
from disco.launch import evaluate
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve
from disco.update_rules import settings as rule_settings

UsageError = errors.UsageError

PROGRAM = "disco-compare"
CONFIG_NAME = "compare"
RUNS_DIR = "runs"
TUNING_DIR = "tuning"
TUNING_CSV = "tuning.csv"
TUNED_SUFFIX = "-tuned"
# What a tuning grid may vary besides the rule's hyper-parameters.
TUNABLE_SETTINGS = ("learning_rate",)


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/compare.py``."""
  return checks.load_config(CONFIG_NAME)


# The disco-eval settings every run of a comparison shares.
SHARED_KEYS = (
    "weights",
    "imports",
    "num_seeds",
    "seed",
    "total_env_steps",
    "tracking",
)
# The disco-eval settings a comparison passes on (and rule_overrides may set).
EVAL_KEYS = (
    "num_envs",
    "rollout_len",
    "batch_size",
    "replay_capacity",
    "min_replay_size",
    "iterations_per_call",
    "last_episodes",
)
OVERRIDE_KEYS = (
    *EVAL_KEYS,
    "learning_rate",
    "loss_mask",
    "update_epochs",
    "num_minibatches",
)


# Settings of a disco-eval run that do not change its results, or whose
# effect is compared in the rule's resolved settings (``rule_settings``)
# rather than as given.
UNCOMPARED_KEYS = (
    "hyper_params",
    "rule_kwargs",
    "output_dir",
    "overwrite",
    "tracking",
    "compilation_cache",
    "distributed",
)


def _json(x: Any) -> Any:
  return json.loads(json.dumps(run_folders.to_jsonable(x)))


def settings_differences(saved: dict, current: dict) -> list[str]:
  """``key: saved X, now Y`` for each setting of a disco-eval
  ``config.json`` (its ``config`` with its ``rule_settings``) that differs,
  except ``UNCOMPARED_KEYS``."""
  saved, current = _json(saved), _json(current)
  return [
      f"{key}: saved {saved.get(key, '<absent>')!r}, now "
      f"{current.get(key, '<absent>')!r}"
      for key in sorted(set(saved) | set(current))
      if key not in UNCOMPARED_KEYS and saved.get(key) != current.get(key)
  ]


def parse_spec(spec: str, what: str) -> tuple[str, dict[str, Any]]:
  """``"name:key=value,..."`` -> ``(name, {key: value})``; values are Python
  literals (``rows=5``, ``conv_channels=(16,)``) or else strings."""
  name, _, rest = str(spec).partition(":")
  items, depth, current = [], 0, ""
  for char in rest:  # split at the commas outside brackets
    if char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
    if char == "," and depth == 0:

      items.append(current)
      current = ""
    else:
      current += char
  if current.strip():
    items.append(current)
  settings = {}
  for item in items:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
      raise UsageError(f"Bad {what} {spec!r}: write name:key=value,key=value.")
    try:
      settings[key.strip()] = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
      settings[key.strip()] = value.strip()
  return name.strip(), settings


# ------------------------------------------------------------ building ----


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of the grid: a rule on an environment.

  Attributes:
    rule: the rule as given (registry name or file).
    env: the environment's registry name.
    env_settings: its settings.
    overrides: the rule's changes of the disco-eval settings.
    output_dir: where the run writes.
    hyper_params: the rule's hyper-parameter changes.
    rule_kwargs: the rule's other settings (``rule_settings``).
    network: the agent-network changes (disco-eval's ``network`` keys).
    label: the rule's name in the results (``<rule>-tuned`` for a tuned
      baseline).
    tuned: its settings are chosen by tuning (``Plan.tuning``) before it
      runs.
  """

  rule: str
  env: str
  env_settings: dict[str, Any]
  overrides: dict[str, Any]
  output_dir: Path
  hyper_params: dict[str, Any] = dataclasses.field(default_factory=dict)
  rule_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
  network: dict[str, Any] = dataclasses.field(default_factory=dict)
  label: str = ""
  tuned: bool = False

  @property
  def env_key(self) -> str:
    return normalization.env_key(self.env, self.env_settings)

  def status(self, config: config_dict.ConfigDict) -> tuple[bool, str | None]:
    """``(finished, why not)``: finished when the folder holds a complete
    ``summary.json`` and a ``config.json`` saying it ran with the settings
    this comparison would run it with; ``why not`` names a damaged or stale
    run (None for a run that never finished)."""
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
      saved = dict(record["config"], rule_settings=record["rule_settings"])
    except (OSError, ValueError, KeyError, TypeError) as e:
      return False, f"its config.json is damaged ({errors.one_line(e)})"
    plan = self.build(config)
    current = dict(
        evaluate.resolved_config(plan),
        rule_settings=plan.rule.settings.to_dict(),
    )
    diff = settings_differences(saved, current)
    if diff:
      more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
      return False, (
          f"it ran with other settings ({'; '.join(diff[:3])}{more})"
      )
    return True, None

  def eval_config(
      self, config: config_dict.ConfigDict
  ) -> config_dict.ConfigDict:
    """The ``disco-eval`` config of this run."""
    eval_config = evaluate.default_config()
    values = {k: config[k] for k in (*SHARED_KEYS, *EVAL_KEYS)}
    values.update(
        rule=self.rule,
        env=self.env,
        output_dir=str(self.output_dir),
        overwrite=True,
    )
    values.update(self.overrides)
    with eval_config.unlocked():
      eval_config.env_settings = dict(self.env_settings)
      eval_config.hyper_params = dict(self.hyper_params)
      eval_config.rule_kwargs = dict(self.rule_kwargs)
      for key, value in values.items():
        eval_config[key] = value
      for key, value in self.network.items():
        eval_config.network[key] = value
    return eval_config

  def build(self, config: config_dict.ConfigDict) -> evaluate.Plan:
    """``evaluate.build`` of this run, under this cell's label."""
    plan = evaluate.build(self.eval_config(config), log=lambda _: None)
    if self.label and self.label != plan.label:
      plan = dataclasses.replace(
          plan, rule=dataclasses.replace(plan.rule, label=self.label)
      )
    return plan


@dataclasses.dataclass(frozen=True)
class Plan:
  """A comparison: its runs (or existing folders) and statistics settings."""

  config: config_dict.ConfigDict
  cells: list[Cell]
  run_dirs: list[Path]
  settings: report_lib.Settings
  references: dict[str, normalization.ReferenceEntry]
  output_dir: Path
  shard: tuple[int, int]
  tuning: Tuning | None = None

  def my_cells(self) -> list[Cell]:
    index, count = self.shard
    return self.cells[index::count]


@dataclasses.dataclass(frozen=True)
class Tuning:
  """Baseline tuning: each of ``rules`` on each environment trains every
  point of ``grid`` with the tuning seeds; the point with the best mean
  normalised final return (the comparison's own score; first on ties)
  sets the reported run's settings.

  Attributes:
    rules: the tuned rules.
    grid: ``{setting: values}``: ``learning_rate`` or a hyper-parameter.
    seeds: the tuning seeds (disjoint from the reported ones).
    total_env_steps: per tuning seed.
    keep_untuned: report each tuned rule with its own settings too.
  """

  rules: tuple[str, ...]
  grid: dict[str, tuple[float, ...]]
  seeds: tuple[int, ...]
  total_env_steps: int
  keep_untuned: bool

  def points(self) -> list[dict[str, float]]:
    """Every combination of the grid's values, in order."""
    keys = list(self.grid)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(self.grid[k] for k in keys))
    ]


def point_name(point: dict[str, float]) -> str:
  """A folder name for a grid point."""
  return report_lib.file_name("_".join(f"{k}={v:g}" for k, v in point.items()))


def _apply_point(cell: Cell, point: dict[str, float]) -> Cell:
  """``cell`` with the settings of a grid point."""
  overrides, hyper = dict(cell.overrides), dict(cell.hyper_params)
  for key, value in point.items():
    if key in TUNABLE_SETTINGS:
      overrides[key] = value
    else:
      hyper[key] = value
  return dataclasses.replace(cell, overrides=overrides, hyper_params=hyper)


def _rule_hyper_params(rule: str) -> dict[str, float]:
  """A rule's hyper-parameters with their defaults."""
  if resolve.is_rule_path(rule):
    settings = resolve.resolve_rule(rule).settings
  else:
    try:
      settings = rule_registry.default_settings(rule)
    except ValueError as e:
      raise UsageError(errors.one_line(e)) from None
  return {
      k: float(v)
      for k, v in checks.as_dict(settings.hyper_params, "hyper_params").items()
  }


def _grid(text: str) -> dict[str, tuple[float, ...]]:
  """``"key=(v1,v2),key2=v"`` -> ``{key: (v1, v2), key2: (v,)}``."""
  _, values = parse_spec(f"grid:{text}", "tune.grid")
  grid = {}
  for key, value in values.items():
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not items:
      raise UsageError(
          f"config.tune.grid: {key} has no values; give at least one, e.g. "
          f"{key}=(0.01,0.1)."
      )
    try:
      numbers = tuple(float(v) for v in items)
    except (TypeError, ValueError):
      raise UsageError(
          f"config.tune.grid: {key}={value!r} must be numbers, e.g. "
          f"{key}=(0.01,0.1)."
      ) from None
    if not all(math.isfinite(v) for v in numbers):
      raise UsageError(f"config.tune.grid: {key}={value!r} must be finite.")
    grid[key] = numbers
  return grid


def _tuning(config: config_dict.ConfigDict, seeds: range) -> Tuning | None:
  """Checks ``config.tune``; None when nothing is tuned.

  Raises:
    UsageError: an unknown rule or setting, an empty grid or value list, or
      tuning seeds that overlap the reported ones.
  """
  tune = config.tune
  rules = tuple(tune.rules or ())
  if not rules:
    if tune.grid:
      raise UsageError(
          "config.tune.grid is given but config.tune.rules is empty: name "
          "the rules to tune, e.g. --config.tune.rules=\"('actor_critic',)\"."
      )
    return None
  for rule in rules:
    if rule not in config.rules:
      raise UsageError(
          f"config.tune.rules: {rule!r} is not one of config.rules "
          f"{list(config.rules)}."
      )
  if not str(tune.grid).strip():
    raise UsageError(
        "config.tune.grid is empty: give the settings to try, e.g. "
        "--config.tune.grid='learning_rate=(3e-4,1e-3),entropy_cost="
        "(0.01,0.2)'."
    )
  grid = _grid(tune.grid)
  for rule in rules:
    valid = (*TUNABLE_SETTINGS, *sorted(_rule_hyper_params(rule)))
    unknown = sorted(set(grid) - set(valid))
    if unknown:
      raise UsageError(
          f"config.tune.grid: unknown setting(s) {unknown} for rule "
          f"{rule!r}; valid: {', '.join(valid)}."
      )
  num_seeds = checks.check_int(tune.num_seeds, "tune.num_seeds", 1)
  first = checks.check_int(tune.seed, "tune.seed", 0)
  tune_seeds = range(first, first + num_seeds)
  overlap = sorted(set(tune_seeds) & set(seeds))
  if overlap:
    raise UsageError(
        f"The tuning seeds {list(tune_seeds)} overlap the reported seeds "
        f"{list(seeds)} (both {overlap}): set config.tune.seed to at least "
        f"{seeds[-1] + 1}."
    )
  steps = tune.total_env_steps
  if steps is None:
    steps = config.total_env_steps
  return Tuning(
      rules=rules,
      grid=grid,
      seeds=tuple(tune_seeds),
      total_env_steps=checks.check_int(steps, "tune.total_env_steps", 1),
      keep_untuned=checks.check_bool(tune.keep_untuned, "tune.keep_untuned"),
  )


def _shard(text: str) -> tuple[int, int]:
  if not text:
    return 0, 1
  m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
  if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
    raise UsageError(f"config.shard={text!r}: write 'i/n' with 0 <= i < n.")
  return int(m.group(1)), int(m.group(2))


def parse_references(
    specs: Sequence[str],
) -> dict[str, normalization.ReferenceEntry]:
  """``config.references`` (``"env:random=R,reference=X,source=TEXT"``) as
  normalisation entries."""
  out = {}
  for spec in specs:
    env, values = parse_spec(spec, "reference")
    try:
      out[env] = normalization.ReferenceEntry(
          env=env,
          random_return=float(values["random"]),
          random_source=str(values.get("random_source", "given")),
          reference_return=float(values["reference"]),
          reference_algorithm=str(values.get("algorithm", "given")),
          budget_env_steps=values.get("budget"),
          source=str(values.get("source", "given on the command line")),
      )
    except (KeyError, TypeError, ValueError):
      raise UsageError(
          f"Bad reference {spec!r}: write env:random=R,reference=X"
          ",source=TEXT."
      ) from None
  return out


def _label(rule: str) -> str:
  """A rule's name in the results and its folder name: a registered name,
  or a rule file's stem, made safe as a file name (no ``/``, no leading
  ``.``), so that every run folder stays inside ``output_dir``."""
  if resolve.is_rule_path(rule):
    rule = Path(rule).stem
  return report_lib.file_name(rule) or "rule"


def _per_rule(config, key: str) -> dict[str, dict[str, Any]]:
  """``config.<key>`` (``hyper_params`` or ``rule_kwargs``) as ``{rule:
  {setting: value}}``.

  Raises:
    UsageError: for a rule that is not in ``config.rules``.
  """
  given = checks.as_dict(config.get(key) or {}, key)
  out = {}
  for rule, values in given.items():
    if rule not in config.rules:
      raise UsageError(
          f"config.{key}.{rule}: {rule!r} is not one of config.rules "
          f"{list(config.rules)}."
      )
    out[rule] = checks.as_dict(values or {}, f"{key}.{rule}")
  return out


def _cells(
    config, output_dir: Path, tuning: Tuning | None = None
) -> list[Cell]:
  overrides = {}
  for spec in config.rule_overrides:
    rule, values = parse_spec(spec, "rule override")
    unknown = sorted(set(values) - set(OVERRIDE_KEYS))
    if unknown:
      raise UsageError(
          f"config.rule_overrides {spec!r}: unknown setting(s) {unknown}; "
          f"valid: {', '.join(OVERRIDE_KEYS)}."
      )
    if rule not in config.rules:
      raise UsageError(
          f"config.rule_overrides {spec!r}: {rule!r} is not "
          f"one of config.rules {list(config.rules)}."
      )
    overrides[rule] = values
  hyper_params = _per_rule(config, "hyper_params")
  rule_kwargs = _per_rule(config, "rule_kwargs")
  network = {
      k: v
      for k, v in checks.as_dict(config.network, "network").items()
      if v is not None
  }
  tuned_rules = tuning.rules if tuning is not None else ()
  cells = []
  for rule in config.rules:
    variants = [(_label(rule), False)]
    if rule in tuned_rules:
      variants = [(_label(rule) + TUNED_SUFFIX, True)]
      if tuning.keep_untuned:
        variants.insert(0, (_label(rule), False))
    for spec in config.envs:
      env, settings = parse_spec(spec, "environment")
      try:
        entry = env_registry.get_entry(env)
        env_registry.make_env(env, 1, **settings)  # checks the settings
      except (ValueError, TypeError) as e:
        raise UsageError(
            f"config.envs {spec!r}: {errors.one_line(e)}"
        ) from None
      full = {**entry.settings, **settings}
      key = normalization.env_key(env, full)
      for label, tuned in variants:
        cell = Cell(
            rule=rule,
            env=env,
            env_settings=full,
            overrides=overrides.get(rule, {}),
            output_dir=output_dir
            / RUNS_DIR
            / label
            / report_lib.file_name(key),
            hyper_params=hyper_params.get(rule, {}),
            rule_kwargs=rule_kwargs.get(rule, {}),
            network=network,
            label=label,
            tuned=tuned,
        )
        _check_inside(cell.output_dir, output_dir, rule)
        twin = next((c for c in cells if c.output_dir == cell.output_dir), None)
        if twin is not None:
          raise UsageError(
              f"config.rules and config.envs give the run {rule} on {key} "
              "twice: list every rule and environment once."
          )
        cells.append(cell)
  return cells


def _check_inside(folder: Path, output_dir: Path, rule: str) -> None:
  root = output_dir.expanduser().resolve()
  if not folder.expanduser().resolve().is_relative_to(root):
    raise UsageError(
        f"The run folder of rule {rule!r} ({folder}) would be outside "
        f"output_dir {output_dir}: rename the rule file."
    )


def tuning_cells(plan: Plan, cell: Cell) -> list[tuple[dict, Cell]]:
  """The grid points of a tuned ``cell``: ``[(point, Cell)]``, each trained
  on the tuning seeds into ``output_dir/tuning/<rule>/<env>/<point>``."""
  tuning = plan.tuning
  out = []
  for point in tuning.points():
    tuned = _apply_point(cell, point)
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
                / _label(cell.rule)
                / report_lib.file_name(cell.env_key)
                / point_name(point),
                label=_label(cell.rule),
                tuned=False,
            ),
        )
    )
  return out


def _check_seeds(
    num_seeds: int, num_rules: int, settings: report_lib.Settings
) -> None:
  """``report.check``'s seed check, before anything trains."""
  needed, what = report_lib.required_seeds(settings, num_rules)
  if num_seeds < needed:
    raise UsageError(
        f"config.num_seeds={num_seeds} is too few for {what}: use at least "
        f"{needed}."
    )


def _probability(value: Any, name: str) -> float:
  value = checks.check_number(value, name)
  if not 0.0 < value < 1.0:
    raise UsageError(f"config.{name} must be in (0, 1), got {value!r}.")
  return value


def build(config: config_dict.ConfigDict) -> Plan:
  """Checks ``config`` (and every run's disco-eval config) before anything
  is trained.

  Raises:
    UsageError: for any bad setting, with a one-line explanation.
  """
  checks.check_config_keys(config, default_config(), CONFIG_NAME)
  checks.import_modules(config.imports)
  if config.test not in significance.TESTS:
    raise UsageError(
        f"Unknown config.test {config.test!r}; use one of "
        f"{', '.join(significance.TESTS)}."
    )
  min_effect = config.min_effect
  if min_effect is not None:
    min_effect = checks.check_number(min_effect, "min_effect", positive=True)
  settings = report_lib.Settings(
      test=config.test,
      alpha=_probability(config.alpha, "alpha"),
      power=_probability(config.power, "power"),
      reps=checks.check_int(config.bootstrap_reps, "bootstrap_reps", 10),
      seed=checks.check_int(config.seed, "seed", 0),
      num_points=checks.check_int(config.num_points, "num_points", 2),
      confidence=_probability(config.confidence, "confidence"),
      task_bootstrap=checks.check_bool(config.task_bootstrap, "task_bootstrap"),
      min_effect=min_effect,
      holm_across_envs=checks.check_bool(
          config.holm_across_envs, "holm_across_envs"
      ),
  )
  references = parse_references(config.references)
  output_dir = run_folders.output_dir(config.output_dir, "compare")
  run_dirs = [Path(p).expanduser() for p in config.run_dirs]
  cells, tuning = [], None
  if not run_dirs:
    if not config.rules or not config.envs:
      raise UsageError(
          "config.rules and config.envs must not be empty (or "
          "give config.run_dirs to aggregate)."
      )
    num_seeds = checks.check_int(config.num_seeds, "num_seeds", 1)
    seed = checks.check_int(config.seed, "seed", 0)
    tuning = _tuning(config, range(seed, seed + num_seeds))
    num_labels = len(config.rules) + (
        len(tuning.rules) if tuning and tuning.keep_untuned else 0
    )
    _check_seeds(num_seeds, num_labels, settings)
    cells = _cells(config, output_dir, tuning)
  plan = Plan(
      config=config,
      cells=cells,
      run_dirs=run_dirs,
      settings=settings,
      references=references,
      output_dir=output_dir,
      shard=_shard(config.shard),
      tuning=tuning,
  )
  if not run_dirs:
    to_check = []
    for cell in cells:
      to_check += [c for _, c in tuning_cells(plan, cell)] if cell.tuned else []
      to_check.append(cell)
    for cell in to_check:  # every run's settings, checked before training
      try:
        normalization.normalize(
            0.0, normalization.env_key(cell.env, cell.env_settings), references
        )
      except ValueError as e:
        raise UsageError(
            f"{errors.one_line(e)} (or pass it as config.references: "
            "'env:random=R,reference=X,source=TEXT')"
        ) from None
      cell.build(config)
  return plan


# ------------------------------------------------------------- running ----


def _status(plan: Plan, cell: Cell) -> tuple[bool, str | None]:
  """``Cell.status`` of ``cell`` as it runs: a tuned cell is finished when
  its tuning runs are and its run has the settings they chose."""
  if not cell.tuned:
    return cell.status(plan.config)
  for _, tuning_cell in tuning_cells(plan, cell):
    if not tuning_cell.status(plan.config)[0]:
      return False, None
  return _apply_point(cell, choose(plan, cell)["point"]).status(plan.config)


def run(
    plan: Plan, log: Callable[[str], None] = print, progress: bool = True
) -> list[Path]:
  """Runs this process's runs that have not finished with the settings of
  the comparison (a damaged or stale run folder runs again, saying so);
  returns every run folder."""
  cells = plan.my_cells()
  status = [_status(plan, c) for c in cells]
  todo = [
      c for c, (finished, _) in zip(cells, status, strict=True) if not finished
  ]
  log(
      f"{len(plan.cells)} runs ({len(plan.config.rules)} rules x "
      f"{len(plan.config.envs)} environments, {plan.config.num_seeds} seeds "
      f"each); this process: {len(cells)}, of which "
      f"{len(cells) - len(todo)} finished already; writing to "
      f"{plan.output_dir}"
  )
  for cell, (_, why) in zip(cells, status, strict=True):
    if why is not None:
      log(f"Running {cell.output_dir} again: {why}.")
  for i, cell in enumerate(todo):
    stopping.check_stop(f"before run {i + 1} of {len(todo)}")
    if cell.tuned:
      points = tuning_cells(plan, cell)
      for j, (point, tuning_cell) in enumerate(points):
        finished, why = tuning_cell.status(plan.config)
        if finished:
          continue
        if why is not None:
          log(f"Running {tuning_cell.output_dir} again: {why}.")
        log(
            f"[{i + 1}/{len(todo)}] tuning {cell.rule} on {cell.env} "
            f"{cell.env_settings}: point {j + 1}/{len(points)} {point}, "
            f"seeds {list(plan.tuning.seeds)}"
        )
        _train(plan, tuning_cell, progress)
      choice = choose(plan, cell)
      log(
          f"Tuned {cell.rule} on {cell.env_key}: {choice['point']} (mean "
          f"normalised score {run_folders.fmt(choice['score'])} on the tuning "
          "seeds)"
      )
      cell = _apply_point(cell, choice["point"])
      if cell.status(plan.config)[0]:
        continue
    log(
        f"[{i + 1}/{len(todo)}] {cell.label} on {cell.env} "
        f"{cell.env_settings}"
    )
    _train(plan, cell, progress)
  return [c.output_dir for c in plan.cells]


def _train(plan: Plan, cell: Cell, progress: bool) -> None:
  """Trains ``cell`` into its folder (emptied first), holding its lock."""
  eval_plan = cell.build(plan.config)
  lock = evaluate.open_output(eval_plan, PROGRAM)
  try:
    evaluate.write(
        eval_plan,
        evaluate.run(eval_plan, lambda _: None, progress),
        lambda _: None,
    )
  finally:
    lock.release()


def choose(plan: Plan, cell: Cell) -> dict[str, Any]:
  """The grid point of a tuned ``cell`` (its tuning runs finished): the
  best mean normalised final return over the tuning seeds (a point whose
  seeds all diverged scores -inf; the first point wins ties).

  Returns:
    ``dict(rule, env, point, score, points)``; ``points`` lists every
    point's ``dict(point, score, mean_return, per_seed)``.
  """
  points = []
  for point, tuning_cell in tuning_cells(plan, cell):
    try:
      raw = results_lib.load_run(tuning_cell.output_dir).final_scores()
      norm = normalization.normalize(raw, cell.env_key, plan.references)
    except ValueError as e:
      raise UsageError(errors.one_line(e)) from None
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


def _write_tuning(
    plan: Plan, choices: list[dict[str, Any]], stats: dict[str, Any]
) -> None:
  """``tuning.csv``, the ``tuning`` entry of ``statistics.json`` and the
  tuning section of ``report.md``."""
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
  entry = dict(
      rules=list(plan.tuning.rules),
      grid={k: list(v) for k, v in plan.tuning.grid.items()},
      seeds=list(plan.tuning.seeds),
      total_env_steps=plan.tuning.total_env_steps,
      keep_untuned=plan.tuning.keep_untuned,
      choices=choices,
  )
  stats["tuning"] = entry
  path = plan.output_dir / "statistics.json"
  saved = json.loads(path.read_text())
  saved["tuning"] = run_folders.to_jsonable(entry)
  files.write_text(path, report_lib.json_text(saved))
  lines = [
      "",
      "## Tuned baselines",
      "",
      f"Each of {', '.join(plan.tuning.rules)} was tuned per environment: "
      f"every point of the grid trained seeds {list(plan.tuning.seeds)} "
      f"(kept apart from the reported seeds) for "
      f"{plan.tuning.total_env_steps} environment steps; the point with the "
      "best mean normalised final return trained the reported seeds, "
      f"reported as `<rule>{TUNED_SUFFIX}`. Every point's score: "
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
  report = plan.output_dir / "report.md"
  files.write_text(report, report.read_text() + "\n".join(lines) + "\n")


def _summary_complete(folder: Path) -> bool:
  """Whether ``folder`` holds a ``summary.json`` that reads back whole."""
  try:
    return isinstance(
        json.loads((folder / results_lib.SUMMARY).read_text()), dict
    )
  except (OSError, ValueError):
    return False


def write(
    plan: Plan,
    run_dirs: Sequence[Path],
    log: Callable[[str], None] = print,
    wait_for_shards: bool = False,
) -> dict[str, Any] | None:
  """The statistics of the runs in ``run_dirs``. With ``wait_for_shards``,
  runs that other processes have not finished yet are not an error: nothing
  is written (None)."""
  missing = [d for d in run_dirs if not _summary_complete(d)]
  if missing and wait_for_shards:
    log(
        f"{len(missing)} run(s) not finished yet (e.g. {missing[0]}): the "
        "report is written once every shard is done (run again without "
        "shard, or with config.run_dirs)."
    )
    return None
  try:
    results = results_lib.Results.from_runs(
        [results_lib.load_run(d) for d in run_dirs]
    )
    run_folders.make_dir(plan.output_dir)
    stats = report_lib.write_report(
        results,
        plan.output_dir,
        plan.settings,
        plan.references,
        title=f"Comparison of {', '.join(results.rules)}",
    )
  except ValueError as e:
    raise UsageError(errors.one_line(e)) from None
  if plan.tuning is not None and plan.cells:
    choices = [choose(plan, c) for c in plan.cells if c.tuned]
    _write_tuning(plan, choices, stats)
    for choice in choices:
      log(
          f"{choice['label']} on {choice['env']}: {choice['point']} "
          f"(tuning score {run_folders.fmt(choice['score'])}; {TUNING_CSV})"
      )
  log(
      f"Report: {plan.output_dir / 'report.md'}; results.csv, "
      f"statistics.json and {len(stats['figures'])} figures beside it."
  )
  for rule, agg in stats["aggregates"].items():
    log(f"{rule}: IQM normalised score {aggregates.Interval(**agg['iqm'])}")
  return stats


def compare(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any] | None:
  """Builds, runs and reports a comparison; returns the statistics.

  The process holds the lock of ``output_dir`` throughout (a sharded
  process: the lock of its shard, then the folder's while it writes the
  report, which a shard whose report another writes leaves to it), and the
  lock of each run folder while it trains it.
  """
  plan = build(config)
  index, count = plan.shard
  hint = "run the same command again: finished runs are kept."
  if count == 1:
    with run_folders.claim_output_dir(plan.output_dir, PROGRAM):
      with errors.resource_errors(hint):
        if plan.run_dirs:
          return write(plan, plan.run_dirs, log)
        return write(plan, run(plan, log, progress), log)
  shard_lock = f"{files.LOCK_FILE}-shard-{index}-of-{count}"
  with run_folders.claim_output_dir(plan.output_dir, PROGRAM, shard_lock):
    with errors.resource_errors(hint):
      run_dirs = run(plan, log, progress)
      if not all(_summary_complete(d) for d in run_dirs):
        return write(plan, run_dirs, log, wait_for_shards=True)
      try:
        report_lock = run_folders.claim_output_dir(plan.output_dir, PROGRAM)
      except UsageError as e:
        log(f"Not writing the report: {errors.one_line(e)}")
        return None
      with report_lock:
        return write(plan, run_dirs, log, wait_for_shards=True)


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` an entry per
  registered rule of ``config.rules`` (as the command line names them) with
  that rule's settings and defaults (``rule_settings.completed``), so that
  ``--config.hyper_params.<rule>.<key>=VALUE`` and
  ``--config.rule_kwargs.<rule>.<key>=VALUE`` may set any of them and no
  other (an unknown key: one line naming the valid ones)."""
  rules = config.rules
  text = common.override_value(argv, "rules")
  if text is not None:
    try:
      rules = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      return  # the flag parser reports it
    rules = (rules,) if isinstance(rules, str) else rules
  with config.unlocked():
    for key in rule_settings.KEYS:
      given = checks.as_dict(config.get(key) or {}, key)
      entries = {}
      for rule in rules or ():
        if not isinstance(rule, str) or not rule.isidentifier():
          continue  # files: set their settings in a config file
        try:
          entries[rule] = rule_settings.completed(rule, given.get(rule), key)
        except ValueError:  # an unknown rule: build() reports it
          continue
      config[key] = entries


def main() -> None:
  """Console entry point (``disco-compare``)."""
  common.run_launcher(
      PROGRAM, __doc__, CONFIG_NAME, compare, prepare=prepare_config
  )


if __name__ == "__main__":
  main()
