r"""Meta-evaluation launcher: train agents with a fixed rule on an environment.

  disco-eval --config.rule=actor_critic --config.total_env_steps=20000 \
      --config.num_seeds=3

(or ``python -m disco.launch.evaluate ...``). The settings live in
``configs/evaluate.py``; pass ``--config=<file>`` for another config file.
``--config.rule=list`` and ``--config.env=list`` print the registered rules
and environments. The run writes ``config.json``, ``metrics.csv``,
``learning_curve.png``, ``params_seed<k>.npz`` and ``summary.json`` into
``output_dir``, each written whole or not at all (``disco.files``), holding
the folder's lock for the whole run (a second process on the folder gets one
line and exit status 2); ``--config.overwrite=True`` empties a folder that
holds a run first. Bad input (a rule or weights file with non-finite values
included) ends the program with a one-line message on stderr and exit status
2. A seed whose agent diverges (non-finite parameters) is reported with the
environment step where it did, and left out of the curves and final
statistics from there on; if every seed diverges the program exits with
status 3 after writing its outputs.

A run has three steps that other launchers reuse: ``build`` (check the config,
resolve the rule, build the environment, agent and loop), ``run`` (train every
seed, one compiled call at a time) and ``write`` (metrics, curve, parameters
and summary).

With ``config.distributed`` (``disco.distributed``) several processes
or hosts share the seeds: each trains a contiguous block of them and saves
their parameters; process 0 gathers the metrics and writes the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
import math
from pathlib import Path
import sys
import time
from typing import Any

import jax
from ml_collections import config_dict
import numpy as np
import tqdm

from disco import agent as agent_lib
from disco import checks
from disco import distributed
from disco import errors
from disco import files
from disco import run_folders
from disco import stopping
from disco import tracking
from disco import weights as weights_lib
from disco.environments import base as env_base
from disco.environments import registry as env_registry
from disco.launch import common
from disco.training import analysis
from disco.training import loop as loop_lib
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve
from disco.update_rules import settings as rule_settings

UsageError = errors.UsageError

PROGRAM = "disco-eval"
CONFIG_NAME = "evaluate"
OUTPUT_FILES = (
    "config.json",
    "metrics.csv",
    "learning_curve.png",
    "summary.json",
)
CURVE_EPISODES = 100  # episodes per window of the learning curve / progress
LIST = "list"


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/evaluate.py``."""
  return checks.load_config(CONFIG_NAME)


