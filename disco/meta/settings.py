"""The settings of a meta-training run, checked once.

``MetaTrainSettings.from_config(config)`` turns a ``configs/meta_train.py``
config into settings in one pass, reporting every bad value together in one
``UsageError``, without side effects (process start-up comes first, in
``disco.meta.plan.build``, which also checks what needs the machine).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
from ml_collections import config_dict
import numpy as np
import optax

from disco import checks
from disco import distributed
from disco import errors
from disco import run_folders
from disco.environments import registry as env_registry
from disco.meta import estimator_registry
from disco.meta import keys as keys_lib
from disco.meta import level_sampler_registry
from disco.meta import level_samplers
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import meta_step
from disco.meta import validation_settings
from disco.meta import value_function
from disco.networks import agent_nets
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import overrides
from disco.update_rules import registry as rule_registry

PROGRAM = "disco-meta-train"
CONFIG_NAME = "meta_train"
RANDOM, DISCO103 = "random", "disco103"
DISCO = "disco"  # the rule Disco103's meta-parameters belong to
META_OPTIMIZERS = ("adam", "sgd", "rmsprop")
AGENT_KEYS = (
    "network",
    "learning_rate",
    "max_abs_update",
    "loss_mask",
    "anneal_learning_rate",
)
GROUP_KEYS = ("env", "env_settings", "num_agents", "weight")


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/meta_train.py``."""
  return checks.load_config(CONFIG_NAME)


@dataclasses.dataclass(frozen=True)
class GroupSpec:
  """One group of the population as configured (``config.population[i]``)."""

  env: str
  env_settings: dict[str, Any]
  num_agents: int
  weight: float | None


@dataclasses.dataclass(frozen=True)
class MetaOptimizer:
  name: str
  learning_rate: float
  max_grad_norm: float | None

  def make(self) -> optax.GradientTransformation:
    optimizer = getattr(optax, self.name)(self.learning_rate)
    if self.max_grad_norm is None:
      return optimizer
    return optax.chain(optax.clip_by_global_norm(self.max_grad_norm), optimizer)


@dataclasses.dataclass(frozen=True)
class MetaTrainSettings:
  """A meta-training run's settings, checked.

  ``config``: the config they came from (saved in ``config.json``, compared on
  resume); ``agent``: the rule's agent settings with ``config.agent``,
  ``hyper_params`` and ``rule_kwargs`` applied; ``estimator_settings``: from
  ``config.<estimator>`` (None without, e.g. backprop).
  """

  config: config_dict.ConfigDict
  output_dir: Path
  resume: bool
  num_meta_steps: int
  checkpoint_every: int
  keep_checkpoints: int
  log_every: int
  seed: int
  init_seed: int
  max_consecutive_skips: int
  init_meta_params: str
  batch_size: int
  groups: tuple[GroupSpec, ...]
  agent: agent_settings_lib.AgentSettings
  value_fn: value_function.ValueFnConfig
  estimator: str
  estimator_settings: Any
  population: meta_step.PopulationConfig
  meta_optimizer: MetaOptimizer
  num_devices: int
  level_sampler: level_samplers.SamplerConfig
  validation: validation_settings.ValidationSettings
  distributed: distributed.DistributedSettings | None
  tracking: tuple[str, ...]

  @property
  def rule(self) -> str:
    return self.agent.rule

  @classmethod
  def from_config(cls, config: config_dict.ConfigDict) -> MetaTrainSettings:
    """Checks every setting of ``config``; one ``UsageError`` names every
    problem."""
    return _from_config(config)


def as_settings(config: Any) -> MetaTrainSettings:
  """``config`` if it is settings already, else its settings."""
  if isinstance(config, MetaTrainSettings):
    return config
  return MetaTrainSettings.from_config(config)


# --------------------------------------------------------------- pieces ----


