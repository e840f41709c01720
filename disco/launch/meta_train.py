"""Meta-training launcher: discover or fine-tune a Disco rule on a population.

  python -m disco.launch.meta_train --config.num_meta_steps=100 \
      --config.output_dir=runs/my-rule

(or ``disco-meta-train ...``). The settings live in ``configs/meta_train.py``;
pass ``--config=<file>`` for another config file. The run writes into
``output_dir``:

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
* ``summary.json``     final metrics and timings.

Bad input ends the program with a one-line message on stderr and exit status
2 before anything is trained.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import runpy
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from absl import app
from absl import flags
from absl import logging
import jax
from jax.sharding import NamedSharding, PartitionSpec as P
from ml_collections import config_dict
import numpy as np
import optax
import tqdm

import disco
from disco import configs
from disco import weights as weights_lib
from disco.environments import registry
from disco.launch import common
from disco.meta import checkpoints as ckpt_lib
from disco.meta import history as history_lib
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import population as population_lib
from disco.value_fns import value_function

UsageError = common.UsageError

DEFAULT_CONFIG = (Path(__file__).resolve().parents[2] / "configs" /
                  "meta_train.py")
PROGRAM = "disco-meta-train"
RULE = "disco"
RANDOM, DISCO103 = "random", "disco103"
META_OPTIMIZERS = ("adam", "sgd", "rmsprop")
CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = ("config.json", "metrics.csv",
                                           "summary.json")
REWARDS_PLOT, LOSS_PLOT = "rewards.png", "meta_loss.png"
META_PARAMS_FILE = "meta_params.npz"
# Settings a resumed run may change: they do not alter the computation.
RESUMABLE_KEYS = ("num_meta_steps", "checkpoint_every", "keep_checkpoints",
                  "resume", "log_every", "output_dir")


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/meta_train.py``."""
  return runpy.run_path(str(DEFAULT_CONFIG))["get_config"]()


# ------------------------------------------------------------ building ----


@dataclasses.dataclass
class Plan:
  """Everything a run needs, built and checked from a config."""

  config: config_dict.ConfigDict
  settings: config_dict.ConfigDict  # the rule's (agent) settings
  groups: list[population_lib.AgentGroup]
  population: population_lib.Population
  meta_params: Any  # initial meta-parameters (None when resuming)
  output_dir: Path

  @property
  def rule(self):
    return self.groups[0].agent.rule

  def resolved_config(self) -> dict[str, Any]:
    """The config as saved with the run (``output_dir`` made explicit)."""
    resolved = self.config.to_dict()
    resolved["output_dir"] = str(self.output_dir)
    return _to_jsonable(resolved)


def _check_config_keys(config: config_dict.ConfigDict) -> None:
  expected = set(default_config().keys())
  keys = set(config.keys())
  if keys - expected:
    raise UsageError(
        f"Unknown config key(s) {sorted(keys - expected)}; valid keys: "
        f"{', '.join(sorted(expected))}.")
  if expected - keys:
    raise UsageError(
        f"The config lacks key(s) {sorted(expected - keys)}: start from "
        f"{DEFAULT_CONFIG}.")


