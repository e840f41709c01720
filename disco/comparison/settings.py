"""The settings of a comparison, checked once where they enter.

``CompareSettings.from_config`` turns a ``disco-compare`` config
(``configs/compare.py``) into frozen settings, reporting every bad value
together in one ``UsageError``; what needs the registries (rules'
hyper-parameters, environments' settings) is checked by ``runner.build``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import itertools
import math
from pathlib import Path
import re
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import errors
from disco import evaluation
from disco import specs
from disco.comparison import report as report_lib
from disco.comparison import two_sample
from disco.environments import reference_scores
from disco.environments import reference_sets
from disco.environments import registry as env_registry
from disco.evaluation import settings as eval_settings
from disco.scoring import normalization
from disco.update_rules import overrides as overrides_lib

PROGRAM = "disco-compare"
CONFIG_NAME = "compare"
# The disco-eval settings every run of a comparison shares.
SHARED_KEYS = (
    "weights",
    "imports",
    "preset",
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
    "anneal_learning_rate",
    "loss_mask",
    "update_epochs",
    "num_minibatches",
    *eval_settings.NORMALIZE_KEYS,
    eval_settings.NORMALIZE_DISCOUNT_KEY,
    eval_settings.REWARD_CLIP_KEY,
)
# What a tuning grid may vary besides the rule's hyper-parameters.
TUNABLE_SETTINGS = ("learning_rate",)


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/compare.py``."""
  return checks.load_config(CONFIG_NAME)


@dataclasses.dataclass(frozen=True)
class Tuning:
  """Baseline tuning: each of ``rules`` trains every point of ``grid``
  (``{setting: values}``: ``learning_rate`` or hyper-parameters) on each
  environment with ``seeds`` (disjoint from the reported ones) and
  ``total_env_steps`` each; the best mean normalised final return (first on
  ties) sets the reported run's settings. ``keep_untuned`` reports each tuned
  rule's own settings too; ``vmap`` trains a grid as one vmapped program where
  it can (``disco.comparison.vmapped_grid``)."""

  rules: tuple[str, ...]
  grid: dict[str, tuple[float, ...]]
  seeds: tuple[int, ...]
  total_env_steps: int
  keep_untuned: bool
  vmap: bool = True

  def points(self) -> list[dict[str, float]]:
    """Every combination of the grid's values, in order."""
    keys = list(self.grid)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(self.grid[k] for k in keys))
    ]


@dataclasses.dataclass(frozen=True)
class EnvSpec:
  """An environment of ``config.envs``: ``"name:key=value,..."``."""

  spec: str
  name: str
  settings: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class CompareSettings:
  """The checked settings of a comparison: the keys of ``configs/compare.py``
  (explained there), with ``rules`` and ``envs`` (``EnvSpec``) in order and
  ``seed .. seed + num_seeds - 1`` the reported seeds; ``shared``: the
  ``disco-eval`` settings of every run (``SHARED_KEYS``, ``EVAL_KEYS``), as
  given; ``rule_overrides``, ``hyper_params``, ``rule_kwargs``: per rule;
  ``network`` and ``policy``: every rule's, without None values; ``tuning``:
  None for none; ``statistics``: ``ReportSettings``; ``shard``: ``(i, n)``,
  every n-th run from the i-th."""

  rules: tuple[str, ...]
  envs: tuple[EnvSpec, ...]
  num_seeds: int
  seed: int
  shared: dict[str, Any]
  rule_overrides: dict[str, dict[str, Any]]
  hyper_params: dict[str, dict[str, Any]]
  rule_kwargs: dict[str, dict[str, Any]]
  network: dict[str, Any]
  policy: dict[str, Any]
  tuning: Tuning | None
  statistics: report_lib.ReportSettings
  references: dict[str, reference_scores.ReferenceEntry]
  run_dirs: tuple[Path, ...]
  shard: tuple[int, int]
  output_dir: str
  imports: str
  compilation_cache: str

  @classmethod
  def from_config(cls, config: config_dict.ConfigDict) -> CompareSettings:
    """Checks every value of a ``disco-compare`` config at once (with
    ``run_dirs``, only those the aggregation reads).

    Raises:
      UsageError: one line naming every bad setting.
    """
    problems = checks.Problems()
    defaults = default_config()
    problems.get(checks.check_config_keys, config, defaults, CONFIG_NAME)
    # A key the config lacks is reported; its default stands in meanwhile.
    config = config_dict.ConfigDict(
        {**defaults.to_dict(), **_values(config, defaults)}
    )
    statistics = _statistics(config, problems)
    settings = cls(
        rules=tuple(config.rules or ()),
        envs=(),
        num_seeds=0,
        seed=0,
        shared={k: config[k] for k in (*SHARED_KEYS, *EVAL_KEYS)},
        rule_overrides={},
        hyper_params={},
        rule_kwargs={},
        network={},
        policy={
            k: v
            for k, v in problems.get(
                checks.check_policy, config.policy, default={}
            ).items()
            if v is not None
        },
        tuning=None,
        statistics=statistics,
        references=problems.get(_references, config, default={}),
        run_dirs=tuple(Path(p).expanduser() for p in config.run_dirs),
        shard=problems.get(parse_shard, config.shard, default=(0, 1)),
        output_dir=config.output_dir,
        imports=config.imports,
        compilation_cache=config.compilation_cache,
    )
    if not settings.run_dirs:
      settings = _with_runs(settings, config, problems)
    problems.raise_if_any()
    return settings