def population_specs(config: config_dict.ConfigDict) -> list[Any]:
  population = config.population
  if isinstance(population, (dict, config_dict.ConfigDict)):
    population = (population,)
  if not isinstance(population, (list, tuple)) or not population:
    raise errors.UsageError(
        "config.population must be a non-empty tuple of groups like "
        "{'env': 'catch', 'env_settings': {'rows': 5, 'columns': 5}, "
        f"'num_agents': 2}}, got {population!r}."
    )
  return list(population)


def _group(spec: Any, where: str, problems: checks.Problems) -> GroupSpec:
  spec = checks.as_dict(spec, where)
  if set(spec) - set(GROUP_KEYS) or "env" not in spec:
    raise errors.UsageError(
        f"config.{where} must have keys env, env_settings (optional), "
        "num_agents (optional, default 1) and weight (optional: the group's "
        f"share of the meta-gradient); got {sorted(spec)}."
    )
  env_name = spec["env"]
  try:
    jittable = env_registry.is_jittable(env_name)
  except ValueError as e:
    raise errors.UsageError(f"config.{where}: {errors.one_line(e)}") from None
  if not jittable:
    valid = [n for n in env_registry.env_names() if env_registry.is_jittable(n)]
    raise errors.UsageError(
        f"env {env_name!r} (config.{where}) runs on the host; meta-training "
        f"generates rollouts on device and needs a jittable env: "
        f"{', '.join(valid)}."
    )
  weight = spec.get("weight")
  if weight is not None:
    weight = problems.get(checks.check_number, weight, f"{where}.weight", True)
  return GroupSpec(
      env=env_name,
      env_settings=problems.get(
          checks.as_dict,
          spec.get("env_settings") or {},
          f"{where}.env_settings",
          default={},
      ),
      num_agents=problems.get(
          checks.check_int, spec.get("num_agents", 1), f"{where}.num_agents", 1
      ),
      weight=weight,
  )


def _rule_name(config) -> str:
  """``config.rule``: a registered rule with meta-parameters."""
  name = str(config.rule).strip()
  try:
    rule = rule_registry.make_rule(rule_registry.default_settings(name))
  except ValueError as e:
    raise errors.UsageError(f"config.rule: {errors.one_line(e)}") from None
  if not jax.tree.leaves(rule.meta_param_shapes()):
    raise errors.UsageError(
        f"config.rule={name!r} has no meta-parameters to meta-train: use a "
        "rule with a meta-network (e.g. disco, lpg, ta_lpg)."
    )
  return name


def _agent_settings(config) -> agent_settings_lib.AgentSettings:
  """The rule's default settings with ``config.agent``, ``config.hyper_params``
  and ``config.rule_kwargs`` over them (old spellings upgraded)."""
  name = _rule_name(config)
  agent_cfg = checks.as_dict(config.agent, "agent")
  unknown = set(agent_cfg) - set(AGENT_KEYS)
  if unknown:
    raise errors.UsageError(
        f"Unknown key(s) {sorted(unknown)} in config.agent; "
        f"valid: {', '.join(AGENT_KEYS)}."
    )
  optimizer = {}
  try:
    for key in ("learning_rate", "max_abs_update"):
      if key in agent_cfg:
        value = agent_cfg[key]
        # max_abs_update None: no elementwise clip.
        optimizer[key] = None if value is None else float(value)
    if "loss_mask" in agent_cfg:
      optimizer["loss_mask"] = str(agent_cfg["loss_mask"])
    if agent_cfg.get("anneal_learning_rate") is not None:
      optimizer["anneal_learning_rate"] = checks.check_bool(
          agent_cfg["anneal_learning_rate"], "agent.anneal_learning_rate"
      )
    settings = overrides.merged(
        rule_registry.default_settings(name),
        name,
        hyper_params=checks.as_dict(config.hyper_params, "hyper_params"),
        rule_kwargs=checks.as_dict(config.rule_kwargs, "rule_kwargs"),
        network=checks.as_dict(agent_cfg.get("network", {}), "agent.network"),
        **optimizer,
    )
    agent_nets.make_net_config(agent_settings_lib.thawed(settings.network))
    rule_registry.make_rule(settings)
  except overrides.SettingsError as e:
    raise errors.UsageError(errors.one_line(e)) from None
  except (TypeError, ValueError, KeyError) as e:
    raise errors.UsageError(
        f"Bad agent settings: {errors.one_line(e)}"
    ) from None
  return settings