# ------------------------------------------------------------ building ----


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything a run needs, built and checked from a config."""

  config: config_dict.ConfigDict
  rule: resolve.ResolvedRule
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
    """How the run's iterations split into compiled calls, and its
    environment steps (the ``run`` record of ``config.json``)."""
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
  """``(iterations_per_call, num_calls)`` covering ``total_env_steps``.

  The iteration count ``ceil(total_env_steps / env_steps_per_iteration)`` is
  rounded up to equal calls of at most ``iterations_per_call`` iterations, so
  one compiled program serves every call (fewer iterations per call when that
  overshoots less, e.g. a single short call).
  """
  needed = max(1, math.ceil(total_env_steps / env_steps_per_iteration))
  num_calls = math.ceil(needed / iterations_per_call)
  return math.ceil(needed / num_calls), num_calls


def _loop_config(
    config: config_dict.ConfigDict, recommended: Mapping[str, int]
) -> loop_lib.LoopConfig:
  """The loop: ``config``'s settings, else the rule's ``recommended`` ones,
  else ``LoopConfig``'s defaults (the published notebook's)."""
  defaults = loop_lib.LoopConfig()
  values = {}
  for key in rule_registry.LOOP_KEYS:
    value = config[key]
    if value is None:
      value = recommended.get(key, getattr(defaults, key))
    low = 0 if key in ("replay_capacity", "min_replay_size") else 1
    values[key] = checks.check_int(value, key, low)
  try:
    return loop_lib.LoopConfig(**values)
  except ValueError as e:
    raise UsageError(f"Invalid loop settings: {errors.one_line(e)}") from None


def _make_env(
    config: config_dict.ConfigDict, num_envs: int, num_seeds: int, seed: int
) -> tuple[env_base.Environment, dict[str, Any]]:
  try:
    entry = env_registry.get_entry(config.env)
  except ValueError as e:
    raise UsageError(
        f"{errors.one_line(e)} (--config.env=list prints them)"
    ) from None
  env_settings = checks.as_dict(config.env_settings or {}, "env_settings")
  if not entry.jittable:
    if num_seeds != 1:
      raise UsageError(
          f"env {config.env!r} runs on the host and trains one seed at a "
          "time: use num_seeds=1 (or a jittable env such as 'catch')."
      )
    # A host environment draws its own random numbers: seed it too.
    if "seed" in entry.settings:
      env_settings.setdefault("seed", seed)
  try:
    env = env_registry.make_env(config.env, num_envs, **env_settings)
  except (ValueError, TypeError) as e:
    raise UsageError(f"Bad env settings: {errors.one_line(e)}") from None
  return env, env_settings


def _with_rule_settings(
    rule: resolve.ResolvedRule, hyper_params: Any, rule_kwargs: Any
) -> resolve.ResolvedRule:
  """``rule`` rebuilt with the ``hyper_params`` and ``rule_kwargs`` given
  overriding its own (``rule_settings.apply``; the same rule where they
  change nothing).

  Raises:
    UsageError: for a setting the rule does not have, or rule_kwargs that
      change the shapes of meta-parameters the rule already has.
  """
  settings = rule.settings
  try:
    changed = rule_settings.apply(
        settings, hyper_params, rule_kwargs, rule.label
    )
  except rule_settings.SettingsError as e:
    raise UsageError(errors.one_line(e)) from None
  if not changed:
    return rule
  try:
    rebuilt = rule_registry.make_rule(settings)
  except ValueError as e:
    raise UsageError(errors.one_line(e)) from None
  if rule.source == "random":  # a random initialisation of the new rule
    return dataclasses.replace(
        rule,
        settings=settings,
        rule=rebuilt,
        meta_params=rebuilt.init_meta_params(jax.random.PRNGKey(0)),
    )
  shapes = jax.tree.map(
      lambda x: (x.shape, x.dtype),
      jax.eval_shape(rebuilt.init_meta_params, jax.random.PRNGKey(0)),
  )
  given = jax.tree.map(lambda x: (np.shape(x), x.dtype), rule.meta_params)
  if shapes != given:
    raise UsageError(
        f"config.rule_kwargs {run_folders.to_jsonable(rule_kwargs)} change the "
        f"shapes of the meta-parameters of {rule.label!r}, so its "
        f"{rule.source} meta-parameters no longer fit: keep its network "
        "settings."
    )
  return dataclasses.replace(rule, settings=settings, rule=rebuilt)


def _check_output_dir(config: config_dict.ConfigDict, label: str) -> Path:
  out = run_folders.output_dir(config.output_dir, f"eval-{label}")
  _check_free(out, config.overwrite)
  return out


def _check_free(out: Path, overwrite: bool) -> None:
  if (out / "config.json").exists() and not overwrite:
    raise UsageError(
        f"output_dir {out} already holds a run (config.json): choose another "
        "folder or pass --config.overwrite=True."
    )


def build(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    rule: resolve.ResolvedRule | None = None,
) -> Plan:
  """Checks ``config`` and builds the rule, environment, agent and loop.

  ``rule``, if given, is used instead of resolving ``config.rule`` (e.g. a
  rule being meta-trained, validated with changing meta-parameters: they are
  an argument of the compiled loop, so ``run`` takes a plan whose
  ``rule.meta_params`` are replaced without recompiling); its settings are
  copied, not changed.

  Raises:
    UsageError: for any bad setting, with a one-line explanation.
  """
  checks.check_config_keys(config, default_config(), CONFIG_NAME)
  distributed.initialize(distributed.settings(config.distributed), PROGRAM)
  checks.import_modules(config.imports)
  checks.check_tracking(config.tracking)
  total_env_steps = checks.check_int(
      config.total_env_steps, "total_env_steps", 1
  )
  num_seeds = checks.check_int(config.num_seeds, "num_seeds", 1)
  seed = checks.check_int(config.seed, "seed", 0)
  per_call = checks.check_int(
      config.iterations_per_call, "iterations_per_call", 1
  )
  checks.check_int(config.last_episodes, "last_episodes", 1)
  checks.check_bool(config.overwrite, "overwrite")
  if config.learning_rate is not None:
    checks.check_number(config.learning_rate, "learning_rate", positive=True)
  seeds = list(range(seed, seed + num_seeds))
  if num_seeds < jax.process_count():
    raise UsageError(
        f"config.num_seeds={num_seeds} is fewer than the "
        f"{jax.process_count()} processes: each process trains its own "
        "seeds, so give at least one per process."
    )
  local_seeds = distributed.split(seeds)[jax.process_index()]
  if rule is None:
    rule = resolve.resolve_rule(config.rule, config.weights)
  else:
    rule = dataclasses.replace(
        rule, settings=rule.settings.copy_and_resolve_references()
    )
  loop_config = _loop_config(
      config, rule_registry.get_entry(rule.settings.rule).loop
  )
  env, env_settings = _make_env(
      config, loop_config.num_envs, len(local_seeds), local_seeds[0]
  )
  if rule.source == "random":
    log(
        f"Warning: rule {config.rule!r} has meta-parameters and none were "
        "given: using a random initialisation (use rule=disco103 or a .npz "
        "file for trained ones)."
    )
  if rule.settings.rule == "disco103" and not loop_config.replay_capacity:
    log(
        "Warning: without a replay (replay_capacity=0) Disco103 learns far "
        "more slowly: Catch 8x8 is still unlearnt after 100k steps of 8x16 "
        "rollouts, where the default loop (a replay) learns it by 60k "
        "(BENCHMARKS.md, issue 30)."
    )
  output_dir = _check_output_dir(config, rule.label)
  settings = rule.settings
  if config.learning_rate is not None:
    settings.learning_rate = float(config.learning_rate)
  if config.loss_mask is not None:
    settings.loss_mask = config.loss_mask
  for key in ("max_abs_update", "max_grad_norm"):
    if config[key] is not None:
      value = checks.check_number(config[key], key)
      if value < 0:
        raise UsageError(f"{key}={value} must be >= 0 (0: no clip).")
      settings[key] = value or None
  if config.adam_eps is not None:
    settings.adam_eps = checks.check_number(
        config.adam_eps, "adam_eps", positive=True
    )
  rule = _with_rule_settings(rule, config.hyper_params, config.rule_kwargs)
  overrides = {
      k: v
      for k, v in checks.as_dict(config.network, "network").items()
      if v is not None
  }
  settings.network = {**settings.network.to_dict(), **overrides}
  iterations_per_call, num_calls = plan_iterations(
      total_env_steps, loop_config.env_steps_per_iteration, per_call
  )
  try:
    num_updates = loop_config.num_updates(iterations_per_call * num_calls)
    agent = agent_lib.make_agent(
        settings,
        env.num_actions,
        rule=rule.rule,
        num_updates=num_updates,
        observation_spec=env.observation_spec(),
    )
    # The evaluation budget is the agents' lifetime (for rules that read it).
    loop = loop_lib.EvalLoop(
        agent, env, loop_config, lifetime=max(num_updates, 1)
    )
  except ValueError as e:
    raise UsageError(errors.one_line(e)) from None
  return Plan(
      config=config,
      rule=rule,
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


# ------------------------------------------------------------- running ----


def resolved_config(plan: Plan) -> dict[str, Any]:
  """The config as ``config.json`` saves it: the settings given, with the
  environment settings, learning rate and loop the run resolved."""
  resolved = plan.config.to_dict()
  resolved.update(
      output_dir=str(plan.output_dir),
      env_settings=plan.env_settings,
      learning_rate=plan.rule.settings.learning_rate,
      **dataclasses.asdict(plan.loop_config),
  )
  return run_folders.to_jsonable(resolved)


def write_config(plan: Plan) -> None:
  """Creates ``output_dir`` and writes ``config.json`` (before training)."""
  out = run_folders.make_dir(plan.output_dir)
  run_folders.write_json(
      out / "config.json",
      dict(
          config=resolved_config(plan),
          rule_settings=plan.rule.settings.to_dict(),
          run=dict(
              seeds=plan.seeds, **plan.schedule, **run_folders.run_record()
          ),
      ),
  )


def open_output(plan: Plan, program: str = PROGRAM) -> files.FolderLock:
  """Takes the lock of ``plan.output_dir`` (the writer's, held until
  released), checks again under it that the folder is free, empties it for
  ``overwrite=True`` and writes ``config.json``; returns the lock.

  Raises:
    UsageError: another process writes the folder, or it holds a run
      (without overwrite), or other files (with overwrite).
  """
  lock = run_folders.claim_output_dir(plan.output_dir, program)
  try:
    _check_free(plan.output_dir, plan.config.overwrite)
    if plan.config.overwrite:
      run_folders.empty_output_dir(plan.output_dir, lock)
    write_config(plan)
  except BaseException:
    lock.release()
    raise
  return lock


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What ``run`` returns.

  Attributes:
    states: the final states of this process's seeds (leading axis: its
      ``local_seeds``).
    metrics: ``{name: [S, iterations]}`` on the host.
    call_times: seconds of each compiled call (the first compiles).
    learner_steps_per_call: learner steps of all seeds in each call.
    wall_time: seconds of the whole run.
  """

  states: loop_lib.TrainState
  metrics: dict[str, np.ndarray]
  call_times: list[float]
  learner_steps_per_call: list[int]
  wall_time: float