def _values(config: Any, defaults: config_dict.ConfigDict) -> dict:
  if isinstance(config, config_dict.ConfigDict):
    config = config.to_dict()
  if not isinstance(config, Mapping):
    raise errors.UsageError(
        "The settings must be a disco-compare config (a ConfigDict or a "
        f"dict), got {type(config).__name__}."
    )
  return {k: v for k, v in config.items() if k in defaults}


def _statistics(
    config: config_dict.ConfigDict, problems: checks.Problems
) -> report_lib.ReportSettings:
  defaults = report_lib.ReportSettings()
  if config.test not in two_sample.TESTS:
    problems.messages.append(
        f"Unknown config.test {config.test!r}; use one of "
        f"{', '.join(two_sample.TESTS)}."
    )
  min_effect = config.min_effect
  if min_effect is not None:
    min_effect = problems.get(
        checks.check_number, min_effect, "min_effect", True
    )

  def get(check, key: str, *args: Any) -> Any:
    return problems.get(
        check, config[key], key, *args, default=getattr(defaults, key, None)
    )

  return report_lib.ReportSettings(
      test=config.test if config.test in two_sample.TESTS else defaults.test,
      alpha=get(_probability, "alpha"),
      power=get(_probability, "power"),
      reps=problems.get(
          checks.check_int,
          config.bootstrap_reps,
          "bootstrap_reps",
          10,
          default=defaults.reps,
      ),
      seed=problems.get(
          checks.check_seed, config.seed, "seed", default=defaults.seed
      ),
      num_points=get(checks.check_int, "num_points", 2),
      confidence=get(_probability, "confidence"),
      task_bootstrap=get(checks.check_bool, "task_bootstrap"),
      min_effect=min_effect,
      holm_across_envs=get(checks.check_bool, "holm_across_envs"),
  )


def _probability(value: Any, name: str) -> float:
  value = checks.check_number(value, name)
  if not 0.0 < value < 1.0:
    raise errors.UsageError(f"config.{name} must be in (0, 1), got {value!r}.")
  return value


