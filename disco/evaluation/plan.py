"""Building a meta-evaluation: ``build(settings)`` resolves the rule and its
meta-parameters, the environment and the loop, and returns an ``EvalPlan``,
everything ``run`` needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
from ml_collections import config_dict

from disco import agent as agent_lib
from disco import distributed
from disco import errors
from disco import run_folders
from disco import startup
from disco.environments import base as env_base
from disco.environments import registry as env_registry
from disco.evaluation import settings as settings_lib
from disco.training import loop as loop_lib
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import presets as presets_lib
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve


@dataclasses.dataclass(frozen=True)
class EvalPlan:
  """Everything a run needs, built from checked settings."""

  settings: settings_lib.EvalSettings
  rule: resolve.ResolvedRule
  preset: presets_lib.Preset | None  # the preset applied (None: none)
  env: env_base.Environment
  env_settings: dict[str, Any]
  agent: agent_lib.Agent
  loop: loop_lib.EvalLoop
  seeds: list[int]  # every seed of the run
  local_seeds: list[int]  # the seeds this process trains (all in one process)
  iterations_per_call: int
  num_calls: int
  output_dir: Path

  @property
  def label(self) -> str:
    return self.rule.label

  @property
  def loop_config(self) -> loop_lib.LoopConfig:
    return self.loop.config

  @property
  def iterations(self) -> int:
    return self.iterations_per_call * self.num_calls

  @property
  def env_steps(self) -> int:
    """Environment steps per seed of the whole run."""
    return self.iterations * self.loop_config.env_steps_per_iteration

  @property
  def schedule(self) -> dict[str, int]:
    """How the iterations split into compiled calls, and the environment steps
    (``config.json``'s ``run`` record)."""
    return dict(
        iterations=self.iterations,
        num_calls=self.num_calls,
        iterations_per_call=self.iterations_per_call,
        env_steps_per_iteration=self.loop_config.env_steps_per_iteration,
        env_steps_per_seed=self.env_steps,
    )


def plan_iterations(
    total_env_steps: int, env_steps_per_iteration: int, iterations_per_call: int
) -> tuple[int, int]:
  """``(iterations_per_call, num_calls)`` covering ``total_env_steps``:
  ``ceil(total_env_steps / env_steps_per_iteration)`` iterations rounded up to
  equal calls of at most ``iterations_per_call``, so one compiled program serves
  every call."""
  needed = max(1, math.ceil(total_env_steps / env_steps_per_iteration))
  num_calls = math.ceil(needed / iterations_per_call)
  return math.ceil(needed / num_calls), num_calls


def build(
    settings: settings_lib.EvalSettings | config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    rule: resolve.ResolvedRule | None = None,
) -> EvalPlan:
  """Resolves the rule, environment and loop of ``settings`` (a config is
  checked first) and builds the agent. A given ``rule`` is used as is: its
  ``meta_params`` may later be replaced without recompiling.

  Raises:
    UsageError: any bad setting, in one line.
  """
  if not isinstance(settings, settings_lib.EvalSettings):
    settings = settings_lib.EvalSettings.from_config(settings)
  startup.start(settings_lib.PROGRAM, settings.distributed, settings.imports)
  seeds = settings.seeds
  if len(seeds) < jax.process_count():
    raise errors.UsageError(
        f"config.num_seeds={len(seeds)} is fewer than the "
        f"{jax.process_count()} processes: each process trains its own "
        "seeds, so give at least one per process."
    )
  local_seeds = distributed.split(seeds)[jax.process_index()]
  overrides = _overrides(settings)
  if rule is None:
    preset = presets_lib.find(settings.rule, settings.env, settings.preset)
    rule = resolve.resolve_rule(
        settings.rule, settings.weights, presets_lib.under(preset, overrides)
    )
  elif overrides:
    raise errors.UsageError(
        f"Agent settings {sorted(overrides)} were given with a "
        f"ready rule ({rule.label!r}), which keeps its own: drop them."
    )
  else:
    preset = None  # a ready rule keeps its own settings
  loop_config = _loop_config(
      settings,
      {
          **rule_registry.get_entry(rule.settings.rule).loop,
          **(preset.loop if preset else {}),
      },
  )
  env, env_settings = _make_env(
      settings, loop_config.num_envs, len(local_seeds), local_seeds[0]
  )
  output_dir = run_folders.output_dir(settings.output_dir, f"eval-{rule.label}")
  iterations_per_call, num_calls = plan_iterations(
      settings.total_env_steps,
      loop_config.env_steps_per_iteration,
      settings.iterations_per_call,
  )
  _warn(settings, rule, loop_config, iterations_per_call * num_calls, log)
  agent, loop = agent_and_loop(
      rule, env, loop_config, iterations_per_call * num_calls
  )
  return EvalPlan(
      settings=settings,
      rule=rule,
      preset=preset,
      env=env,
      env_settings=env_settings,
      agent=agent,
      loop=loop,
      seeds=seeds,
      local_seeds=local_seeds,
      iterations_per_call=iterations_per_call,
      num_calls=num_calls,
      output_dir=output_dir,
  )


def _loop_config(
    settings: settings_lib.EvalSettings, recommended: Mapping[str, int]
) -> loop_lib.LoopConfig:
  """The loop: the settings', else the recommended one (the preset's over the
  rule's), else ``LoopConfig``'s defaults (the published notebook's)."""
  defaults = loop_lib.LoopConfig()
  values = {
      key: recommended.get(key, getattr(defaults, key)) if v is None else v
      for key, v in settings.loop.items()
  }
  # The recommended normalisation (a preset's), unless the settings give it.
  values.update({k: v for k, v in recommended.items() if k not in values})
  values.update(settings.normalization)
  try:
    return loop_lib.LoopConfig(**values)
  except ValueError as e:
    raise errors.UsageError(
        f"Invalid loop settings: {errors.one_line(e)}"
    ) from None


def _make_env(
    settings: settings_lib.EvalSettings,
    num_envs: int,
    num_seeds: int,
    seed: int,
) -> tuple[env_base.Environment, dict[str, Any]]:
  try:
    entry = env_registry.get_entry(settings.env)
  except ValueError as e:
    raise errors.UsageError(
        f"{errors.one_line(e)} (--config.env=list prints them)"
    ) from None
  except ImportError as e:  # a family's optional package: its own line says
    raise errors.UsageError(errors.one_line(e)) from None
  env_settings = dict(settings.env_settings)
  if not entry.jittable and "seed" in entry.settings:
    # A host environment seeded by a setting: seed it with the run's seed.
    env_settings.setdefault("seed", seed)
  try:
    env = env_registry.make_env(settings.env, num_envs, **env_settings)
  except ImportError as e:  # an optional suite's package: its own line says
    raise errors.UsageError(errors.one_line(e)) from None
  except (ValueError, TypeError) as e:
    raise errors.UsageError(f"Bad env settings: {errors.one_line(e)}") from None
  if not env.is_jittable and not env.keeps_lifetimes and num_seeds != 1:
    raise errors.UsageError(
        f"env {settings.env!r} runs on the host and trains one seed at a "
        "time: use num_seeds=1 (or a jittable env such as 'catch')."
    )
  return env, env_settings


def _warn(
    settings: settings_lib.EvalSettings,
    rule: resolve.ResolvedRule,
    loop_config: loop_lib.LoopConfig,
    iterations: int,
    log: Callable[[str], None],
) -> None:
  if rule.source == "random":
    log(
        f"Warning: rule {settings.rule!r} has meta-parameters and none were "
        "given: using a random initialisation (use rule=disco103 or a .npz "
        "file for trained ones)."
    )
  if rule.settings.rule == "disco103" and not loop_config.replay_capacity:
    log(
        "Warning: without a replay (replay_capacity=0) Disco103 learns far "
        "more slowly: Catch 8x8 is still unlearnt after 100k steps of 8x16 "
        "rollouts, where the default loop (a replay) learns it by 60k "
        "(docs: results/learning)."
    )
  if loop_config.num_updates(iterations) == 0:
    env_steps = loop_config.env_steps_per_iteration * (
        loop_config.iterations_before_learning + 1
    )
    log(
        "Warning: this budget ends before the first learner step: learning "
        f"starts once the replay holds {loop_config.min_replay_size} "
        f"trajectories, after {env_steps} env steps per seed. Raise "
        "total_env_steps above that or lower min_replay_size."
    )


def _overrides(settings: settings_lib.EvalSettings) -> dict[str, Any]:
  """The agent-setting overrides ``settings`` give (``overrides.merged``'s
  keywords); clips of 0 become None, empty ones are left out."""
  out: dict[str, Any] = {
      key: getattr(settings, key)
      for key in agent_settings_lib.OPTIMIZER_KEYS
      if key not in settings_lib.CLIP_KEYS
      and getattr(settings, key) is not None
  }
  for key in settings_lib.CLIP_KEYS:
    if getattr(settings, key) is not None:
      out[key] = getattr(settings, key) or None
  out["hyper_params"] = settings.hyper_params
  out["rule_kwargs"] = settings.rule_kwargs
  out["network"] = {k: v for k, v in settings.network.items() if v is not None}
  out["policy"] = {k: v for k, v in settings.policy.items() if v is not None}
  return {k: v for k, v in out.items() if v != {}}


def agent_and_loop(
    rule: resolve.ResolvedRule,
    env: env_base.Environment,
    loop_config: loop_lib.LoopConfig,
    iterations: int,
) -> tuple[agent_lib.Agent, loop_lib.EvalLoop]:
  """The agent of ``rule`` (its settings and built rule) and its loop over
  ``iterations``, as ``build`` makes them (``rule`` may hold traced
  hyper-parameters: nothing here checks their values).

  Raises:
    UsageError: the agent or loop rejects the settings or environment.
  """
  try:
    num_updates = loop_config.num_updates(iterations)
    agent = agent_lib.make_agent(
        rule.settings,
        rule=rule.rule,
        action_spec=env.action_spec(),
        num_updates=num_updates,
        observation_spec=env.observation_spec(),
    )
    # The evaluation budget is the agents' lifetime (for rules that read it).
    loop = loop_lib.EvalLoop(
        agent, env, loop_config, lifetime=max(num_updates, 1)
    )
  except ValueError as e:
    raise errors.UsageError(errors.one_line(e)) from None
  return agent, loop