def _value_fn(config) -> value_function.ValueFnConfig:
  vf_cfg = checks.as_dict(config.value_fn, "value_fn")
  try:
    if "dense" in vf_cfg:
      vf_cfg["dense"] = tuple(vf_cfg["dense"])
    vf_config = value_function.ValueFnConfig(**vf_cfg)
    value_function.ValueFunction(vf_config)  # checks the combination
    return vf_config
  except ValueError as e:
    raise errors.UsageError(
        f"Bad value_fn settings: {errors.one_line(e)}"
    ) from None
  except TypeError as e:
    valid = [f.name for f in dataclasses.fields(value_function.ValueFnConfig)]
    raise errors.UsageError(
        f"Bad value_fn settings ({errors.one_line(e)}); valid "
        f"keys: {', '.join(valid)}."
    ) from None


def _meta_optimizer(config) -> MetaOptimizer:
  learning_rate = checks.check_number(
      config.meta_learning_rate, "meta_learning_rate", positive=True
  )
  name = config.meta_optimizer
  if name not in META_OPTIMIZERS:
    raise errors.UsageError(
        f"Unknown meta_optimizer {name!r}; valid: "
        f"{', '.join(META_OPTIMIZERS)}."
    )
  max_grad_norm = config.meta_max_grad_norm
  if max_grad_norm is not None:
    max_grad_norm = checks.check_number(
        max_grad_norm, "meta_max_grad_norm", positive=True
    )
  return MetaOptimizer(name, learning_rate, max_grad_norm)


def _lifetime_updates(config, inner: int) -> tuple[int, int] | None:
  """``config.lifetime_updates`` checked against the checked ``inner`` steps:
  None or ``(low, high)``."""
  value = config.lifetime_updates
  if value is None or tuple(value) in ((), (0, 0)):
    return None
  value = tuple(value)
  how = f"use (low, high) with {inner} <= low <= high, or (0, 0) for none"
  if len(value) != 2 or not all(
      isinstance(v, (int, np.integer)) and not isinstance(v, bool)
      for v in value
  ):
    raise errors.UsageError(
        f"config.lifetime_updates={value!r} is not two integers: {how}."
    )
  low, high = int(value[0]), int(value[1])
  if not inner <= low <= high:
    raise errors.UsageError(
        f"config.lifetime_updates=({low}, {high}) cannot hold: lifetimes "
        f"count agent updates and every meta-step takes inner_steps={inner} "
        f"of them; {how}."
    )
  if config.lifetime_meta_steps:
    raise errors.UsageError(
        f"config.lifetime_updates=({low}, {high}) and "
        f"config.lifetime_meta_steps={config.lifetime_meta_steps} both set "
        "agents' lifetimes: set one of them (the other to 0)."
    )
  return low, high


def _key_scheme(scheme) -> str:
  try:
    return keys_lib.check_scheme(str(scheme))
  except ValueError as e:
    raise errors.UsageError(
        f"config.key_scheme: {errors.one_line(e)}"
    ) from None


