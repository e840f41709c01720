"""A meta-training run built from its settings: ``build`` makes the agent
groups, the estimator's population, the initial meta-parameters and the held-out
validation, checking what only the machine can tell (devices, observations,
checkpoints)."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import json
from pathlib import Path
import sys
from typing import Any

import jax
from ml_collections import config_dict

from disco import agent as agent_lib
from disco import compile_cache
from disco import distributed
from disco import errors
from disco import ops
from disco import program_cache
from disco import run_folders
from disco import startup
from disco.environments import reference_scores
from disco.environments import registry as env_registry
from disco.evaluation import outputs as eval_outputs
from disco.meta import estimator_registry
from disco.meta import level_sampler_registry
from disco.meta import level_samplers
from disco.meta import meta_step
from disco.meta import rule_files
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import validation as validation_lib
from disco.meta import validation_record
from disco.meta import validation_settings
from disco.meta import value_function
from disco.update_rules import agent_settings
from disco.update_rules import registry as rule_registry

# ------------------------------------------------------------ building ----


@dataclasses.dataclass(frozen=True)
class MetaTrainPlan:
  """Everything a run needs, built from its settings."""

  run_settings: settings_lib.MetaTrainSettings
  groups: list[meta_step.AgentGroup]
  population: meta_step.MetaStepProgram
  meta_params: Any  # initial meta-parameters (None when resuming)
  # Held-out validation in this process (None: off, validation.every=0).
  validation: validation_lib.Validation | None = None

  @property
  def config(self) -> config_dict.ConfigDict:
    return self.run_settings.config

  @property
  def settings(self) -> agent_settings.AgentSettings:
    """The rule's agent settings."""
    return self.run_settings.agent

  @property
  def output_dir(self) -> Path:
    return self.run_settings.output_dir

  @property
  def rule(self):
    return self.groups[0].agent.rule

  def resolved_config(self) -> dict[str, Any]:
    """The config as saved with the run (``output_dir`` made explicit)."""
    resolved = self.config.to_dict()
    resolved["output_dir"] = str(self.output_dir)
    return run_folders.to_jsonable(resolved)

  def groups_text(self) -> str:
    return ", ".join(f"{g.num_agents} x {g.name}" for g in self.groups)


def _group_name(env_name: str, env) -> str:
  if hasattr(env, "rows") and hasattr(env, "columns"):
    return f"{env_name}-{env.rows}x{env.columns}"
  return env_name


def _make_group(
    spec: settings_lib.GroupSpec,
    where: str,
    s: settings_lib.MetaTrainSettings,
    value_fn: value_function.ValueFunction,
    num_updates: int | None,
) -> meta_step.AgentGroup:
  try:
    env = env_registry.make_env(spec.env, s.batch_size, **spec.env_settings)
    # Checked against the observations (and sized by them, for index
    # observations): each group gets its own agent and value function.
    observation_spec = env.observation_spec()
    agent = agent_lib.make_agent(
        s.agent,
        action_spec=env.action_spec(),
        num_updates=num_updates,
        observation_spec=observation_spec,
    )
    group_value_fn = value_fn.with_observation(observation_spec)
  except (ValueError, TypeError) as e:
    raise errors.UsageError(
        f"Bad settings in config.{where}: {errors.one_line(e)}"
    ) from None
  return meta_step.AgentGroup(
      name=_group_name(spec.env, env),
      env=env,
      agent=agent,
      value_fn=group_value_fn,
      num_agents=spec.num_agents,
      weight=spec.weight,
  )


def _make_groups(
    s: settings_lib.MetaTrainSettings,
) -> list[meta_step.AgentGroup]:
  """The population's groups; agents annealing their learning rate do so over
  the lifetime the estimator fixes (ES)."""
  value_fn = value_function.ValueFunction(s.value_fn)
  agent_updates = estimator_registry.get_entry(s.estimator).agent_updates
  lifetime = None
  if agent_updates is not None:
    lifetime = agent_updates(s.estimator_settings)
  groups, names = [], set()
  for i, spec in enumerate(s.groups):
    group = _make_group(spec, f"population[{i}]", s, value_fn, lifetime)
    name, k = group.name, 1
    while name in names:
      k += 1
      name = f"{group.name}-{k}"
    names.add(name)
    groups.append(dataclasses.replace(group, name=name))
  return groups


def _reference_agent(s: settings_lib.MetaTrainSettings, env) -> agent_lib.Agent:
  """GROOVE's reference agent for a group: the reference rule with the
  meta-trained agents' network and optimiser."""
  try:
    settings = rule_registry.default_settings(
        s.level_sampler.reference_rule
    ).replace(
        network=s.agent.network,
        learning_rate=s.agent.learning_rate,
        max_abs_update=s.agent.max_abs_update,
        loss_mask=s.agent.loss_mask,
        # A constant learning rate: lifetimes differ and restart mid-run.
        anneal_learning_rate=False,
    )
    return agent_lib.make_agent(
        settings,
        action_spec=env.action_spec(),
        observation_spec=env.observation_spec(),
    )
  except (TypeError, ValueError) as e:
    raise errors.UsageError(
        f"config.level_sampler.reference_rule: {errors.one_line(e)}"
    ) from None