def _with_runs(
    settings: CompareSettings,
    config: config_dict.ConfigDict,
    problems: checks.Problems,
) -> CompareSettings:
  """``settings`` with the grid of runs, every run's ``disco-eval`` settings
  checked."""
  if not config.rules or not config.envs:
    problems.messages.append(
        "config.rules and config.envs must not be empty (or "
        "give config.run_dirs to aggregate)."
    )
    return settings
  num_seeds = problems.get(checks.check_int, config.num_seeds, "num_seeds", 1)
  seed = problems.get(
      checks.check_seed, config.seed, "seed", num_seeds or 1, default=0
  )
  tuning = problems.get(_tuning, config, range(seed, seed + (num_seeds or 1)))
  num_labels = len(config.rules) + (
      len(tuning.rules) if tuning and tuning.keep_untuned else 0
  )
  if num_seeds is not None:
    problems.get(_check_seeds, num_seeds, num_labels, settings.statistics)
  settings = dataclasses.replace(
      settings,
      envs=tuple(
          e
          for e in (problems.get(_env_spec, spec) for spec in config.envs or ())
          if e is not None
      ),
      num_seeds=num_seeds or 1,
      seed=seed,
      rule_overrides=problems.get(_rule_overrides, config, default={}),
      hyper_params=problems.get(_per_rule, config, "hyper_params", default={}),
      rule_kwargs=problems.get(_per_rule, config, "rule_kwargs", default={}),
      network={
          k: v
          for k, v in problems.get(
              checks.as_dict, config.network, "network", default={}
          ).items()
          if v is not None
      },
      tuning=tuning,
  )
  _check_runs(settings, problems)
  return settings


def _check_seeds(
    num_seeds: int, num_rules: int, statistics: report_lib.ReportSettings
) -> None:
  """``report.check``'s seed check, before anything trains."""
  needed, what = report_lib.required_seeds(statistics, num_rules)
  if num_seeds < needed:
    raise errors.UsageError(
        f"config.num_seeds={num_seeds} is too few for {what}: use at least "
        f"{needed}."
    )


def _check_runs(settings: CompareSettings, problems: checks.Problems) -> None:
  """Checks every rule's runs' (and tuning points') ``disco-eval`` settings,
  each problem once."""
  env = settings.envs[0] if settings.envs else EnvSpec("catch", "catch", {})
  tuning = settings.tuning
  for rule in settings.rules:
    points = [{}]
    if tuning is not None and rule in tuning.rules:
      points += tuning.points()
    for point in points:
      overrides, hyper = apply_point(
          settings.rule_overrides.get(rule, {}),
          settings.hyper_params.get(rule, {}),
          point,
      )
      found = checks.Problems()
      with found.check():
        eval_settings.EvalSettings.collect(
            eval_config(
                settings,
                rule=rule,
                env=env.name,
                env_settings=env.settings,
                output_dir="",
                overrides=overrides,
                hyper_params=hyper,
                rule_kwargs=settings.rule_kwargs.get(rule, {}),
            ),
            found,
        )
      problems.messages += [
          m for m in found.messages if m not in problems.messages
      ]


def apply_point(
    overrides: dict[str, Any],
    hyper_params: dict[str, Any],
    point: dict[str, float],
) -> tuple[dict[str, Any], dict[str, Any]]:
  """``(overrides, hyper_params)`` with a tuning grid point's settings
  (``TUNABLE_SETTINGS`` go to the ``disco-eval`` overrides, the rest to
  hyper-parameters)."""
  overrides, hyper_params = dict(overrides), dict(hyper_params)
  for key, value in point.items():
    if key in TUNABLE_SETTINGS:
      overrides[key] = value
    else:
      hyper_params[key] = value
  return overrides, hyper_params


def eval_config(
    settings: CompareSettings,
    *,
    rule: str,
    env: str,
    env_settings: Mapping[str, Any],
    output_dir: Path | str,
    overrides: Mapping[str, Any],
    hyper_params: Mapping[str, Any],
    rule_kwargs: Mapping[str, Any],
) -> config_dict.ConfigDict:
  """The ``disco-eval`` config of one run of the comparison.

  Raises:
    UsageError: an override of the wrong type.
  """
  config = evaluation.default_config()
  values = dict(settings.shared)
  values.update(rule=rule, env=env, output_dir=str(output_dir), overwrite=True)
  values.update(overrides)
  try:
    with config.unlocked():
      config.env_settings = dict(env_settings)
      config.hyper_params = dict(hyper_params)
      config.rule_kwargs = dict(rule_kwargs)
      for key, value in values.items():
        config[key] = value
      for key, value in settings.network.items():
        config.network[key] = value
      if settings.policy and _is_continuous(env, env_settings):
        for key, value in settings.policy.items():
          config.policy[key] = value
  except (TypeError, ValueError) as e:
    raise errors.UsageError(
        f"The disco-eval settings of rule {rule!r}: {errors.one_line(e)}"
    ) from None
  return config


