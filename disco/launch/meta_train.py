"""Meta-training launcher: discover or fine-tune a Disco rule on a population.

  disco-meta-train --config.num_meta_steps=100 --config.output_dir=runs/my-rule

(or ``python -m disco.launch.meta_train ...``). The settings live in
``configs/meta_train.py``; pass ``--config=<file>`` for another config file.
The run writes into ``output_dir``:

* ``config.json``      the resolved config and the run's environment;
* ``metrics.csv``      one row per logged meta-step (meta loss, its
                        policy-gradient and regulariser parts, meta-gradient
                        and update norms, rewards, fractions of positive and
                        negative rewards per actor step, and every per-group
                        and inner-loop log as ``<group>/...``);
* ``rewards.png``, ``meta_loss.png``  the learning curves;
* ``checkpoints/<step>/``  the last ``keep_checkpoints`` checkpoints (every
                        ``checkpoint_every`` meta-steps and at exit, also on
                        Ctrl-C / SIGTERM); ``--config.resume=True`` continues
                        the run from the latest one, bit for bit;
* ``meta_params.npz``  the final meta-parameters, with metadata naming the
                        rule, so ``disco-eval --config.rule=<dir>/meta_params.npz``
                        evaluates the discovered rule;
* ``summary.json``     final metrics and timings;
* with ``config.validation`` (``every`` > 0): ``validation.csv``,
                        ``validation.png`` and ``best_meta_params.npz``
                        (the meta-parameters with the best score on the
                        held-out environments; ``disco.launch.validation``).
                        ``disco-validate RUN_DIR --follow`` validates the
                        checkpoints from another process instead.

``--config.estimator`` picks the meta-gradient estimator: ``backprop``
(through ``inner_steps`` learner updates; the default), ``es`` (evolution
strategies over whole lifetimes, ``config.es``) or ``pes`` (persistent ES
over truncations, ``config.pes``); see ``disco.meta.estimators``.

Bad input ends the program with a one-line message on stderr and exit status
2 before anything is trained. A run has three steps: ``build`` (check the
config, build the population and the initial meta-parameters), ``run``
(meta-train, resuming and checkpointing) and ``write`` (export, curves,
summary).

Several processes or hosts run one meta-training together on
``jax.distributed`` (``config.distributed``; ``disco.launch.distributed``):
every process starts the same command, the agents are sharded over all
their devices, all write the checkpoints, and process 0 alone prints and
writes the other outputs.

Divergence is handled in the meta-step (see ``disco.meta.divergence``):
diverged agents restart and a non-finite meta-update is skipped; after
``max_consecutive_skips`` skips in a row the run stops with one line and exit
status 3, without a new checkpoint or an export. Checkpoints are written only
after an applied meta-update and never hold non-finite values; a resumed run
falls back past damaged checkpoints (moving them aside).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import json
from pathlib import Path
import sys
import time
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from ml_collections import config_dict
import numpy as np
import optax
import tqdm

from disco import agent as agent_lib
from disco import tracking
from disco import weights as weights_lib
from disco.environments import registry as env_registry
from disco.launch import common
from disco.launch import distributed
from disco.launch import rule_settings
from disco.launch import validation as validation_lib
from disco.meta import checkpoints as ckpt_lib
from disco.meta import divergence
from disco.meta import es as es_lib
from disco.meta import estimators as estimators_lib
from disco.meta import history as history_lib
from disco.meta import keys as keys_lib
from disco.meta import level_samplers
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import pes as pes_lib
from disco.meta import population as population_lib
from disco.meta import value_function
from disco.networks import agent_nets
from disco.update_rules import registry as rule_registry

UsageError = common.UsageError

PROGRAM = "disco-meta-train"
CONFIG_NAME = "meta_train"
RULE = "disco"  # the default rule
RANDOM, DISCO103 = "random", "disco103"
META_OPTIMIZERS = ("adam", "sgd", "rmsprop")
CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = (
    "config.json",
    "metrics.csv",
    "summary.json",
)
REWARDS_PLOT, LOSS_PLOT = "rewards.png", "meta_loss.png"
META_PARAMS_FILE = "meta_params.npz"
AGENT_KEYS = (
    "network",
    "learning_rate",
    "max_abs_update",
    "loss_mask",
    "anneal_learning_rate",
)
GROUP_KEYS = ("env", "env_settings", "num_agents", "weight")
DEBUG_KEYS = (
    "poison_meta_grad_at_steps",
    "poison_agent_at_steps",
    "corrupt_checkpoint_at_step",
)
# Settings a resumed run may change: they do not alter the computation (the
# devices and processes only change the rounding of the meta-gradient mean;
# the test-only debug faults aside).
RESUMABLE_KEYS = (
    "num_meta_steps",
    "checkpoint_every",
    "keep_checkpoints",
    "resume",
    "log_every",
    "output_dir",
    "num_devices",
    "distributed",
    "max_consecutive_skips",
    "debug",
    "tracking",
    # Validation only reads the meta-parameters; its rows are checked
    # against the settings they were made with (validation.json).
    "validation",
)


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/meta_train.py``."""
  return common.load_config(CONFIG_NAME)