def run(
    plan: Plan, log: Callable[[str], None] = print, progress: bool = True
) -> RunResult:
  """Trains every seed of ``plan`` (vmapped), one compiled call at a time.

  With several processes each trains its ``local_seeds``; the metrics of
  every seed are then gathered into every process.
  """
  cfg = plan.loop_config
  report = log  # every process reports its own seeds' divergence
  log = distributed.main_only(log)
  log(
      f"Evaluating {plan.label} on {plan.config.env} {plan.env_settings} with "
      f"seeds {plan.seeds}"
      + run_folders.processes_text("over")
      + f"; writing to {plan.output_dir}"
  )
  log(
      f"{plan.iterations} iterations x {cfg.env_steps_per_iteration} env "
      f"steps ({cfg.num_envs} envs x {cfg.rollout_len} steps) = "
      f"{plan.env_steps} env steps per seed (asked for "
      f"{plan.config.total_env_steps}), in {plan.num_calls} call(s) of "
      f"{plan.iterations_per_call} iterations, so the loop is compiled once "
      "(the first call includes compilation)."
  )
  wall_start = time.perf_counter()
  chunks: list[dict[str, np.ndarray]] = []
  call_times: list[float] = []
  steps_per_call = plan.iterations_per_call * cfg.env_steps_per_iteration
  reported: set[int] = set()
  hint = "start the evaluation again in every process."
  with (
      distributed.ends_process_on_failure(PROGRAM, hint),
      distributed.Watchdog(
          PROGRAM, plan.config.distributed.step_timeout, "training call", hint
      ) as watchdog,
      tqdm.tqdm(
          total=plan.env_steps,
          unit="step",
          unit_scale=True,
          desc=plan.label,
          disable=not (progress and distributed.is_main()),
          file=sys.stderr,
          dynamic_ncols=True,
      ) as bar,
  ):
    states = plan.loop.init_seeds(plan.local_seeds)
    for call in range(plan.num_calls):
      if distributed.preempted(call):
        raise distributed.Preempted(f"SIGTERM: stopped before call {call}")
      stopping.check_stop(f"before training call {call}")
      start = time.perf_counter()
      states, metrics = plan.loop.run(
          states, plan.rule.meta_params, plan.iterations_per_call
      )
      call_times.append(time.perf_counter() - start)
      watchdog.beat()
      chunks.append(metrics)
      so_far = analysis.concat_metrics(chunks)
      curve = analysis.return_curve(so_far, CURVE_EPISODES)[:, -1]
      finite = curve[np.isfinite(curve)]
      diverged = analysis.diverged_env_steps(so_far)
      for seed, at in zip(plan.local_seeds, diverged, strict=True):
        if at is not None and seed not in reported:
          reported.add(seed)
          report(
              f"Seed {seed} diverged at env step {at} (non-finite agent "
              "parameters): left out of the curves and final statistics "
              "from there on."
          )
      bar.update(steps_per_call)
      bar.set_postfix(
          steps_per_s=(
              f"{steps_per_call * len(plan.local_seeds) / call_times[-1]:.0f}"
          ),
          mean_return=run_folders.fmt(
              float(finite.mean()) if finite.size else None, 2
          ),
          **({"diverged": len(reported)} if reported else {}),
      )
    metrics = distributed.gather(
        analysis.concat_metrics(chunks),
        [len(block) for block in distributed.split(plan.seeds)],
    )
  # Learner steps of all seeds at the end of each call.
  done = np.asarray(metrics["learner_steps"])[
      :, plan.iterations_per_call - 1 :: plan.iterations_per_call
  ].sum(axis=0)
  return RunResult(
      states=states,
      metrics=metrics,
      call_times=call_times,
      learner_steps_per_call=[int(x) for x in np.diff(done, prepend=0)],
      wall_time=time.perf_counter() - wall_start,
  )