def _population_config(config, p: checks.Problems):
  # A bad value is recorded and its default stands in, so that the rest is
  # still checked (the pass raises at its end).
  defaults = meta_step.PopulationConfig()
  rollout_len = p.get(
      checks.check_int,
      config.rollout_len,
      "rollout_len",
      2,
      default=defaults.rollout_len,
  )
  inner_steps = p.get(
      checks.check_int,
      config.inner_steps,
      "inner_steps",
      1,
      default=defaults.inner_steps,
  )
  outer = meta_gradient_lib.OuterLossConfig(
      entropy_cost=p.get(
          checks.check_number, config.meta_entropy_cost, "meta_entropy_cost"
      ),
      remat_inner_steps=p.get(
          checks.check_bool, config.remat_inner_steps, "remat_inner_steps"
      ),
      max_unrolled_inner_steps=p.get(
          checks.check_int,
          config.max_unrolled_inner_steps,
          "max_unrolled_inner_steps",
          0,
      ),
  )
  lifetime_meta_steps = p.get(
      checks.check_int,
      config.lifetime_meta_steps,
      "lifetime_meta_steps",
      0,
      default=0,
  )
  lifetime_updates = p.get(_lifetime_updates, config, inner_steps)
  if lifetime_updates is not None and lifetime_meta_steps:
    lifetime_updates = None  # reported by _lifetime_updates
  replay_capacity, replay_batch_size = p.get(
      _replay, config, inner_steps, default=(0, 0)
  )
  return meta_step.PopulationConfig(
      rollout_len=rollout_len,
      inner_steps=inner_steps,
      lifetime_meta_steps=lifetime_meta_steps,
      lifetime_updates=lifetime_updates,
      key_scheme=p.get(
          _key_scheme, config.key_scheme, default=defaults.key_scheme
      ),
      outer=outer,
      replay_capacity=replay_capacity,
      replay_batch_size=replay_batch_size,
  )


def _replay(config, inner_steps: int) -> tuple[int, int]:
  """``(replay_capacity, replay_batch_size)``, checked."""
  capacity = checks.check_int(config.replay_capacity, "replay_capacity", 0)
  batch = checks.check_int(config.replay_batch_size, "replay_batch_size", 0)
  if not capacity:
    if batch:
      raise errors.UsageError(
          f"config.replay_batch_size={batch} without a replay: set "
          "config.replay_capacity too (or replay_batch_size=0)."
      )
    return 0, 0
  estimator = str(config.estimator)
  supported = estimator_registry.names_with("replay")
  if estimator in estimator_registry.estimator_names() and (
      estimator not in supported
  ):
    raise errors.UsageError(
        f"config.replay_capacity={capacity}: the agents' replay is the "
        f"{' or '.join(supported)} estimator's, not {estimator!r}'s; set "
        f"replay_capacity=0 or estimator={supported[0]!r}."
    )
  trajectories = config.batch_size
  if not isinstance(trajectories, int) or trajectories < 1:
    return capacity, batch
  needed = trajectories * inner_steps
  if capacity < needed:
    raise errors.UsageError(
        f"config.replay_capacity={capacity} cannot hold one meta-step's "
        f"rollouts ({trajectories} environments x {inner_steps} "
        f"inner steps = {needed} trajectories): use at least {needed}."
    )
  return capacity, batch


def _estimator(config) -> estimator_registry.EstimatorEntry:
  try:
    return estimator_registry.get_entry(str(config.estimator))
  except ValueError as e:
    raise errors.UsageError(f"config.estimator: {errors.one_line(e)}") from None


def _estimator_settings(
    config, entry: estimator_registry.EstimatorEntry, agent
) -> Any:
  """``config.<estimator>``: the estimator's own settings (None without)."""
  if entry.settings is None:
    return None
  values = checks.as_dict(config.get(entry.name) or {}, entry.name)
  try:
    return entry.settings.from_config(values, agent)
  except (TypeError, ValueError) as e:
    raise errors.UsageError(
        f"Bad {entry.name} settings: {errors.one_line(e)}"
    ) from None


def _sampler_config(config) -> level_samplers.SamplerConfig:
  spec = checks.as_dict(config.level_sampler, "level_sampler")
  try:
    sampler = level_samplers.SamplerConfig(**spec)
    if sampler.kind != level_samplers.NONE:
      level_sampler_registry.get_entry(sampler.kind)
    return sampler
  except (TypeError, ValueError) as e:
    raise errors.UsageError(f"config.{errors.one_line(e)}") from None