# ------------------------------------------------------------ building ----


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything a run needs, built and checked from a config."""

  config: config_dict.ConfigDict
  settings: config_dict.ConfigDict  # the rule's (agent) settings
  groups: list[population_lib.AgentGroup]
  population: population_lib.Population
  meta_params: Any  # initial meta-parameters (None when resuming)
  output_dir: Path
  # Held-out validation in this process (None: off, validation.every=0).
  validation: validation_lib.Validation | None = None

  @property
  def rule(self):
    return self.groups[0].agent.rule

  def resolved_config(self) -> dict[str, Any]:
    """The config as saved with the run (``output_dir`` made explicit)."""
    resolved = self.config.to_dict()
    resolved["output_dir"] = str(self.output_dir)
    return common.to_jsonable(resolved)

  def groups_text(self) -> str:
    return ", ".join(f"{g.num_agents} x {g.name}" for g in self.groups)


def _group_name(env_name: str, env) -> str:
  if hasattr(env, "rows") and hasattr(env, "columns"):
    return f"{env_name}-{env.rows}x{env.columns}"
  return env_name


def _make_group(
    spec: Any,
    where: str,
    batch_size: int,
    settings,
    value_fn,
    num_updates: int | None,
) -> population_lib.AgentGroup:
  spec = common.as_dict(spec, where)
  unknown = set(spec) - set(GROUP_KEYS)
  if unknown or "env" not in spec:
    raise UsageError(
        f"config.{where} must have keys env, env_settings (optional), "
        "num_agents (optional, default 1) and weight (optional: the group's "
        f"share of the meta-gradient); got {sorted(spec)}."
    )
  env_name = spec["env"]
  try:
    jittable = env_registry.is_jittable(env_name)
  except ValueError as e:
    raise UsageError(f"config.{where}: {common.one_line(e)}") from None
  if not jittable:
    valid = [n for n in env_registry.env_names() if env_registry.is_jittable(n)]
    raise UsageError(
        f"env {env_name!r} (config.{where}) runs on the host; meta-training "
        f"generates rollouts on device and needs a jittable env: "
        f"{', '.join(valid)}."
    )
  num_agents = common.check_int(
      spec.get("num_agents", 1), f"{where}.num_agents", 1
  )
  env_settings = common.as_dict(
      spec.get("env_settings") or {}, f"{where}.env_settings"
  )
  weight = spec.get("weight")
  if weight is not None:
    weight = common.check_number(weight, f"{where}.weight", positive=True)
  try:
    env = env_registry.make_env(env_name, batch_size, **env_settings)
    # Checked against the observations (and sized by them, for index
    # observations): each group gets its own agent and value function.
    spec = env.observation_spec()
    agent = agent_lib.make_agent(
        settings,
        env.num_actions,
        num_updates=num_updates,
        observation_spec=spec,
    )
    group_value_fn = value_fn.with_observation(spec)
  except (ValueError, TypeError) as e:
    raise UsageError(
        f"Bad settings in config.{where}: {common.one_line(e)}"
    ) from None
  return population_lib.AgentGroup(
      name=_group_name(env_name, env),
      env=env,
      agent=agent,
      value_fn=group_value_fn,
      num_agents=num_agents,
      weight=weight,
  )


def _make_groups(
    config, settings, value_fn, num_updates=None
) -> list[population_lib.AgentGroup]:
  """The population's groups; ``num_updates``: the optimiser steps of an
  agent's lifetime, where it is known before the run (ES), for agents that
  anneal their learning rate over it."""
  population = config.population
  if isinstance(population, (dict, config_dict.ConfigDict)):
    population = (population,)
  if not isinstance(population, (list, tuple)) or not population:
    raise UsageError(
        "config.population must be a non-empty tuple of groups like "
        "{'env': 'catch', 'env_settings': {'rows': 5, 'columns': 5}, "
        f"'num_agents': 2}}, got {population!r}."
    )
  batch_size = common.check_int(config.batch_size, "batch_size", 1)
  groups, names = [], set()
  for i, spec in enumerate(population):
    group = _make_group(
        spec, f"population[{i}]", batch_size, settings, value_fn, num_updates
    )
    name, k = group.name, 1
    while name in names:
      k += 1
      name = f"{group.name}-{k}"
    names.add(name)
    groups.append(dataclasses.replace(group, name=name))
  return groups


def _meta_optimizer(
    name: str, learning_rate, max_grad_norm=None
) -> optax.GradientTransformation:
  learning_rate = common.check_number(
      learning_rate, "meta_learning_rate", positive=True
  )
  if name not in META_OPTIMIZERS:
    raise UsageError(
        f"Unknown meta_optimizer {name!r}; valid: "
        f"{', '.join(META_OPTIMIZERS)}."
    )
  optimizer = getattr(optax, name)(learning_rate)
  if max_grad_norm is None:
    return optimizer
  max_grad_norm = common.check_number(
      max_grad_norm, "meta_max_grad_norm", positive=True
  )
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), optimizer)


def _checkpoint_steps(directory: Path) -> list[int]:
  if not directory.is_dir():
    return []
  return sorted(
      int(p.name)
      for p in directory.iterdir()
      if p.is_dir() and p.name.isdigit()
  )


def _check_output_dir(config) -> Path:
  if not config.output_dir and config.resume:
    raise UsageError(
        "config.resume=True needs the output_dir of the run to "
        "continue: pass --config.output_dir=<folder>."
    )
  out = common.output_dir(config.output_dir, "meta")
  _check_free(out, config.resume)
  return out


def _check_free(out: Path, resume: bool) -> None:
  holds_run = (out / CONFIG_FILE).exists() or bool(
      _checkpoint_steps(out / CHECKPOINT_DIR)
  )
  if holds_run and not resume:
    raise UsageError(
        f"output_dir {out} already holds a meta-training run: pass "
        "--config.resume=True to continue it, or choose another folder."
    )


def load_initial_meta_params(
    init: str, rule, init_seed: int, rule_name: str = RULE
):
  """``'random'`` (``rule.init_meta_params(PRNGKey(init_seed))``),
  ``'disco103'`` (for the Disco rule) or the path of a ``.npz`` of
  meta-parameters of rule ``rule_name``; checked against the rule's
  structure.

  Raises:
    UsageError: unknown value, missing or mismatching file.
  """
  init = str(init).strip()
  expected = jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))
  if init == RANDOM:
    return jax.jit(rule.init_meta_params)(jax.random.PRNGKey(init_seed))
  if init == DISCO103:
    if rule_name not in (RULE, DISCO103):
      raise UsageError(
          f"config.init_meta_params={DISCO103!r} holds Disco meta-parameters "
          f"but config.rule={rule_name!r}: use 'random' or a .npz of "
          f"{rule_name!r} meta-parameters."
      )
    try:
      return weights_lib.load_disco103(expected=expected)
    except weights_lib.WeightsError as e:
      raise UsageError(f"Cannot load Disco103: {common.one_line(e)}") from None
  path = Path(init).expanduser()
  if not init or not (init.endswith(".npz") or path.exists()):
    raise UsageError(
        f"config.init_meta_params={init!r} is neither '{RANDOM}', "
        f"'{DISCO103}' nor the path of a .npz file."
    )
  if not path.is_file():
    raise UsageError(
        f"Meta-parameter file {path} (config.init_meta_params) "
        "does not exist: check the path."
    )
  try:
    npz = weights_lib.NpzFile(path)  # read once: metadata, headers, arrays
  except weights_lib.WeightsError as e:
    raise UsageError(f"config.init_meta_params: {common.one_line(e)}") from None
  try:
    metadata = npz.metadata()
    if metadata.get("kind") == common.AGENT_PARAMS_KIND:
      raise UsageError(
          f"{path} holds trained agent parameters, not a rule's "
          "meta-parameters."
      )
    same = {rule_name} | (
        {RULE, DISCO103} if rule_name in (RULE, DISCO103) else set()
    )
    if metadata.get("rule", RULE) not in same:
      raise UsageError(
          f"{path} holds meta-parameters of rule {metadata['rule']!r}; "
          f"this run meta-trains rule {rule_name!r} (config.rule)."
      )
    return npz.params(expected)
  except weights_lib.WeightsError as e:
    raise UsageError(f"config.init_meta_params: {common.one_line(e)}") from None
  finally:
    npz.close()


def _rule_name(config) -> str:
  """``config.rule``: a registered rule with meta-parameters."""
  name = str(config.rule).strip()
  try:
    settings = rule_registry.default_settings(name)
    rule = rule_registry.make_rule(settings)
  except ValueError as e:
    raise UsageError(f"config.rule: {common.one_line(e)}") from None
  if not jax.tree.leaves(
      jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))
  ):
    raise UsageError(
        f"config.rule={name!r} has no meta-parameters to meta-train: use a "
        "rule with a meta-network (e.g. disco, lpg, ta_lpg)."
    )
  return name


def _agent_settings(config) -> config_dict.ConfigDict:
  """The rule's default settings with ``config.agent``'s overrides."""
  settings = rule_registry.default_settings(_rule_name(config))
  agent_cfg = common.as_dict(config.agent, "agent")
  unknown = set(agent_cfg) - set(AGENT_KEYS)
  if unknown:
    raise UsageError(
        f"Unknown key(s) {sorted(unknown)} in config.agent; "
        f"valid: {', '.join(AGENT_KEYS)}."
    )
  try:
    settings.network = {
        **settings.network.to_dict(),
        **common.as_dict(agent_cfg.get("network", {}), "agent.network"),
    }
    for key in ("learning_rate", "max_abs_update"):
      if key in agent_cfg:
        value = agent_cfg[key]
        if key == "max_abs_update" and value is None:
          settings[key] = None  # no elementwise clip
        else:
          settings[key] = float(value)
    if "loss_mask" in agent_cfg:
      settings.loss_mask = str(agent_cfg["loss_mask"])
    if agent_cfg.get("anneal_learning_rate") is not None:
      settings.anneal_learning_rate = common.check_bool(
          agent_cfg["anneal_learning_rate"], "agent.anneal_learning_rate"
      )
    agent_nets.make_net_config(settings.network.to_dict())
    # The rule's own settings (rule_settings: one level of dicts merged,
    # e.g. rule_kwargs={'net': {'hidden_size': 16}}).
    rule_settings.apply(
        settings,
        common.as_dict(config.hyper_params, "hyper_params"),
        common.as_dict(config.rule_kwargs, "rule_kwargs"),
        settings.rule,
    )
    rule_registry.make_rule(settings)
  except rule_settings.SettingsError as e:
    raise UsageError(common.one_line(e)) from None
  except (TypeError, ValueError, KeyError) as e:
    raise UsageError(f"Bad agent settings: {common.one_line(e)}") from None
  return settings


def _value_fn(config) -> value_function.ValueFunction:
  vf_cfg = common.as_dict(config.value_fn, "value_fn")
  try:
    if "dense" in vf_cfg:
      vf_cfg["dense"] = tuple(vf_cfg["dense"])
    return value_function.ValueFunction(value_function.ValueFnConfig(**vf_cfg))
  except ValueError as e:
    raise UsageError(f"Bad value_fn settings: {common.one_line(e)}") from None
  except TypeError as e:
    valid = [f.name for f in dataclasses.fields(value_function.ValueFnConfig)]
    raise UsageError(
        f"Bad value_fn settings ({common.one_line(e)}); valid "
        f"keys: {', '.join(valid)}."
    ) from None


def _debug(config) -> dict[str, Any]:
  """``config.debug`` checked (test-only fault injection)."""
  debug = common.as_dict(config.debug, "debug")
  if set(debug) != set(DEBUG_KEYS):
    raise UsageError(
        f"config.debug must have exactly the keys {', '.join(DEBUG_KEYS)}; "
        f"got {sorted(debug)}."
    )
  for key in DEBUG_KEYS[:2]:  # meta-steps: checked by FaultInjection
    steps = debug[key]
    debug[key] = tuple(steps) if isinstance(steps, (list, tuple)) else (steps,)
  common.check_int(
      debug["corrupt_checkpoint_at_step"], "debug.corrupt_checkpoint_at_step", 0
  )
  return debug


def _key_scheme(scheme) -> str:
  try:
    return keys_lib.check_scheme(str(scheme))
  except ValueError as e:
    raise UsageError(f"config.key_scheme: {common.one_line(e)}") from None


def _population_config(config) -> population_lib.PopulationConfig:
  debug = _debug(config)
  try:
    faults = divergence.FaultInjection(
        poison_meta_grad_at_steps=debug["poison_meta_grad_at_steps"],
        poison_agent_at_steps=debug["poison_agent_at_steps"],
    )
  except ValueError as e:
    raise UsageError(f"config.debug: {common.one_line(e)}") from None
  any_fault = faults.poison_meta_grad_at_steps or faults.poison_agent_at_steps
  return population_lib.PopulationConfig(
      rollout_len=common.check_int(config.rollout_len, "rollout_len", 2),
      inner_steps=common.check_int(config.inner_steps, "inner_steps", 1),
      lifetime_meta_steps=common.check_int(
          config.lifetime_meta_steps, "lifetime_meta_steps", 0
      ),
      lifetime_updates=_lifetime_updates(config),
      key_scheme=_key_scheme(config.key_scheme),
      outer=meta_gradient_lib.OuterLossConfig(
          entropy_cost=common.check_number(config.entropy_cost, "entropy_cost"),
          remat_inner_steps=common.check_bool(
              config.remat_inner_steps, "remat_inner_steps"
          ),
          max_unrolled_inner_steps=common.check_int(
              config.max_unrolled_inner_steps, "max_unrolled_inner_steps", 0
          ),
      ),
      faults=faults if any_fault else None,
  )


def _lifetime_updates(config) -> tuple[int, int] | None:
  """``config.lifetime_updates`` checked: None (off) or ``(low, high)``."""
  value = config.lifetime_updates
  if value is None or tuple(value) in ((), (0, 0)):
    return None
  value = tuple(value)
  inner = int(config.inner_steps)
  how = f"use (low, high) with {inner} <= low <= high, or (0, 0) for none"
  if len(value) != 2 or not all(
      isinstance(v, (int, np.integer)) and not isinstance(v, bool)
      for v in value
  ):
    raise UsageError(
        f"config.lifetime_updates={value!r} is not two integers: {how}."
    )
  low, high = int(value[0]), int(value[1])
  if not inner <= low <= high:
    raise UsageError(
        f"config.lifetime_updates=({low}, {high}) cannot hold: lifetimes "
        f"count agent updates and every meta-step takes inner_steps={inner} "
        f"of them; {how}."
    )
  if config.lifetime_meta_steps:
    raise UsageError(
        f"config.lifetime_updates=({low}, {high}) and "
        f"config.lifetime_meta_steps={config.lifetime_meta_steps} both set "
        "agents' lifetimes: set one of them (the other to 0)."
    )
  return low, high


def _devices(config) -> list[jax.Device]:
  """The first ``num_devices`` devices of every process (all if 0)."""
  num_devices = common.check_int(config.num_devices, "num_devices", 0)
  available = len(jax.local_devices())
  if num_devices > available:
    raise UsageError(
        f"config.num_devices={num_devices} but only {available} device(s) "
        "are available (in this process)."
    )
  by_process: dict[int, list[jax.Device]] = {}
  for d in jax.devices():
    by_process.setdefault(d.process_index, []).append(d)
  return [
      d
      for p in sorted(by_process)
      for d in by_process[p][: num_devices or None]
  ]


def _estimator(config) -> str:
  try:
    return estimators_lib.check_estimator(str(config.estimator))
  except ValueError as e:
    raise UsageError(f"config.estimator: {common.one_line(e)}") from None


def _es_config(config, rule_name: str) -> es_lib.ESConfig:
  """``config.es``; its ``update_epochs`` and ``num_minibatches`` default
  (None) to the rule's loop (PPO's, DPO's and LPO's: 4 x 4)."""
  es = common.as_dict(config.es, "es")
  loop = rule_registry.get_entry(rule_name).loop
  for key in ("update_epochs", "num_minibatches"):
    if es.get(key) is None:
      es[key] = loop.get(key, 1)
  try:
    es["strategy"] = es_lib.check_strategy(str(es.get("strategy")))
    return es_lib.ESConfig(**es)
  except (TypeError, ValueError) as e:
    raise UsageError(f"Bad es settings: {common.one_line(e)}") from None


def _normalizers(groups, config) -> dict[str, tuple[float, float]]:
  """``{group: (random return, reference - random)}`` where the
  reference scores have the group's environment (others: raw returns)."""
  from disco.environments import reference_scores

  population = config.population
  if isinstance(population, (dict, config_dict.ConfigDict)):
    population = (population,)
  out = {}
  for g, spec in zip(groups, population, strict=True):
    spec = common.as_dict(spec, "population")
    key = reference_scores.env_key(spec["env"], spec.get("env_settings") or {})
    try:
      out[g.name] = reference_scores.anchors(key)
    except ValueError:  # no entry (MissingReferenceError is a ValueError)
      continue
  return out


