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
Bad input ends the program with one line on stderr and exit status 2 before
anything is trained.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
import dataclasses
from pathlib import Path
import re
from typing import Any

from ml_collections import config_dict

from disco.comparison import aggregates
from disco.comparison import normalization
from disco.comparison import report as report_lib
from disco.comparison import results as results_lib
from disco.comparison import significance
from disco.environments import registry as env_registry
from disco.launch import common
from disco.launch import evaluate

UsageError = common.UsageError

PROGRAM = "disco-compare"
CONFIG_NAME = "compare"
RUNS_DIR = "runs"


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/compare.py``."""
  return common.load_config(CONFIG_NAME)


# The disco-eval settings every run of a comparison shares.
SHARED_KEYS = ("weights", "imports", "num_seeds", "seed", "total_env_steps")
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
  """

  rule: str
  env: str
  env_settings: dict[str, Any]
  overrides: dict[str, Any]
  output_dir: Path

  def done(self) -> bool:
    return (self.output_dir / results_lib.SUMMARY).is_file()

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
      for key, value in values.items():
        eval_config[key] = value
    return eval_config


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

  def my_cells(self) -> list[Cell]:
    index, count = self.shard
    return self.cells[index::count]


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
  return Path(rule).stem if rule.endswith(".npz") else rule


def _cells(config, output_dir: Path) -> list[Cell]:
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
  cells = []
  for rule in config.rules:
    for spec in config.envs:
      env, settings = parse_spec(spec, "environment")
      try:
        entry = env_registry.get_entry(env)
        env_registry.make_env(env, 1, **settings)  # checks the settings
      except (ValueError, TypeError) as e:
        raise UsageError(
            f"config.envs {spec!r}: {common.one_line(e)}"
        ) from None
      full = {**entry.settings, **settings}
      key = normalization.env_key(env, full)
      cell = Cell(
          rule=rule,
          env=env,
          env_settings=full,
          overrides=overrides.get(rule, {}),
          output_dir=output_dir
          / RUNS_DIR
          / _label(rule)
          / report_lib.file_name(key),
      )
      twin = next((c for c in cells if c.output_dir == cell.output_dir), None)
      if twin is not None:
        raise UsageError(
            f"config.rules and config.envs give the run {rule} on {key} "
            "twice: list every rule and environment once."
        )
      cells.append(cell)
  return cells


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
  value = common.check_number(value, name)
  if not 0.0 < value < 1.0:
    raise UsageError(f"config.{name} must be in (0, 1), got {value!r}.")
  return value


def build(config: config_dict.ConfigDict) -> Plan:
  """Checks ``config`` (and every run's disco-eval config) before anything
  is trained.

  Raises:
    UsageError: for any bad setting, with a one-line explanation.
  """
  common.check_config_keys(config, default_config(), CONFIG_NAME)
  common.import_modules(config.imports)
  if config.test not in significance.TESTS:
    raise UsageError(
        f"Unknown config.test {config.test!r}; use one of "
        f"{', '.join(significance.TESTS)}."
    )
  min_effect = config.min_effect
  if min_effect is not None:
    min_effect = common.check_number(min_effect, "min_effect", positive=True)
  settings = report_lib.Settings(
      test=config.test,
      alpha=_probability(config.alpha, "alpha"),
      power=_probability(config.power, "power"),
      reps=common.check_int(config.bootstrap_reps, "bootstrap_reps", 10),
      seed=common.check_int(config.seed, "seed", 0),
      num_points=common.check_int(config.num_points, "num_points", 2),
      confidence=_probability(config.confidence, "confidence"),
      task_bootstrap=common.check_bool(config.task_bootstrap, "task_bootstrap"),
      min_effect=min_effect,
      holm_across_envs=common.check_bool(
          config.holm_across_envs, "holm_across_envs"
      ),
  )
  references = parse_references(config.references)
  output_dir = common.output_dir(config.output_dir, "compare")
  run_dirs = [Path(p).expanduser() for p in config.run_dirs]
  cells = []
  if not run_dirs:
    if not config.rules or not config.envs:
      raise UsageError(
          "config.rules and config.envs must not be empty (or "
          "give config.run_dirs to aggregate)."
      )
    num_seeds = common.check_int(config.num_seeds, "num_seeds", 1)
    _check_seeds(num_seeds, len(config.rules), settings)
    cells = _cells(config, output_dir)
    for cell in cells:  # every run's settings, checked before training
      try:
        normalization.normalize(
            0.0, normalization.env_key(cell.env, cell.env_settings), references
        )
      except ValueError as e:
        raise UsageError(
            f"{common.one_line(e)} (or pass it as config.references: "
            "'env:random=R,reference=X,source=TEXT')"
        ) from None
      evaluate.build(cell.eval_config(config), log=lambda _: None)
  return Plan(
      config=config,
      cells=cells,
      run_dirs=run_dirs,
      settings=settings,
      references=references,
      output_dir=output_dir,
      shard=_shard(config.shard),
  )


# ------------------------------------------------------------- running ----


def run(
    plan: Plan, log: Callable[[str], None] = print, progress: bool = True
) -> list[Path]:
  """Runs this process's unfinished runs; returns every run folder."""
  todo = [c for c in plan.my_cells() if not c.done()]
  done = len(plan.my_cells()) - len(todo)
  log(
      f"{len(plan.cells)} runs ({len(plan.config.rules)} rules x "
      f"{len(plan.config.envs)} environments, {plan.config.num_seeds} seeds "
      f"each); this process: {len(plan.my_cells())}, of which {done} "
      f"finished already; writing to {plan.output_dir}"
  )
  for i, cell in enumerate(todo):
    log(
        f"[{i + 1}/{len(todo)}] {cell.rule} on {cell.env} "
        f"{cell.env_settings}"
    )
    eval_plan = evaluate.build(
        cell.eval_config(plan.config), log=lambda _: None
    )
    evaluate.write_config(eval_plan)
    evaluate.write(
        eval_plan,
        evaluate.run(eval_plan, lambda _: None, progress),
        lambda _: None,
    )
  return [c.output_dir for c in plan.cells]


def write(
    plan: Plan,
    run_dirs: Sequence[Path],
    log: Callable[[str], None] = print,
    wait_for_shards: bool = False,
) -> dict[str, Any] | None:
  """The statistics of the runs in ``run_dirs``. With ``wait_for_shards``,
  runs that other processes have not finished yet are not an error: nothing
  is written (None)."""
  missing = [d for d in run_dirs if not (d / results_lib.SUMMARY).is_file()]
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
    common.make_dir(plan.output_dir)
    stats = report_lib.write_report(
        results,
        plan.output_dir,
        plan.settings,
        plan.references,
        title=f"Comparison of {', '.join(results.rules)}",
    )
  except ValueError as e:
    raise UsageError(common.one_line(e)) from None
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
  """Builds, runs and reports a comparison; returns the statistics."""
  plan = build(config)
  if plan.run_dirs:
    return write(plan, plan.run_dirs, log)
  common.make_dir(plan.output_dir)
  return write(
      plan, run(plan, log, progress), log, wait_for_shards=plan.shard[1] > 1
  )


def main() -> None:
  """Console entry point (``disco-compare``)."""
  common.run_launcher(PROGRAM, __doc__, CONFIG_NAME, compare)


if __name__ == "__main__":
  main()