def _attach_level_samplers(s: settings_lib.MetaTrainSettings, groups):
  """The groups with ``config.level_sampler``'s samplers."""
  if s.level_sampler.kind == level_samplers.NONE:
    return groups
  out = []
  for g, spec in zip(groups, s.groups, strict=True):
    if not getattr(g.env, "has_levels", False):
      raise errors.UsageError(
          f"config.level_sampler needs environments with levels, but "
          f"{spec.env!r} has none; use "
          f"{', '.join(env_registry.level_env_names())} or set "
          "level_sampler.kind='none'."
      )
    sampler = level_sampler_registry.make_level_sampler(s.level_sampler, g.env)
    reference = None
    if sampler.uses_reference:
      reference = _reference_agent(s, g.env)
    out.append(
        dataclasses.replace(g, level_sampler=sampler, reference_agent=reference)
    )
  return out


def _devices(num_devices: int) -> list[jax.Device]:
  """The first ``num_devices`` devices of every process (all if 0)."""
  available = len(jax.local_devices())
  if num_devices > available:
    raise errors.UsageError(
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


def _normalizers(s: settings_lib.MetaTrainSettings, groups) -> dict[str, tuple]:
  """``{group: (random return, reference - random)}`` for groups whose
  environment has reference scores."""
  out = {}
  for g, spec in zip(groups, s.groups, strict=True):
    key = reference_scores.env_key(spec.env, spec.env_settings)
    try:
      out[g.name] = reference_scores.anchors(key)
    except ValueError:  # no entry (MissingReferenceError is a ValueError)
      continue
  return out


# Settings that never reach the meta-step program: the run's folder, its
# bookkeeping and the validation (programs of its own).
_HOST_SETTINGS = (
    "output_dir",
    "resume",
    "compilation_cache",
    "tracking",
    "log_every",
    "checkpoint_every",
    "keep_checkpoints",
    "num_meta_steps",
    "max_consecutive_skips",
    "validation",
)


def _program_key(s: settings_lib.MetaTrainSettings) -> str:
  """What shapes the meta-step program besides its arguments and disco's code:
  the other settings and the sources of ``config.imports``'s modules."""
  config = {
      k: v for k, v in s.config.to_dict().items() if k not in _HOST_SETTINGS
  }
  imported = [
      getattr(sys.modules.get(name.strip()), "__file__", None) or name
      for name in str(s.config.imports).split(",")
      if name.strip()
  ]
  return json.dumps(
      dict(
          config=run_folders.to_jsonable(config),
          imports=program_cache.source_digest(imported),
      ),
      sort_keys=True,
  )


def _make_population(s: settings_lib.MetaTrainSettings, groups, devices):
  """The meta-step program of the run's estimator."""
  return estimator_registry.get_entry(s.estimator).make(
      groups,
      s.population,
      s.estimator_settings,
      s.meta_optimizer.make(),
      devices,
      _normalizers(s, groups),
  )


def build(
    config: settings_lib.MetaTrainSettings | config_dict.ConfigDict,
) -> MetaTrainPlan:
  """Builds the groups, population and initial meta-parameters of a run (not its
  state: ``initial_state``) from its settings (or a config, checked first).

  Raises:
    UsageError: any bad setting, in one line.
  """
  if isinstance(config, settings_lib.MetaTrainSettings):
    startup.start(
        settings_lib.PROGRAM, config.distributed, config.config.imports
    )
  else:
    startup.start(
        settings_lib.PROGRAM,
        distributed.settings(config.distributed),
        config.imports,
    )
  s = settings_lib.as_settings(config)
  # Early, before anything compiles; again under the writer's lock.
  run_folders.check_run_folder(
      s.output_dir, run_folder.RUN_KIND, resume=s.resume
  )
  devices = _devices(s.num_devices)
  groups = _attach_level_samplers(s, _make_groups(s))
  bad = [
      f"{g.name}: {g.num_agents}" for g in groups if g.num_agents % len(devices)
  ]
  if bad and estimator_registry.get_entry(s.estimator).shards_agents:
    where = run_folders.processes_text("of")
    raise errors.UsageError(
        f"Every group's num_agents must split evenly over the "
        f"{len(devices)} device(s){where} ({', '.join(bad)}): use multiples "
        f"of {len(devices)} or set config.num_devices."
    )
  try:
    population = _make_population(s, groups, devices)
  except ValueError as e:
    raise errors.UsageError(errors.one_line(e)) from None
  resuming = s.resume and run_folder.checkpoint_steps(
      s.output_dir / run_folder.CHECKPOINT_DIR
  )
  meta_params = None
  if not resuming:
    meta_params = rule_files.load_initial_meta_params(
        s.init_meta_params, groups[0].agent.rule, s.init_seed, s.rule
    )
  elif s.init_meta_params not in (rule_files.RANDOM, rule_files.DISCO103):
    # Fail early on a bad value even though the checkpoint supersedes it.
    rule_files.check_init_path(s.init_meta_params)
  store = program_cache.store(compile_cache.enabled_folder())
  if store is not None:
    population.keep_traced(store, _program_key(s))
  plan = MetaTrainPlan(
      run_settings=s,
      groups=groups,
      population=population,
      meta_params=meta_params,
  )
  validation = make_validation(plan)
  if validation is not None and not validation.settings.in_process:
    validation = None  # checked for disco-validate; off in this process
  return dataclasses.replace(plan, validation=validation)


def exporter(plan: MetaTrainPlan) -> Callable[..., Path]:
  """``export(path, meta_params, meta_step, **extra)``: writes meta-parameters
  as this run's ``meta_params.npz``."""
  return functools.partial(
      _export_run_params,
      settings=plan.settings,
      init=plan.run_settings.init_meta_params,
      groups=plan.groups,
  )


def _export_run_params(
    path, meta_params, meta_step, *, settings, init, groups, **extra
) -> Path:
  return rule_files.export_meta_params(
      path,
      meta_params,
      settings,
      meta_step,
      source=settings_lib.PROGRAM,
      init_meta_params=init,
      population=[dict(name=g.name, num_agents=g.num_agents) for g in groups],
      **extra,
  )


def make_validation(
    plan: MetaTrainPlan, block: Any = None
) -> validation_lib.Validation | None:
  """The run's held-out validation (``block``: its settings, default the run's);
  None without held-out environments.

  Raises:
    UsageError: bad settings, an environment or budget that cannot run, or rows
      in the run folder made with other settings.
  """
  if block is None:
    settings = plan.run_settings.validation
  else:
    settings = validation_settings.parse_settings(block)
  if not settings.envs:
    return None
  if settings.in_process and jax.process_count() > 1:
    raise errors.UsageError(
        "config.validation.every > 0 validates in the meta-training "
        "process, which a multi-process run does not support: set "
        "validation.every=0 and follow the checkpoints with disco-validate "
        f"{plan.output_dir} --follow."
    )
  validator = validation_lib.Validator(
      settings, plan.settings, plan.rule, plan.output_dir
  )
  record = validation_record.Record(
      plan.output_dir, settings, exporter(plan), write=distributed.is_main()
  )
  return validation_lib.Validation(validator, record)


def abstract_state(
    population: meta_step.MetaStepProgram, rule
) -> meta_step.MetaTrainState:
  """Shapes, dtypes and shardings of the population's state (no compute)."""
  meta_params = rule.meta_param_shapes()
  shapes = jax.eval_shape(population.init, jax.random.PRNGKey(0), meta_params)

  def placed(sharding, subtree):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        subtree,
    )

  return jax.tree.map(placed, population.state_shardings(), shapes)