def _attach_level_samplers(config, groups, settings, estimator, pop_config):
  """The groups with ``config.level_sampler``'s samplers (UsageError on a
  bad setting, an environment without levels, a buffer smaller than the
  population, no lifetimes or another estimator than backprop)."""
  spec = common.as_dict(config.level_sampler, "level_sampler")
  try:
    sampler_config = level_samplers.SamplerConfig(**spec)
  except (TypeError, ValueError) as e:
    raise UsageError(f"config.{common.one_line(e)}") from None
  if sampler_config.kind == level_samplers.NONE:
    return groups
  if estimator != estimators_lib.BACKPROP:
    raise UsageError(
        f"config.level_sampler.kind={sampler_config.kind!r} works with "
        f"estimator='backprop' only, not {estimator!r}: set "
        "level_sampler.kind='none' or estimator='backprop'."
    )
  if not pop_config.lifetime_meta_steps and pop_config.lifetime_updates is None:
    raise UsageError(
        "config.level_sampler draws a level at each new lifetime, but agents "
        "never start one: set lifetime_meta_steps or lifetime_updates."
    )
  total = sum(g.num_agents for g in groups)
  if sampler_config.buffered and sampler_config.buffer_size < total:
    raise UsageError(
        f"config.level_sampler.buffer_size={sampler_config.buffer_size} is "
        f"smaller than the population ({total} agents): use a buffer of at "
        f"least {total} levels."
    )
  population = config.population
  if isinstance(population, (dict, config_dict.ConfigDict)):
    population = (population,)
  out = []
  for g, spec_g in zip(groups, population, strict=True):
    env_name = common.as_dict(spec_g, "population")["env"]
    if not getattr(g.env, "has_levels", False):
      raise UsageError(
          f"config.level_sampler needs environments with levels, but "
          f"{env_name!r} has none; use "
          f"{', '.join(env_registry.level_env_names())} or set "
          "level_sampler.kind='none'."
      )
    reference = None
    if sampler_config.kind == level_samplers.GROOVE:
      ref_settings = rule_registry.default_settings(
          sampler_config.reference_rule
      )
      ref_settings.network = settings.network.to_dict()
      for key in ("learning_rate", "max_abs_update", "loss_mask"):
        ref_settings[key] = settings[key]
      if "anneal_learning_rate" in ref_settings:
        # A constant learning rate: lifetimes differ and restart mid-run.
        ref_settings.anneal_learning_rate = False
      try:
        reference = agent_lib.make_agent(
            ref_settings,
            g.env.num_actions,
            observation_spec=g.env.observation_spec(),
        )
      except (TypeError, ValueError) as e:
        raise UsageError(
            f"config.level_sampler.reference_rule: {common.one_line(e)}"
        ) from None
    out.append(
        dataclasses.replace(
            g,
            level_sampler=level_samplers.LevelSampler(sampler_config, g.env),
            reference_agent=reference,
        )
    )
  return out