# ------------------------------------------------------------- writing ----


def _rates(plan: Plan, result: RunResult) -> dict[str, Any]:
  """Steady-state rates over all seeds (the first call compiles)."""
  steps_per_call = (
      plan.iterations_per_call
      * plan.loop_config.env_steps_per_iteration
      * len(plan.seeds)
  )
  _, compile_time = run_folders.steady_state(result.call_times)
  first = 0 if compile_time is None else 1
  timed = sum(result.call_times[first:])
  env_steps = steps_per_call * (len(result.call_times) - first)
  learner_steps = sum(result.learner_steps_per_call[first:])
  return dict(
      compile_time_s=compile_time,
      env_steps_per_s=env_steps / timed if timed > 0 else None,
      learner_steps_per_s=learner_steps / timed if timed > 0 else None,
      timing_note=(
          "steady-state rates exclude the first call, which " "compiles"
          if compile_time is not None
          else "single call: rates include compilation"
      ),
  )


def _params_file(seed: int) -> str:
  return f"params_seed{seed}.npz"


def _save_params(
    plan: Plan, states: loop_lib.TrainState, diverged: set[int]
) -> None:
  """Saves the parameters of this process's seeds, except those of the
  ``diverged`` seeds."""
  for k, seed in enumerate(plan.local_seeds):
    if seed in diverged:
      continue
    params = jax.tree.map(
        lambda x, k=k: np.asarray(x[k]), states.learner.params
    )
    weights_lib.save_meta_params(
        plan.output_dir / _params_file(seed),
        params,
        metadata=dict(
            kind=resolve.AGENT_PARAMS_KIND,
            rule=plan.rule.settings.rule,
            rule_label=plan.label,
            seed=seed,
            env=plan.config.env,
            env_settings=run_folders.to_jsonable(plan.env_settings),
            network=plan.rule.settings.network.to_dict(),
        ),
    )