# (environment, repr of its sorted settings) -> whether its actions are
# continuous: each environment is built once (a Brax body loads a model).
_CONTINUOUS: dict[tuple[str, str], bool] = {}


def _is_continuous(env: str, env_settings: Mapping[str, Any]) -> bool:
  """Whether ``env`` (with its settings) has continuous actions (False where it
  cannot be built)."""
  key = (env, repr(sorted(env_settings.items())))
  if key not in _CONTINUOUS:
    try:
      built = env_registry.make_env(env, 1, **env_settings)
      _CONTINUOUS[key] = built.is_continuous
    except (TypeError, ValueError, ImportError):
      _CONTINUOUS[key] = False
  return _CONTINUOUS[key]


# ------------------------------------------------------------- parsing ----


def _env_spec(spec: str) -> EnvSpec:
  name, settings = specs.parse_spec(spec, "environment")
  return EnvSpec(spec=spec, name=name, settings=settings)


def parse_shard(text: str) -> tuple[int, int]:
  """``config.shard`` (``"i/n"``; '': one process) as ``(i, n)``."""
  if not text:
    return 0, 1
  m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
  if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
    raise errors.UsageError(
        f"config.shard={text!r}: write 'i/n' with 0 <= i < n."
    )
  return int(m.group(1)), int(m.group(2))


def parse_grid(text: str) -> dict[str, tuple[float, ...]]:
  """``"key=(v1,v2),key2=v"`` -> ``{key: (v1, v2), key2: (v,)}``."""
  _, values = specs.parse_spec(f"grid:{text}", "tune.grid")
  grid = {}
  for key, value in values.items():
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not items:
      raise errors.UsageError(
          f"config.tune.grid: {key} has no values; give at least one, e.g. "
          f"{key}=(0.01,0.1)."
      )
    try:
      numbers = tuple(float(v) for v in items)
    except (TypeError, ValueError):
      raise errors.UsageError(
          f"config.tune.grid: {key}={value!r} must be numbers, e.g. "
          f"{key}=(0.01,0.1)."
      ) from None
    if not all(math.isfinite(v) for v in numbers):
      raise errors.UsageError(
          f"config.tune.grid: {key}={value!r} must be finite."
      )
    grid[key] = numbers
  return grid


def _tuning(config: config_dict.ConfigDict, seeds: range) -> Tuning | None:
  """Checks ``config.tune``; None when nothing is tuned.

  Raises:
    UsageError: a rule not compared, an empty grid or value list, or tuning
      seeds overlapping the reported ones.
  """
  tune = config.tune
  rules = tuple(tune.rules or ())
  if not rules:
    if tune.grid:
      raise errors.UsageError(
          "config.tune.grid is given but config.tune.rules is empty: name "
          "the rules to tune, e.g. --config.tune.rules=\"('actor_critic',)\"."
      )
    return None
  for rule in rules:
    if rule not in config.rules:
      raise errors.UsageError(
          f"config.tune.rules: {rule!r} is not one of config.rules "
          f"{list(config.rules)}."
      )
  if not str(tune.grid).strip():
    raise errors.UsageError(
        "config.tune.grid is empty: give the settings to try, e.g. "
        "--config.tune.grid='learning_rate=(3e-4,1e-3),entropy_cost="
        "(0.01,0.2)'."
    )
  grid = parse_grid(tune.grid)
  num_seeds = checks.check_int(tune.num_seeds, "tune.num_seeds", 1)
  first = checks.check_int(tune.seed, "tune.seed", 0)
  tune_seeds = range(first, first + num_seeds)
  overlap = sorted(set(tune_seeds) & set(seeds))
  if overlap:
    raise errors.UsageError(
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
      vmap=checks.check_bool(tune.vmap, "tune.vmap"),
  )