def initial_state(plan: MetaTrainPlan) -> meta_step.MetaTrainState:
  """The state of a new run (agents from ``config.seed``)."""
  (seed,) = ops.prng_seeds([plan.run_settings.seed])
  rng = jax.jit(jax.random.PRNGKey)(seed)  # one program, not two
  return plan.population.init(rng, plan.meta_params)


def input_files(plan: MetaTrainPlan) -> dict[str, dict[str, str]]:
  """The files a new run reads, by digest: ``init_meta_params`` if a file, and
  each group's environment files (``population[<i>].env_settings.<setting>``).

  Raises:
    UsageError: a file cannot be read.
  """
  s = plan.run_settings
  paths = {}
  if s.init_meta_params not in (rule_files.RANDOM, rule_files.DISCO103):
    paths["init_meta_params"] = s.init_meta_params
  for i, group in enumerate(s.groups):
    paths.update(
        eval_outputs.env_input_paths(
            group.env_settings, f"population[{i}].env_settings."
        )
    )
  return eval_outputs.file_digests(paths)


def write_config(plan: MetaTrainPlan) -> None:
  """Creates ``output_dir`` and writes ``config.json``, whose ``run`` record
  holds the input files' digests."""
  out = run_folders.make_dir(plan.output_dir)
  run_folders.write_json(
      out / run_folder.CONFIG_FILE,
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
              **run_folders.run_record(),
              **{eval_outputs.INPUT_FILES: input_files(plan)},
          ),
      ),
  )