def _int(value, name: str, minimum: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise UsageError(f"config.{name} must be an integer, got {value!r}.")
  if value < minimum:
    raise UsageError(f"config.{name} must be >= {minimum}, got {value}.")
  return int(value)


def _bool(value, name: str) -> bool:
  if not isinstance(value, bool):
    raise UsageError(f"config.{name} must be True or False, got {value!r}.")
  return value


def _as_dict(value, name: str) -> dict:
  if isinstance(value, config_dict.ConfigDict):
    return value.to_dict()
  if isinstance(value, dict):
    return dict(value)
  raise UsageError(f"config.{name} must be a dict, got {value!r}.")


def _group_name(env_name: str, env) -> str:
  if hasattr(env, "rows") and hasattr(env, "columns"):
    return f"{env_name}-{env.rows}x{env.columns}"
  return env_name


def _make_groups(config, settings, value_fn) -> list[population_lib.AgentGroup]:
  population = config.population
  if isinstance(population, (dict, config_dict.ConfigDict)):
    population = (population,)
  if not isinstance(population, (list, tuple)) or not population:
    raise UsageError(
        "config.population must be a non-empty tuple of groups like "
        "{'env': 'catch', 'env_settings': {'rows': 5, 'columns': 5}, "
        f"'num_agents': 2}}, got {population!r}.")
  batch_size = _int(config.batch_size, "batch_size", 1)
  groups, names = [], set()
  for i, spec in enumerate(population):
    where = f"population[{i}]"
    spec = _as_dict(spec, where)
    unknown = set(spec) - {"env", "env_settings", "num_agents"}
    if unknown or "env" not in spec:
      raise UsageError(
          f"config.{where} must have keys env, env_settings (optional) and "
          f"num_agents (optional, default 1); got {sorted(spec)}.")
    env_name = spec["env"]
    if env_name not in registry.ENV_NAMES:
      raise UsageError(f"Unknown env {env_name!r} in config.{where}; valid "
                       f"envs: {', '.join(registry.ENV_NAMES)}.")
    if not registry.is_jittable(env_name):
      jittable = [n for n in registry.ENV_NAMES if registry.is_jittable(n)]
      raise UsageError(
          f"env {env_name!r} (config.{where}) runs on the host; meta-training "
          f"generates rollouts on device and needs a jittable env: "
          f"{', '.join(jittable)}.")
    num_agents = _int(spec.get("num_agents", 1), f"{where}.num_agents", 1)
    env_settings = _as_dict(spec.get("env_settings") or {},
                            f"{where}.env_settings")
    try:
      env = registry.make_env(env_name, batch_size, **env_settings)
      agent = configs.make_agent(settings, env.num_actions)
    except (ValueError, TypeError) as e:
      raise UsageError(f"Bad settings in config.{where}: "
                       f"{common.one_line(e)}") from None
    name = base = _group_name(env_name, env)
    k = 1
    while name in names:
      k += 1
      name = f"{base}-{k}"
    names.add(name)
    groups.append(population_lib.AgentGroup(
        name=name, env=env, agent=agent, value_fn=value_fn,
        num_agents=num_agents))
  return groups


def _meta_optimizer(name: str, learning_rate) -> optax.GradientTransformation:
  if isinstance(learning_rate, bool) or not isinstance(
      learning_rate, (int, float)) or not learning_rate > 0:
    raise UsageError(f"config.meta_learning_rate must be a number > 0, got "
                     f"{learning_rate!r}.")
  if name not in META_OPTIMIZERS:
    raise UsageError(f"Unknown meta_optimizer {name!r}; valid: "
                     f"{', '.join(META_OPTIMIZERS)}.")
  return getattr(optax, name)(float(learning_rate))


def _output_dir(config) -> Path:
  if config.output_dir:
    out = Path(config.output_dir).expanduser()
  else:
    if config.resume:
      raise UsageError("config.resume=True needs the output_dir of the run to "
                       "continue: pass --config.output_dir=<folder>.")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y%m%d-%H%M%S")
    out = Path("runs") / f"meta-{stamp}"
    suffix = 1
    while out.exists():
      suffix += 1
      out = Path("runs") / f"meta-{stamp}-{suffix}"
  if out.exists() and not out.is_dir():
    raise UsageError(f"output_dir {out} exists and is not a folder.")
  holds_run = (out / CONFIG_FILE).exists() or bool(
      _checkpoint_steps(out / CHECKPOINT_DIR))
  if holds_run and not config.resume:
    raise UsageError(
        f"output_dir {out} already holds a meta-training run: pass "
        "--config.resume=True to continue it, or choose another folder.")
  return out


def _checkpoint_steps(directory: Path) -> list[int]:
  if not directory.is_dir():
    return []
  return sorted(int(p.name) for p in directory.iterdir()
                if p.is_dir() and p.name.isdigit())


def load_initial_meta_params(init: str, rule, init_seed: int):
  """``'random'`` (``rule.init_params(PRNGKey(init_seed))``), ``'disco103'``
  or the path of a ``.npz`` of Disco meta-parameters; checked against the
  rule's structure.

  Raises:
    UsageError: unknown value, missing or mismatching file.
  """
  init = str(init).strip()
  expected = jax.eval_shape(rule.init_params, jax.random.PRNGKey(0))
  if init == RANDOM:
    return jax.jit(rule.init_params)(jax.random.PRNGKey(init_seed))
  if init == DISCO103:
    try:
      return weights_lib.load_disco103(expected=expected)
    except weights_lib.WeightsError as e:
      raise UsageError(f"Cannot load Disco103: {common.one_line(e)}") from None
  path = Path(init).expanduser()
  if not init or not (init.endswith(".npz") or path.exists()):
    raise UsageError(
        f"config.init_meta_params={init!r} is neither '{RANDOM}', "
        f"'{DISCO103}' nor the path of a .npz file.")
  if not path.is_file():
    raise UsageError(f"Meta-parameter file {path} (config.init_meta_params) "
                     "does not exist: check the path.")
  try:
    metadata = weights_lib.load_metadata(path)
    if metadata.get("kind") == common.AGENT_PARAMS_KIND:
      raise UsageError(f"{path} holds trained agent parameters, not a rule's "
                       "meta-parameters.")
    if metadata.get("rule", RULE) != RULE:
      raise UsageError(
          f"{path} holds meta-parameters of rule {metadata['rule']!r}; "
          f"meta-training learns a {RULE!r} rule.")
    return weights_lib.load_meta_params(path, expected)
  except weights_lib.WeightsError as e:
    raise UsageError(f"config.init_meta_params: {common.one_line(e)}"
                     ) from None


def build(config: config_dict.ConfigDict,
          log: Callable[[str], None] = print) -> Plan:
  """Checks ``config`` and builds the groups, population and initial
  meta-parameters (not the state; see ``initial_state``).

  Raises:
    UsageError: for any bad setting, with a one-line explanation.
  """
  del log
  _check_config_keys(config)
  rollout_len = _int(config.rollout_len, "rollout_len", 2)
  inner_steps = _int(config.inner_steps, "inner_steps", 1)
  _int(config.batch_size, "batch_size", 1)
  _int(config.num_meta_steps, "num_meta_steps", 1)
  lifetime = _int(config.lifetime_meta_steps, "lifetime_meta_steps", 0)
  num_devices = _int(config.num_devices, "num_devices", 0)
  _int(config.checkpoint_every, "checkpoint_every", 0)
  _int(config.keep_checkpoints, "keep_checkpoints", 1)
  _int(config.log_every, "log_every", 1)
  init_seed = _int(config.init_seed, "init_seed", 0)
  _int(config.seed, "seed", 0)
  _bool(config.resume, "resume")
  remat = _bool(config.remat_inner_steps, "remat_inner_steps")
  max_unrolled = _int(config.max_unrolled_inner_steps,
                      "max_unrolled_inner_steps", 0)
  if isinstance(config.entropy_cost, bool) or not isinstance(
      config.entropy_cost, (int, float)):
    raise UsageError(f"config.entropy_cost must be a number, got "
                     f"{config.entropy_cost!r}.")
  meta_optimizer = _meta_optimizer(config.meta_optimizer,
                                   config.meta_learning_rate)
  output_dir = _output_dir(config)

  # Devices.
  available = jax.devices()
  if num_devices > len(available):
    raise UsageError(f"config.num_devices={num_devices} but only "
                     f"{len(available)} device(s) are available.")
  devices = available[:num_devices] if num_devices else available

  # The rule and the agents' settings.
  settings = configs.get_settings(RULE)
  agent_cfg = _as_dict(config.agent, "agent")
  unknown = set(agent_cfg) - {"network", "learning_rate", "max_abs_update"}
  if unknown:
    raise UsageError(f"Unknown key(s) {sorted(unknown)} in config.agent; "
                     "valid: network, learning_rate, max_abs_update.")
  try:
    settings.network = {**settings.network.to_dict(),
                        **_as_dict(agent_cfg.get("network", {}),
                                   "agent.network")}
    for key in ("learning_rate", "max_abs_update"):
      if key in agent_cfg:
        settings[key] = float(agent_cfg[key])
    configs.make_net_config(settings.network.to_dict())
  except (TypeError, ValueError, KeyError) as e:
    raise UsageError(f"Bad agent settings: {common.one_line(e)}") from None
  vf_cfg = _as_dict(config.value_fn, "value_fn")
  try:
    if "dense" in vf_cfg:
      vf_cfg["dense"] = tuple(vf_cfg["dense"])
    value_fn = value_function.ValueFunction(
        value_function.ValueFnConfig(**vf_cfg))
  except TypeError as e:
    valid = [f.name for f in dataclasses.fields(value_function.ValueFnConfig)]
    raise UsageError(f"Bad value_fn settings ({common.one_line(e)}); valid "
                     f"keys: {', '.join(valid)}.") from None

  groups = _make_groups(config, settings, value_fn)
  bad = [f"{g.name}: {g.num_agents}" for g in groups
         if g.num_agents % len(devices)]
  if bad:
    raise UsageError(
        f"Every group's num_agents must split evenly over the "
        f"{len(devices)} device(s) ({', '.join(bad)}): use multiples of "
        f"{len(devices)} or set config.num_devices.")
  pop_config = population_lib.PopulationConfig(
      rollout_len=rollout_len, inner_steps=inner_steps,
      lifetime_meta_steps=lifetime,
      outer=meta_gradient_lib.OuterLossConfig(
          entropy_cost=float(config.entropy_cost), remat_inner_steps=remat,
          max_unrolled_inner_steps=max_unrolled))
  try:
    population = population_lib.Population(groups, pop_config,
                                            meta_optimizer, devices)
  except ValueError as e:
    raise UsageError(common.one_line(e)) from None
  rule = groups[0].agent.rule
  resuming = config.resume and _checkpoint_steps(output_dir / CHECKPOINT_DIR)
  meta_params = None if resuming else load_initial_meta_params(
      config.init_meta_params, rule, init_seed)
  if resuming and str(config.init_meta_params) not in (RANDOM, DISCO103):
    # Fail early on a bad value even though the checkpoint supersedes it.
    path = Path(str(config.init_meta_params)).expanduser()
    if not path.is_file():
      raise UsageError(f"Meta-parameter file {path} "
                       "(config.init_meta_params) does not exist.")
  return Plan(config=config, settings=settings, groups=groups,
              population=population, meta_params=meta_params,
              output_dir=output_dir)


def abstract_state(population: population_lib.Population, rule
                   ) -> population_lib.MetaTrainState:
  """Shapes, dtypes and shardings of the population's state (no compute)."""
  meta_params = jax.eval_shape(rule.init_params, jax.random.PRNGKey(0))
  shapes = jax.eval_shape(population.init, jax.random.PRNGKey(0), meta_params)
  replicated = NamedSharding(population.mesh, P())
  sharded = NamedSharding(population.mesh, P(population_lib.AXIS))

  def with_sharding(sharding):
    return lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

  return shapes.replace(
      meta_params=jax.tree.map(with_sharding(replicated), shapes.meta_params),
      meta_opt_state=jax.tree.map(with_sharding(replicated),
                                  shapes.meta_opt_state),
      step=with_sharding(replicated)(shapes.step),
      agents=jax.tree.map(with_sharding(sharded), shapes.agents))


def initial_state(plan: Plan) -> population_lib.MetaTrainState:
  """The state of a new run (agents from ``config.seed``)."""
  return plan.population.init(jax.random.PRNGKey(plan.config.seed),
                              plan.meta_params)


def export_meta_params(path: str | Path, meta_params, settings, meta_step: int,
                       **extra) -> Path:
  """Saves meta-parameters with the metadata ``disco-eval`` resolves them by
  (``rule``, ``rule_kwargs``, ``meta_step`` and any ``extra``)."""
  metadata = dict(_to_jsonable(extra), rule=settings.rule,
                  rule_kwargs=_to_jsonable(settings.rule_kwargs.to_dict()),
                  meta_step=int(meta_step))
  return weights_lib.save_meta_params(
      path, jax.tree.map(np.asarray, jax.device_get(meta_params)),
      metadata=metadata)


# ------------------------------------------------------------- running ----


def _to_jsonable(x):
  if isinstance(x, config_dict.ConfigDict):
    x = x.to_dict()
  if isinstance(x, dict):
    return {str(k): _to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_to_jsonable(v) for v in x]
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  if isinstance(x, Path):
    return str(x)
  return x


def _write_json(path: Path, data) -> None:
  path.write_text(json.dumps(_to_jsonable(data), indent=2, sort_keys=True)
                  + "\n")


def _fmt(x, digits: int = 3) -> str:
  return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def _resume(plan: Plan, manager: ckpt_lib.CheckpointManager, log):
  """``(state, history)`` from the latest checkpoint, or ``None``."""
  out, config = plan.output_dir, plan.resolved_config()
  saved_config = None
  if (out / CONFIG_FILE).is_file():
    try:
      saved_config = json.loads((out / CONFIG_FILE).read_text())["config"]
    except (ValueError, KeyError, TypeError) as e:
      raise UsageError(f"{out / CONFIG_FILE} is unreadable ({e}): start a new "
                       "output folder.") from None
  if manager.latest_step() is None:
    if saved_config is not None:
      _check_same_config(saved_config, config, out / CONFIG_FILE)
    log(f"No checkpoint in {manager.directory}: starting a new run.")
    return None
  try:
    restored = manager.restore(abstract_state(plan.population, plan.rule))
  except ckpt_lib.CheckpointError as e:
    raise UsageError(common.one_line(e)) from None
  if restored.config is not None:
    _check_same_config(restored.config, config, restored.path)
  if restored.step > plan.config.num_meta_steps:
    raise UsageError(
        f"The latest checkpoint ({restored.path}) is at meta-step "
        f"{restored.step}, beyond num_meta_steps={plan.config.num_meta_steps}:"
        " raise num_meta_steps, or start a new output folder.")
  log(f"Resuming from {restored.path} (meta-step {restored.step}).")
  return restored.state, history_lib.MetricsHistory(restored.history)


def _check_same_config(saved: dict, current: dict, where) -> None:
  diff = ckpt_lib.config_differences(saved, current, RESUMABLE_KEYS)
  if diff:
    raise UsageError(
        f"Cannot resume: the config differs from the run in {where} "
        f"({'; '.join(diff)}). Only {', '.join(RESUMABLE_KEYS)} may change "
        "when resuming: use the run's settings, or start a new output folder.")


def train(config: config_dict.ConfigDict,
          log: Callable[[str], None] = print,
          progress: bool = True) -> dict[str, Any]:
  """Builds and runs (or resumes) one meta-training run; returns the summary.

  Raises:
    UsageError: for bad settings (before anything is trained).
  """
  plan = build(config, log)
  out = plan.output_dir
  num_steps = int(config.num_meta_steps)
  try:
    out.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UsageError(f"Cannot create output_dir {out}: {e}.") from None
  manager = ckpt_lib.CheckpointManager(out / CHECKPOINT_DIR,
                                       keep=int(config.keep_checkpoints))
  resumed = _resume(plan, manager, log) if config.resume else None
  resolved = plan.resolved_config()
  devices = plan.population.devices
  _write_json(out / CONFIG_FILE, dict(
      config=resolved,
      rule_settings=plan.settings.to_dict(),
      run=dict(groups=[dict(name=g.name, num_agents=g.num_agents,
                            batch_size=g.env.batch_size) for g in plan.groups],
               disco_version=disco.__version__, jax_version=jax.__version__,
               devices=[str(d) for d in devices])))
  if resumed is None:
    state = initial_state(plan)
    history = history_lib.MetricsHistory()
  else:
    state, history = resumed
  csv_path = out / METRICS_FILE
  history.write_csv(csv_path)

  start = int(jax.device_get(state.step))
  groups_text = ", ".join(f"{g.num_agents} x {g.name}" for g in plan.groups)
  log(f"Meta-training a {RULE} rule (init: {config.init_meta_params}) on "
      f"{groups_text} over {len(devices)} device(s); {config.batch_size} envs "
      f"per agent, rollouts of {config.rollout_len}, {config.inner_steps} "
      f"inner step(s); meta-steps {start} -> {num_steps}; writing to {out}")

  def save(state) -> Path:
    return manager.save(state, history=history.rows, config=resolved,
                        extra=dict(csv_rows=len(history)))

  step_times: list[float] = []
  last_row: dict[str, Any] = history.rows[-1] if len(history) else {}
  wall_start = time.perf_counter()
  completed = False
  try:
    with tqdm.tqdm(total=num_steps, initial=start, unit="meta-step",
                   desc="meta-train", disable=not progress, file=sys.stderr,
                   dynamic_ncols=True) as bar:
      for k in range(start + 1, num_steps + 1):
        t0 = time.perf_counter()
        new_state, logs = plan.population.step(state)
        jax.block_until_ready(new_state.step)
        state = new_state
        step_times.append(time.perf_counter() - t0)
        if k % config.log_every == 0 or k == num_steps:
          last_row = history_lib.metrics_row(k, logs, plan.groups,
                                             plan.population.config.rollout_len)
          history.append_csv(csv_path, last_row)
          bar.set_postfix(
              s_per_step=f"{step_times[-1]:.2f}",
              meta_loss=_fmt(last_row.get("meta_loss")),
              reward=_fmt(last_row.get("rewards")), refresh=False)
        bar.update(1)
        if config.checkpoint_every and k % config.checkpoint_every == 0:
          save(state)
    completed = True
  finally:
    # The exit save: also on Ctrl-C, SIGTERM or an error in a meta-step (the
    # state is then the last completed one).
    if int(jax.device_get(state.step)) > start:
      try:
        path = save(state)
        if not completed:
          log(f"Interrupted at meta-step {int(state.step)}; saved {path}. "
              "Continue with --config.resume=True "
              f"--config.output_dir={out}.")
      except Exception as e:  # pylint: disable=broad-except
        log(f"Warning: the exit checkpoint failed: {common.one_line(e)}")
    manager.close()
  wall_time = time.perf_counter() - wall_start

  # Outputs.
  final_step = int(jax.device_get(state.step))
  export_path = export_meta_params(
      out / META_PARAMS_FILE, state.meta_params, plan.settings, final_step,
      source=PROGRAM, init_meta_params=str(config.init_meta_params),
      population=[dict(name=g.name, num_agents=g.num_agents)
                  for g in plan.groups])
  if len(history):
    history.plot(out / REWARDS_PLOT, out / LOSS_PLOT,
                 title=f"Meta-training on {groups_text}")
  if len(step_times) > 1:
    steady = float(np.median(step_times[1:]))
    compile_time = max(0.0, step_times[0] - steady)
  else:
    steady = float(step_times[0]) if step_times else None
    compile_time = None
  summary = dict(
      output_dir=str(out), meta_steps=final_step, resumed_from=start or None,
      steps_this_run=len(step_times), wall_time_s=wall_time,
      compile_time_s=compile_time, seconds_per_meta_step=steady,
      final=dict((k, last_row.get(k)) for k in history_lib.MAIN_COLUMNS
                 if k in last_row),
      meta_params_file=str(export_path),
      checkpoints=[str(p) for p in
                   map(manager.path, manager.all_steps())])
  _write_json(out / SUMMARY_FILE, summary)
  log(f"Meta-step {final_step}: meta loss {_fmt(last_row.get('meta_loss'))}, "
      f"reward per step {_fmt(last_row.get('rewards'))} (positive "
      f"{_fmt(last_row.get('pos_reward_frac'))}, negative "
      f"{_fmt(last_row.get('neg_reward_frac'))}); "
      f"{_fmt(steady, 2)} s per meta-step, compile "
      f"{_fmt(compile_time, 1)} s, wall {wall_time:.1f} s.")
  log(f"Outputs in {out}: {CONFIG_FILE}, {METRICS_FILE}, {REWARDS_PLOT}, "
      f"{LOSS_PLOT}, {META_PARAMS_FILE}, {SUMMARY_FILE}, {CHECKPOINT_DIR}/. "
      f"Evaluate the rule with: disco-eval --config.rule={export_path}")
  return summary


# ------------------------------------------------------- command line ----


def parse_flags(argv: Sequence[str],
                flag_values: flags.FlagValues | None = None) -> list[str]:
  """Parses ``argv`` with ``--config`` (see ``common.parse_config_flags``)."""
  return common.parse_config_flags(
      argv, DEFAULT_CONFIG,
      "Meta-training config file (default: configs/meta_train.py); "
      "override its values with --config.<key>=<value>.",
      flag_values)


def _fail(message: Any) -> None:
  common.fail(PROGRAM, message)


def _flags_parser(argv: list[str]) -> list[str]:
  try:
    return parse_flags(argv)
  except UsageError as e:
    _fail(e)


def _raise_interrupt(signum, frame):
  del signum, frame
  raise KeyboardInterrupt("SIGTERM")


def main(argv: Sequence[str]) -> None:
  if not flags.FLAGS["verbosity"].present:
    # Keep the output to this program's own lines (JAX, orbax and matplotlib
    # log INFO messages through absl otherwise); --verbosity=0 shows them.
    logging.set_verbosity(logging.WARNING)
  # SIGTERM (e.g. a scheduler's pre-emption) saves a checkpoint like Ctrl-C.
  signal.signal(signal.SIGTERM, _raise_interrupt)
  try:
    if len(argv) > 1:
      raise UsageError(f"Unexpected argument(s) {list(argv[1:])}: settings "
                       "are given as --config.<key>=<value>.")
    train(flags.FLAGS.config)
  except UsageError as e:
    _fail(e)
  except KeyboardInterrupt:
    sys.exit(130)


def run() -> None:
  """Console entry point (``disco-meta-train``)."""
  app.run(main, flags_parser=_flags_parser)


if __name__ == "__main__":
  run()