def _rule_overrides(config: config_dict.ConfigDict) -> dict[str, dict]:
  """``config.rule_overrides`` as ``{rule: {setting: value}}``."""
  overrides = {}
  for spec in config.rule_overrides:
    rule, values = specs.parse_spec(spec, "rule override")
    unknown = sorted(set(values) - set(OVERRIDE_KEYS))
    if unknown:
      raise errors.UsageError(
          f"config.rule_overrides {spec!r}: unknown setting(s) {unknown}; "
          f"valid: {', '.join(OVERRIDE_KEYS)}."
      )
    if rule not in config.rules:
      raise errors.UsageError(
          f"config.rule_overrides {spec!r}: {rule!r} is not "
          f"one of config.rules {list(config.rules)}."
      )
    overrides[rule] = values
  return overrides


def _references(config) -> dict[str, reference_scores.ReferenceEntry]:
  """The named ``reference_set``'s entries with ``references`` over them."""
  try:
    named = reference_sets.reference_set(config.reference_set)
  except ValueError as e:
    raise errors.UsageError(f"config.reference_set: {e}") from None
  return {**named, **normalization.parse_references(config.references)}


def _per_rule(config, key: str) -> dict[str, dict[str, Any]]:
  """``config.<key>`` as ``{rule: {setting: value}}``; UsageError for a rule not
  in ``config.rules``."""
  given = checks.as_dict(config.get(key) or {}, key)
  out = {}
  for rule, values in given.items():
    if rule not in config.rules:
      raise errors.UsageError(
          f"config.{key}.{rule}: {rule!r} is not one of config.rules "
          f"{list(config.rules)}."
      )
    values = checks.as_dict(values or {}, f"{key}.{rule}")
    # Unset hyper-parameters are placeholders (``prepare``): not given.
    out[rule] = {k: v for k, v in values.items() if v is not None}
  return out


# ----------------------------------------------------------- overrides ----


def prepare(
    config: config_dict.ConfigDict, rules: Sequence[str] | None = None
) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` an entry per
  registered rule of ``rules`` (default: ``config.rules``) with its settings, so
  overrides may set those and no other: the ``rule_kwargs`` with their defaults
  (``overrides_lib.completed``), the hyper-parameters not given as None (each
  run's are its preset's or the rule's); rule files and unknown names get
  none."""
  rules = config.rules if rules is None else rules
  with config.unlocked():
    for key in overrides_lib.KEYS:
      given = checks.as_dict(config.get(key) or {}, key)
      entries = {}
      for rule in rules or ():
        if not isinstance(rule, str) or not rule.isidentifier():
          continue  # files: set their settings in a config file
        try:
          entries[rule] = overrides_lib.completed(rule, given.get(rule), key)
          if key == "hyper_params":
            entries[rule] = {
                k: v
                if k in (given.get(rule) or {})
                else config_dict.placeholder(float)
                for k, v in entries[rule].items()
            }
        except ValueError:  # an unknown rule: build() reports it
          continue
      config[key] = entries


def make_config(
    config: config_dict.ConfigDict | None = None, **overrides: Any
) -> config_dict.ConfigDict:
  """A copy of ``config`` (default: ``configs/compare.py``'s) prepared for its
  rules, with ``overrides`` set as ``--config.KEY=VALUE`` flags would, e.g.
  ``make_config(rules=("ppo", "actor_critic"), hyper_params={"ppo":
  {"clip_epsilon": 0.1}})``.

  Raises:
    UsageError: an unknown key or a value of the wrong type.
  """
  config = checks.config_or_default(config, CONFIG_NAME)
  rules = overrides.get("rules")
  if isinstance(rules, str):
    rules = (rules,)
  prepare(config, rules)
  eval_settings.override(config, overrides)
  return config