def _make_population(
    config, estimator, groups, pop_config, meta_optimizer, devices, es_config
):
  """The population of ``estimator`` (``ValueError`` on bad settings);
  ``es_config``: the checked ``config.es`` (ES only)."""
  if estimator == estimators_lib.ES:
    return es_lib.ESPopulation(
        groups,
        pop_config,
        es_config,
        meta_optimizer,
        devices,
        _normalizers(groups, config),
    )
  if estimator == estimators_lib.PES:
    pes = common.as_dict(config.pes, "pes")
    try:
      pes_config = pes_lib.PESConfig(**pes)
    except TypeError as e:
      raise UsageError(f"Bad pes settings: {common.one_line(e)}") from None
    return pes_lib.PESPopulation(
        groups, pop_config, pes_config, meta_optimizer, devices
    )
  return population_lib.Population(groups, pop_config, meta_optimizer, devices)


def build(config: config_dict.ConfigDict) -> Plan:
  """Checks ``config`` and builds the groups, population and initial
  meta-parameters (not the state; see ``initial_state``).

  Raises:
    UsageError: for any bad setting, with a one-line explanation.
  """
  common.check_config_keys(config, default_config(), CONFIG_NAME)
  distributed.initialize(distributed.settings(config.distributed), PROGRAM)
  common.import_modules(config.imports)
  common.check_tracking(config.tracking)
  for key, minimum in (
      ("num_meta_steps", 1),
      ("checkpoint_every", 0),
      ("keep_checkpoints", 1),
      ("log_every", 1),
      ("seed", 0),
      ("max_consecutive_skips", 1),
  ):
    common.check_int(config[key], key, minimum)
  init_seed = common.check_int(config.init_seed, "init_seed", 0)
  common.check_bool(config.resume, "resume")
  pop_config = _population_config(config)
  meta_optimizer = _meta_optimizer(
      config.meta_optimizer,
      config.meta_learning_rate,
      config.meta_max_grad_norm,
  )
  output_dir = _check_output_dir(config)
  devices = _devices(config)
  settings = _agent_settings(config)
  estimator = _estimator(config)
  es_config = lifetime = None
  if estimator == estimators_lib.ES:
    es_config = _es_config(config, settings.rule)
    lifetime = es_config.lifetime_updates
  groups = _make_groups(config, settings, _value_fn(config), lifetime)
  groups = _attach_level_samplers(
      config, groups, settings, estimator, pop_config
  )
  bad = [
      f"{g.name}: {g.num_agents}" for g in groups if g.num_agents % len(devices)
  ]
  if bad and estimator != estimators_lib.ES:
    where = common.processes_text("of")
    raise UsageError(
        f"Every group's num_agents must split evenly over the "
        f"{len(devices)} device(s){where} ({', '.join(bad)}): use multiples "
        f"of {len(devices)} or set config.num_devices."
    )
  try:
    population = _make_population(
        config,
        estimator,
        groups,
        pop_config,
        meta_optimizer,
        devices,
        es_config,
    )
  except ValueError as e:
    raise UsageError(common.one_line(e)) from None
  resuming = config.resume and _checkpoint_steps(output_dir / CHECKPOINT_DIR)
  meta_params = None
  if not resuming:
    meta_params = load_initial_meta_params(
        config.init_meta_params, groups[0].agent.rule, init_seed, settings.rule
    )
  elif str(config.init_meta_params) not in (RANDOM, DISCO103):
    # Fail early on a bad value even though the checkpoint supersedes it.
    path = Path(str(config.init_meta_params)).expanduser()
    if not path.is_file():
      raise UsageError(
          f"Meta-parameter file {path} "
          "(config.init_meta_params) does not exist."
      )
  plan = Plan(
      config=config,
      settings=settings,
      groups=groups,
      population=population,
      meta_params=meta_params,
      output_dir=output_dir,
  )
  validation = make_validation(plan)
  if validation is not None and not validation.settings.in_process:
    validation = None  # checked for disco-validate; off in this process
  return dataclasses.replace(plan, validation=validation)