def _diverged_text(summary: dict[str, Any]) -> str:
  return ", ".join(
      f"seed {d['seed']} at env step {d['env_step']}"
      for d in summary["diverged_seeds"]
  )


def write(
    plan: Plan, result: RunResult, log: Callable[[str], None] = print
) -> dict[str, Any]:
  """Writes metrics, curve, parameters and summary; returns the summary.

  With several processes, each writes its own seeds' parameters and process
  0 the rest (every process returns the summary).
  """
  out, metrics = plan.output_dir, result.metrics
  main, log = distributed.is_main(), distributed.main_only(log)
  if main:
    analysis.write_metrics_csv(out / "metrics.csv", metrics, plan.seeds)
    analysis.plot_learning_curves(
        {plan.label: metrics},
        path=out / "learning_curve.png",
        min_episodes=CURVE_EPISODES,
        title=f"{plan.label} on {plan.config.env}",
    )
  last_episodes = plan.config.last_episodes
  summary = analysis.summarize(metrics, last_episodes)
  diverged_seeds = [
      dict(seed=seed, env_step=at)
      for seed, at in zip(
          plan.seeds, summary["diverged_at_env_step"], strict=True
      )
      if at is not None
  ]
  lost = {d["seed"] for d in diverged_seeds}
  _save_params(plan, result.states, lost)
  params_files = [_params_file(seed) for seed in plan.seeds if seed not in lost]
  summary.update(
      rule=plan.label,
      env=plan.config.env,
      seeds=plan.seeds,
      diverged_seeds=diverged_seeds,
      output_dir=str(out),
      params_files=params_files,
      wall_time_s=result.wall_time,
      total_env_steps=int(plan.env_steps * len(plan.seeds)),
      **_rates(plan, result),
  )
  if main:
    run_folders.write_json(out / "summary.json", summary)
    track(plan, metrics, summary)

  log(
      f"Learning curve (mean return over windows of {CURVE_EPISODES} "
      "episodes, mean over seeds):\n"
      + analysis.text_curve(metrics, CURVE_EPISODES)
  )
  ci, num_seeds = summary["final_return_ci"], summary["final_return_seeds"]
  ci_text = (
      f"95% bootstrap CI [{ci[0]:.3f}, {ci[1]:.3f}] over " f"{num_seeds} seeds"
      if ci is not None
      else f"{num_seeds} seed(s): no confidence interval"
  )
  if summary["diverged_seeds"]:
    ci_text += f"; diverged: {_diverged_text(summary)}"
  per_seed = ", ".join(
      run_folders.fmt(x) for x in summary["final_return_per_seed"]
  )
  log(
      f"Final mean return over the last {last_episodes} episodes: "
      f"{run_folders.fmt(summary['final_return_mean'])} ({ci_text}); per seed: "
      f"{per_seed}"
  )
  log(
      f"Env steps: {summary['env_steps']} per seed; learner steps: "
      f"{summary['learner_steps']} per seed"
  )
  log(
      f"Compile time: {run_folders.fmt(summary['compile_time_s'], 1)} s; wall "
      f"time: {result.wall_time:.1f} s; "
      f"{run_folders.fmt(summary['env_steps_per_s'], 0)} env steps/s, "
      f"{run_folders.fmt(summary['learner_steps_per_s'], 1)} learner steps/s "
      f"(all seeds; {summary['timing_note']})"
  )
  log(
      f"Outputs in {out}: {', '.join(OUTPUT_FILES)}, "
      f"{', '.join(params_files)}"
  )
  return summary