def _check_samplers(sampler, estimator, population, groups) -> None:
  """What a level sampler needs of the rest of the run."""
  if sampler.kind == level_samplers.NONE:
    return
  supported = estimator_registry.names_with("level_samplers")
  if estimator not in supported:
    options = " or ".join(f"estimator={n!r}" for n in supported)
    raise errors.UsageError(
        f"config.level_sampler.kind={sampler.kind!r} works with {options} "
        f"only, not {estimator!r}: set level_sampler.kind='none' or "
        f"estimator={supported[0]!r}."
    )
  if not population.lifetime_meta_steps and population.lifetime_updates is None:
    raise errors.UsageError(
        "config.level_sampler draws a level at each new lifetime, but agents "
        "never start one: set lifetime_meta_steps or lifetime_updates."
    )
  total = sum(g.num_agents for g in groups)
  buffered = level_sampler_registry.get_entry(sampler.kind).cls.buffered
  if buffered and sampler.buffer_size < total:
    raise errors.UsageError(
        f"config.level_sampler.buffer_size={sampler.buffer_size} is "
        f"smaller than the population ({total} agents): use a buffer of at "
        f"least {total} levels."
    )


def _output_dir(config) -> Path:
  if not config.output_dir and config.resume:
    raise errors.UsageError(
        "config.resume=True needs the output_dir of the run to "
        "continue: pass --config.output_dir=<folder>."
    )
  return run_folders.output_dir(config.output_dir, "meta")


# ------------------------------------------------------------ the pass ----


def _expected_keys(config: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """The default config, plus the settings group ``config.<estimator>`` of an
  estimator registered elsewhere, where ``config`` holds it."""
  expected = default_config()
  group = str(config.get("estimator"))
  if group in config and group not in expected:
    expected[group] = {}
  return expected


def _from_config(config: config_dict.ConfigDict) -> MetaTrainSettings:
  checks.check_config_keys(config, _expected_keys(config), CONFIG_NAME)
  distributed_settings = distributed.settings(config.distributed)
  p = checks.Problems()
  ints = {
      key: p.get(checks.check_int, config[key], key, minimum)
      for key, minimum in (
          ("num_meta_steps", 1),
          ("checkpoint_every", 0),
          ("keep_checkpoints", 1),
          ("log_every", 1),
          ("max_consecutive_skips", 1),
          ("batch_size", 1),
          ("num_devices", 0),
      )
  }
  for key in ("seed", "init_seed"):
    ints[key] = p.get(checks.check_seed, config[key], key)
  resume = p.get(checks.check_bool, config.resume, "resume", default=False)
  agent = p.get(_agent_settings, config)
  estimator = p.get(_estimator, config)
  estimator_settings = None
  if estimator is not None:
    estimator_settings = p.get(_estimator_settings, config, estimator, agent)
  groups = ()
  specs = p.get(population_specs, config, default=[])
  groups = tuple(
      g
      for i, spec in enumerate(specs)
      if (g := p.get(_group, spec, f"population[{i}]", p)) is not None
  )
  population = _population_config(config, p)
  sampler = p.get(_sampler_config, config)
  if sampler is not None and estimator is not None:
    with p.check():
      _check_samplers(sampler, estimator.name, population, groups)
  settings = MetaTrainSettings(
      config=config,
      output_dir=p.get(_output_dir, config),
      resume=resume,
      num_meta_steps=ints["num_meta_steps"],
      checkpoint_every=ints["checkpoint_every"],
      keep_checkpoints=ints["keep_checkpoints"],
      log_every=ints["log_every"],
      seed=ints["seed"],
      init_seed=ints["init_seed"],
      max_consecutive_skips=ints["max_consecutive_skips"],
      init_meta_params=str(config.init_meta_params).strip(),
      batch_size=ints["batch_size"],
      groups=groups,
      agent=agent,
      value_fn=p.get(_value_fn, config),
      estimator=None if estimator is None else estimator.name,
      estimator_settings=estimator_settings,
      population=population,
      meta_optimizer=p.get(_meta_optimizer, config),
      num_devices=ints["num_devices"],
      level_sampler=sampler,
      validation=p.get(validation_settings.parse_settings, config.validation),
      distributed=distributed_settings,
      tracking=p.get(checks.check_tracking, config.tracking),
  )
  p.raise_if_any()
  return settings