def exporter(plan: Plan) -> Callable[..., Path]:
  """``export(path, meta_params, meta_step, **extra)``: writes
  meta-parameters as this run's ``meta_params.npz`` is written."""
  return functools.partial(
      _export_run_params,
      settings=plan.settings,
      config=plan.config,
      groups=plan.groups,
  )


def _export_run_params(
    path, meta_params, meta_step, *, settings, config, groups, **extra
) -> Path:
  return export_meta_params(
      path,
      meta_params,
      settings,
      meta_step,
      source=PROGRAM,
      init_meta_params=str(config.init_meta_params),
      population=[dict(name=g.name, num_agents=g.num_agents) for g in groups],
      **extra,
  )


def make_validation(
    plan: Plan, block: Any = None
) -> validation_lib.Validation | None:
  """The run's held-out validation (``block``: its settings, default
  ``config.validation``); None when it has no held-out environments.

  Raises:
    UsageError: bad settings, an environment or budget that cannot run, or
      rows in the run folder made with other settings.
  """
  block = plan.config.validation if block is None else block
  settings = validation_lib.parse_settings(block)
  if not settings.envs:
    return None
  if settings.in_process and jax.process_count() > 1:
    raise UsageError(
        "config.validation.every > 0 validates in the meta-training "
        "process, which a multi-process run does not support: set "
        "validation.every=0 and follow the checkpoints with disco-validate "
        f"{plan.output_dir} --follow."
    )
  validator = validation_lib.Validator(
      settings, plan.settings, plan.rule, plan.output_dir
  )
  record = validation_lib.Record(
      plan.output_dir, settings, exporter(plan), write=distributed.is_main()
  )
  return validation_lib.Validation(validator, record)


def abstract_state(
    population: population_lib.Population, rule
) -> population_lib.MetaTrainState:
  """Shapes, dtypes and shardings of the population's state (no compute)."""
  meta_params = jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))
  shapes = jax.eval_shape(population.init, jax.random.PRNGKey(0), meta_params)
  replicated = NamedSharding(population.mesh, P())
  sharded = NamedSharding(population.mesh, P(population_lib.AXIS))

  def with_sharding(sharding):
    return lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

  return shapes.replace(
      meta_params=jax.tree.map(with_sharding(replicated), shapes.meta_params),
      meta_opt_state=jax.tree.map(
          with_sharding(replicated), shapes.meta_opt_state
      ),
      step=with_sharding(replicated)(shapes.step),
      rng=with_sharding(replicated)(shapes.rng),
      agents=jax.tree.map(with_sharding(sharded), shapes.agents),
      estimator=jax.tree.map(with_sharding(replicated), shapes.estimator),
      levels=jax.tree.map(with_sharding(replicated), shapes.levels),
  )