def track(
    plan: Plan, metrics: dict[str, np.ndarray], summary: dict[str, Any]
) -> None:
  """Sends what ``metrics.csv`` and ``summary.json`` hold to the trackers
  of ``config.tracking`` (nothing more for ``csv``): per iteration, every
  metric of every seed as ``<metric>/seed_<k>`` against the environment
  steps, then the summary's numbers."""
  spec = plan.config.tracking
  if tracking.parse(spec) == (tracking.CSV,):
    return
  rows = analysis.metrics_to_rows(metrics, plan.seeds)
  with tracking.open_tracker(
      spec,
      plan.output_dir,
      name=f"eval-{plan.label}-{plan.config.env}",
      config=dict(
          config=plan.config.to_dict(),
          rule_settings=plan.rule.settings.to_dict(),
      ),
  ) as tracker:
    _, iterations = analysis.num_seeds_and_iterations(metrics)
    step = 0
    for i in range(iterations):
      values = {}
      for row in rows[i::iterations]:  # seed-major: this iteration's rows
        step = row.get(analysis.ENV_STEPS, i)
        values.update(
            (f"{k}/seed_{row[analysis.SEED]}", v)
            for k, v in row.items()
            if k not in (analysis.SEED, analysis.ITERATION)
        )
      tracker.scalars(step, values)
    tracker.summary(summary, step)


# ------------------------------------------------------------ listings ----


def listing(what: str) -> str:
  """The registered rules (``what="rule"``) or environments (``"env"``)."""
  if what == "rule":
    entries = [
        (n, rule_registry.get_entry(n).description)
        for n in rule_registry.rule_names()
    ]
  else:
    entries = [
        (n, env_registry.get_entry(n).description)
        for n in env_registry.env_names()
    ]
  width = max(len(n) for n, _ in entries)
  return "\n".join(f"{n:<{width}}  {d}".rstrip() for n, d in entries)


def evaluate(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any] | None:
  """Builds, runs and writes one evaluation; returns the summary.

  ``rule=list`` or ``env=list`` prints the registered names instead (and
  returns None).

  Raises:
    UsageError: for bad settings (before anything is trained).
    errors.Diverged: every seed diverged (the outputs are written first).
  """
  for what in ("rule", "env"):
    if config[what] == LIST:
      checks.import_modules(config.imports)
      log(listing(what))
      return None
  plan = build(config, log)
  # Every process has checked the output folder before process 0 writes.
  distributed.barrier("disco-eval: built")
  lock = open_output(plan) if distributed.is_main() else None
  try:
    distributed.barrier("disco-eval: output folder ready")
    with errors.resource_errors(
        f"run the same command again with --config.overwrite=True "
        f"(--config.output_dir={plan.output_dir} holds the unfinished run)."
    ):
      summary = write(plan, run(plan, log, progress), log)
  finally:
    if lock is not None:
      lock.release()
  if summary["num_diverged_seeds"] == len(plan.seeds):
    raise errors.Diverged(
        f"Every seed diverged ({_diverged_text(summary)}): their agents' "
        "parameters became non-finite, so the run has no result (outputs in "
        f"{plan.output_dir}). Try a lower learning_rate."
    )
  return summary


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.env_settings`` every setting of the environment the
  command line names (``--config.env=NAME``) with its defaults, so that
  ``--config.env_settings.KEY=VALUE`` may set any of them."""
  env = common.override_value(argv, "env") or config.env
  try:
    defaults = env_registry.get_entry(env).settings
  except ValueError:  # an unknown name (or 'list'): build() reports it
    return
  given = {}
  if env == config.env:
    given = checks.as_dict(config.env_settings or {}, "env_settings")
  with config.unlocked():
    config.env_settings = {**defaults, **given}
  _prepare_rule_settings(config, argv)


def _prepare_rule_settings(config: config_dict.ConfigDict, argv) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` the settings
  of the rule the command line names, with their defaults, so that
  ``--config.hyper_params.KEY=VALUE`` and ``--config.rule_kwargs.KEY=VALUE``
  may set any of them and no other (``rule_settings.prepare``)."""
  name = common.override_value(argv, "rule") or config.rule
  try:
    if resolve.is_rule_path(name):
      settings = resolve.resolve_rule(name).settings
    else:
      settings = rule_registry.default_settings(name)
  except (ValueError, UsageError):  # build() reports it
    return
  rule_settings.prepare(config, settings)


def main() -> None:
  """Console entry point (``disco-eval``)."""
  common.run_launcher(
      PROGRAM, __doc__, CONFIG_NAME, evaluate, prepare=prepare_config
  )


if __name__ == "__main__":
  main()