def initial_state(plan: Plan) -> population_lib.MetaTrainState:
  """The state of a new run (agents from ``config.seed``)."""
  return plan.population.init(
      jax.random.PRNGKey(plan.config.seed), plan.meta_params
  )


def export_meta_params(
    path: str | Path, meta_params, settings, meta_step: int, **extra
) -> Path:
  """Saves meta-parameters with the metadata ``disco-eval`` resolves them by
  (``rule``, ``rule_kwargs``, ``meta_step``, the rule's ``hyper_params``
  in ``settings`` where they differ from its defaults, and any ``extra``)."""
  metadata = dict(
      common.to_jsonable(extra),
      rule=settings.rule,
      rule_kwargs=common.to_jsonable(settings.rule_kwargs),
      meta_step=int(meta_step),
  )
  hyper_params = common.to_jsonable(settings.hyper_params)
  defaults = rule_registry.default_settings(settings.rule).hyper_params
  if hyper_params != common.to_jsonable(defaults):
    metadata["settings"] = dict(hyper_params=hyper_params)
  return weights_lib.save_meta_params(
      path,
      jax.tree.map(np.asarray, jax.device_get(meta_params)),
      metadata=metadata,
  )


# ------------------------------------------------------------- running ----


def _with_rule_defaults(config: dict) -> dict:
  """``config`` (a saved one) with its ``hyper_params`` and ``rule_kwargs``
  completed by the rule's defaults, so that a run configured with its
  overrides only (in code, or saved before they were completed) compares
  equal to the same run from the command line (where they are complete)."""
  out = dict(config)
  for key in rule_settings.KEYS:
    try:
      out[key] = rule_settings.completed(
          str(config.get("rule")), config.get(key), key
      )
    except (ValueError, TypeError):  # an unknown rule: compared as saved
      pass
  return out


def _with_added_keys(saved: dict, current: dict, defaults: dict) -> dict:
  """``saved`` with the keys it lacks that ``current`` holds at the default
  config's value: keys the config gained since the run was saved (e.g.
  ``es.update_epochs``), left at their defaults, so that such a run resumes
  with its own settings. Nested dicts too."""
  out = dict(saved)
  for key, value in current.items():
    default = defaults.get(key) if isinstance(defaults, dict) else None
    if key not in out:
      if isinstance(defaults, dict) and key in defaults and value == default:
        out[key] = value
    elif isinstance(value, dict) and isinstance(out[key], dict):
      out[key] = _with_added_keys(out[key], value, default or {})
  return out


def _check_same_config(saved: dict, current: dict, where) -> None:
  if isinstance(current, config_dict.ConfigDict):
    current = current.copy_and_resolve_references().to_dict()
  defaults = default_config().copy_and_resolve_references().to_dict()
  saved = _with_added_keys(saved, current, defaults)
  saved, current = _with_rule_defaults(saved), _with_rule_defaults(current)
  diff = ckpt_lib.config_differences(saved, current, RESUMABLE_KEYS)
  if diff:
    raise UsageError(
        f"Cannot resume: the config differs from the run in {where} "
        f"({'; '.join(diff)}). Only {', '.join(RESUMABLE_KEYS)} may change "
        "when resuming: use the run's settings, or start a new output folder."
    )


def _read_saved_config(path: Path) -> tuple[dict | None, str | None]:
  """``(the config saved in config.json, None)``, or ``(None, what is wrong
  with the file)`` when it is missing or damaged (e.g. cut short by a full
  disk)."""
  if not path.exists():
    return None, "missing"
  try:
    saved = json.loads(path.read_text())["config"]
    if not isinstance(saved, dict):
      raise TypeError("its 'config' is not an object")
  except (OSError, ValueError, KeyError, TypeError) as e:
    return None, f"unreadable ({type(e).__name__}: {common.one_line(e)})"
  return saved, None


def _resume(plan: Plan, manager: ckpt_lib.CheckpointManager, log):
  """The newest readable checkpoint (``ckpt_lib.Restored``), or ``None``.

  Damaged checkpoints newer than it are moved aside, saying so. The run's
  config is checked against the one in ``config.json``, or, where that is
  missing or damaged, the one saved in the checkpoint (saying so in one
  line).
  """
  out, config = plan.output_dir, plan.resolved_config()
  saved_config, problem = _read_saved_config(out / CONFIG_FILE)
  if manager.latest_step() is None:
    if problem is not None and problem != "missing":
      raise UsageError(
          f"{out / CONFIG_FILE} is {problem} and there is no checkpoint to "
          "read the run's config from: start a new output folder."
      )
    if saved_config is not None:
      _check_same_config(saved_config, config, out / CONFIG_FILE)
    log(f"No checkpoint in {manager.directory}: starting a new run.")
    return None
  try:
    restored = manager.restore_newest_readable(
        abstract_state(plan.population, plan.rule), log
    )
  except ckpt_lib.CheckpointError as e:
    raise UsageError(common.one_line(e)) from None
  if restored is None:
    raise UsageError(
        f"No readable checkpoint is left in {manager.directory} (the damaged "
        f"ones were moved aside to <step>{ckpt_lib.DAMAGED_SUFFIX}): start a "
        "new output folder."
    )
  if problem is not None:
    log(
        f"{out / CONFIG_FILE} is {problem}: resuming with the config saved in "
        f"checkpoint {restored.path} (and rewriting {CONFIG_FILE})."
    )
  if restored.config is not None:
    _check_same_config(restored.config, config, restored.path)
  if restored.step > plan.config.num_meta_steps:
    raise UsageError(
        f"The latest checkpoint ({restored.path}) is at meta-step "
        f"{restored.step}, beyond num_meta_steps={plan.config.num_meta_steps}:"
        " raise num_meta_steps, or start a new output folder."
    )
  log(f"Resuming from {restored.path} (meta-step {restored.step}).")
  return restored


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What ``run`` returns.

  Attributes:
    state: the final state.
    history: the metrics of every logged meta-step (resumed ones included).
    start_step: the meta-step this run started from (0 unless resumed).
    step_times: seconds of each meta-step of this run (the first compiles).
    wall_time: seconds of this run.
    checkpoints: the kept checkpoint folders.
    divergence: skipped meta-updates and restarted agents over the run.
  """

  state: population_lib.MetaTrainState
  history: history_lib.MetricsHistory
  start_step: int
  step_times: list[float]
  wall_time: float
  checkpoints: list[Path]
  divergence: divergence.DivergenceRecord


def write_config(plan: Plan) -> None:
  """Creates ``output_dir`` and writes ``config.json``."""
  out = common.make_dir(plan.output_dir)
  common.write_json(
      out / CONFIG_FILE,
      dict(
          config=plan.resolved_config(),
          rule_settings=plan.settings.to_dict(),
          run=dict(
              groups=[
                  dict(
                      name=g.name,
                      num_agents=g.num_agents,
                      batch_size=g.env.batch_size,
                  )
                  for g in plan.groups
              ],
              **common.run_record(),
          ),
      ),
  )


def _diverged_message(
    record: divergence.DivergenceRecord, step: int, checkpoints: list[Path]
) -> str:
  newest = (
      f"the newest checkpoint, {checkpoints[-1]} (meta-step "
      f"{checkpoints[-1].name}), holds finite values"
      if checkpoints
      else "no checkpoint was written before"
  )
  return (
      f"Meta-training diverged at meta-step {step}: the meta-update was "
      f"skipped at {record.consecutive_skips} meta-steps in a row (from "
      f"meta-step {record.first_skip}; max_consecutive_skips="
      f"{record.max_consecutive_skips}) because the meta-gradient or the "
      f"meta-parameters were not finite. Nothing was saved or exported; "
      f"{newest}. Try a lower meta_learning_rate."
  )


def run(
    plan: Plan, log: Callable[[str], None] = print, progress: bool = True
) -> RunResult:
  """Meta-trains (or resumes) to ``num_meta_steps``, checkpointing every
  ``checkpoint_every`` meta-steps and at exit (also on Ctrl-C/SIGTERM or an
  error, with the last completed state), whenever the last meta-step applied
  its update.

  With several processes (``config.distributed``) every process runs this
  together: each steps its own agents, all write the checkpoints, and
  process 0 alone logs and writes the other outputs. SIGTERM stops every
  process at the same meta-step, with a checkpoint; an error or Ctrl-C in
  one process ends it without a checkpoint (the others stop too: see
  ``disco.launch.distributed``).

  Raises:
    common.Diverged: ``max_consecutive_skips`` meta-steps in a row skipped
      their update (the metrics are written up to there; no checkpoint is
      added). Every process decides this alike, from the same logs.
  """
  config, out = plan.config, plan.output_dir
  num_steps = int(config.num_meta_steps)
  main = distributed.is_main()
  log = distributed.main_only(log)
  # Every process has checked the output folder before process 0 writes.
  distributed.barrier("disco-meta-train: built")
  manager = ckpt_lib.CheckpointManager(
      out / CHECKPOINT_DIR, keep=int(config.keep_checkpoints)
  )
  resumed = _resume(plan, manager, log) if config.resume else None
  if main:
    write_config(plan)
  names = [g.name for g in plan.groups]
  record = divergence.DivergenceRecord.from_json(
      None if resumed is None else resumed.extra.get("divergence"),
      names,
      int(config.max_consecutive_skips),
  )
  if resumed is None:
    state, history = initial_state(plan), history_lib.MetricsHistory()
  else:
    state = resumed.state
    history = history_lib.MetricsHistory(resumed.history)
  csv_path = out / METRICS_FILE
  if main:
    history.write_csv(csv_path)
  start = int(jax.device_get(state.step))
  # config.tracking's other destinations of the metrics rows (process 0).
  tracker = tracking.Tracker()
  if main and common.check_tracking(config.tracking) != (tracking.CSV,):
    tracker = tracking.open_tracker(
        config.tracking,
        out,
        name=f"meta-train-{out.resolve().name}",
        config=dict(config=plan.resolved_config()),
    )
  log(
      f"Meta-training a {plan.settings.rule} rule (init: "
      f"{config.init_meta_params}, estimator: {config.estimator}) on "
      f"{plan.groups_text()} over {len(plan.population.devices)} device(s)"
      + common.processes_text("of")
      + f"; {config.batch_size} envs per agent, rollouts of "
      f"{config.rollout_len}, {config.inner_steps} inner step(s); meta-steps "
      f"{start} -> {num_steps}; writing to {out}"
  )

  resolved = plan.resolved_config()
  corrupt_at = _debug(config)["corrupt_checkpoint_at_step"]

  def validate(state, k: int) -> None:
    # Reads the meta-parameters only; steps validated already are skipped.
    if plan.validation is not None and plan.validation.settings.due(
        k, num_steps
    ):
      result = plan.validation(state.meta_params, k, log)
      if result is not None:
        tracker.scalars(k, result.scalars())

  def save(state) -> Path:
    # A second SIGINT/SIGTERM while saving does not cut the save short.
    with common.signals_deferred():
      path = manager.save(
          state,
          history=history.rows,
          config=resolved,
          extra=dict(csv_rows=len(history), divergence=record.to_json()),
      )
    if main and corrupt_at and int(path.name) == corrupt_at:
      ckpt_lib.corrupt_for_tests(path)  # test-only fault injection
    return path

  resume_hint = (
      "restart every process with --config.resume=True "
      f"--config.output_dir={out} to continue from the last checkpoint."
  )
  step_times: list[float] = []
  wall_start = time.perf_counter()
  completed = stopped = False
  try:
    with (
        distributed.ends_process_on_failure(PROGRAM, resume_hint),
        distributed.Watchdog(
            PROGRAM, config.distributed.step_timeout, "meta-step", resume_hint
        ) as watchdog,
        tqdm.tqdm(
            total=num_steps,
            initial=start,
            unit="meta-step",
            desc="meta-train",
            disable=not (progress and main),
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar,
    ):
      validate(state, start)
      for k in range(start + 1, num_steps + 1):
        t0 = time.perf_counter()
        new_state, logs = plan.population.step(state)
        jax.block_until_ready(new_state.step)
        state = new_state
        step_times.append(time.perf_counter() - t0)
        watchdog.beat()
        health = divergence.DivergenceRecord.health_logs(logs, names)
        for event in record.update(k, jax.device_get(health)):
          log(event)
        stopped = record.should_stop
        if k % config.log_every == 0 or k == num_steps or stopped:
          row = history_lib.metrics_row(
              k, logs, plan.groups, plan.population.config.rollout_len
          )
          row.update(record.totals())
          if main:
            history.append_csv(csv_path, row)
            tracker.scalars(k, row)
          else:
            history.append(row)
          bar.set_postfix(
              s_per_step=f"{step_times[-1]:.2f}",
              meta_loss=common.fmt(row.get("meta_loss")),
              reward=common.fmt(row.get("rewards")),
              skipped=record.skipped_updates,
              refresh=False,
          )
        bar.update(1)
        if stopped:
          break
        preempted = distributed.preempted(k)
        # A signal to this process alone (Ctrl-C; SIGTERM goes to JAX's
        # preemption sync when there are several) saves only when it is the
        # only process: a checkpoint is written by every process together.
        stopping = preempted or (
            common.stop_requested() and not distributed.is_multiprocess()
        )
        if record.last_update_applied and (
            stopping
            or (config.checkpoint_every and k % config.checkpoint_every == 0)
        ):
          save(state)
        if preempted:
          raise distributed.Preempted(f"SIGTERM: stopped at meta-step {k}")
        common.check_stop(f"at meta-step {k}")
        if record.last_update_applied:
          validate(state, k)
          watchdog.beat()
    completed = not stopped
  finally:
    step = int(jax.device_get(state.step))
    failure = sys.exc_info()[1]
    if failure is not None and common.resource_problem(failure) == "disk":
      pass  # a full disk: an exit checkpoint cannot be written either
    elif step > start and record.last_update_applied:
      try:
        path = save(state)
        if not completed:
          log(
              f"Interrupted at meta-step {step}; saved {path}. "
              "Continue with --config.resume=True "
              f"--config.output_dir={out}."
          )
      except Exception as e:  # noqa: BLE001 - report, then re-raise the cause
        log(f"Warning: the exit checkpoint failed: {common.one_line(e)}")
    elif step > start and not stopped:
      log(
          f"Meta-step {step} skipped its update, so no exit checkpoint was "
          "written; a resumed run continues from the newest checkpoint."
      )
    checkpoints = [manager.path(s) for s in manager.all_steps()]
    manager.close()
    tracker.close()
  if stopped:
    raise common.Diverged(_diverged_message(record, step, checkpoints))
  return RunResult(
      state=state,
      history=history,
      start_step=start,
      step_times=step_times,
      wall_time=time.perf_counter() - wall_start,
      checkpoints=checkpoints,
      divergence=record,
  )


# ------------------------------------------------------------- writing ----


def write(
    plan: Plan, result: RunResult, log: Callable[[str], None] = print
) -> dict[str, Any]:
  """Exports the meta-parameters, plots the curves and writes the summary
  (process 0 only; every process returns the summary)."""
  out, history = plan.output_dir, result.history
  main, log = distributed.is_main(), distributed.main_only(log)
  final_step = int(jax.device_get(result.state.step))
  export_path = out / META_PARAMS_FILE
  try:
    if main:
      exporter(plan)(export_path, result.state.meta_params, final_step)
  except weights_lib.NonFiniteError as e:  # the meta-step never lets this be
    raise common.Diverged(common.one_line(e)) from None
  if main and len(history):
    history.plot(
        out / REWARDS_PLOT,
        out / LOSS_PLOT,
        title=f"Meta-training on {plan.groups_text()}",
    )
  steady, compile_time = common.steady_state(result.step_times)
  last_row = history.rows[-1] if len(history) else {}
  summary = dict(
      output_dir=str(out),
      meta_steps=final_step,
      resumed_from=result.start_step or None,
      steps_this_run=len(result.step_times),
      wall_time_s=result.wall_time,
      compile_time_s=compile_time,
      seconds_per_meta_step=steady,
      final={k: last_row[k] for k in history_lib.MAIN_COLUMNS if k in last_row},
      meta_params_file=str(export_path),
      checkpoints=[str(p) for p in result.checkpoints],
      divergence=result.divergence.totals(),
  )
  if plan.validation is not None:
    summary["validation"] = validation_lib.summary(plan.validation.record)
  if main:
    common.write_json(out / SUMMARY_FILE, summary)
  fmt = common.fmt
  log(
      f"Meta-step {final_step}: meta loss {fmt(last_row.get('meta_loss'))}, "
      f"reward per step {fmt(last_row.get('rewards'))} (positive "
      f"{fmt(last_row.get('pos_reward_frac'))}, negative "
      f"{fmt(last_row.get('neg_reward_frac'))}); "
      f"{fmt(steady, 2)} s per meta-step, compile "
      f"{fmt(compile_time, 1)} s, wall {result.wall_time:.1f} s."
  )
  log(
      f"Outputs in {out}: {CONFIG_FILE}, {METRICS_FILE}, {REWARDS_PLOT}, "
      f"{LOSS_PLOT}, {META_PARAMS_FILE}, {SUMMARY_FILE}, {CHECKPOINT_DIR}/. "
      f"Evaluate the rule with: disco-eval --config.rule={export_path}"
  )
  return summary


def train(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any]:
  """Builds, runs (or resumes) and writes one meta-training run; returns the
  summary.

  Holds the lock of the output folder throughout (in process 0): a second
  process on the folder is refused with one line.

  Raises:
    UsageError: for bad settings (before anything is trained), or an output
      folder another process writes.
    common.ResourceError: the disk is full or the device memory exhausted.
  """
  plan = build(config)
  out = plan.output_dir
  lock = None
  if distributed.is_main():
    lock = common.claim_output_dir(out, PROGRAM)
  try:
    _check_free(out, config.resume)  # again, now that no other process writes
    with common.resource_errors(
        f"continue with --config.resume=True --config.output_dir={out} (the "
        "same command otherwise)."
    ):
      return write(plan, run(plan, log, progress), log)
  finally:
    if lock is not None:
      lock.release()


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` every setting
  of the rule the command line (or the config file) names, with its
  default, so that ``--config.hyper_params.KEY=VALUE`` and
  ``--config.rule_kwargs.KEY=VALUE`` may set any of them and no other."""
  name = common.override_value(argv, "rule") or config.get("rule")
  try:
    settings = rule_registry.default_settings(str(name))
  except ValueError:  # build() reports it
    return
  rule_settings.prepare(config, settings)


def main() -> None:
  """Console entry point (``disco-meta-train``)."""
  common.run_launcher(
      PROGRAM, __doc__, CONFIG_NAME, train, prepare=prepare_config
  )


if __name__ == "__main__":
  main()
