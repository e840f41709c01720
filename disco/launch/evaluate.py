r"""Meta-evaluation launcher: train agents with a fixed rule on an environment.

  python -m disco.launch.evaluate --config.rule=actor_critic \
      --config.total_env_steps=20000 --config.num_seeds=3

(or ``disco-eval ...``). The settings live in ``configs/evaluate.py``; pass
``--config=<file>`` for another config file. The run writes ``config.json``,
``metrics.csv``, ``learning_curve.png``, ``params_seed<k>.npz`` and
``summary.json`` into ``output_dir``. Bad input ends the program with a
one-line message on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import runpy
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_dict
import numpy as np
import tqdm

import disco
from disco import agent as agent_lib
from disco import configs
from disco import weights as weights_lib
from disco.environments import base as env_base
from disco.environments import registry
from disco.launch import common
from disco.training import analysis
from disco.training import loop as loop_lib

UsageError = common.UsageError

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "evaluate.py"
PROGRAM = "disco-eval"
OUTPUT_FILES = ("config.json", "metrics.csv", "learning_curve.png",
                "summary.json")
CURVE_EPISODES = 100  # episodes per window of the learning curve / progress


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/evaluate.py``."""
  return runpy.run_path(str(DEFAULT_CONFIG))["get_config"]()


# ------------------------------------------------------------ building ----


@dataclasses.dataclass
class Plan:
  """Everything a run needs, built and checked from a config."""

  config: config_dict.ConfigDict
  label: str
  settings: config_dict.ConfigDict
  meta_params: Any
  env: env_base.Environment
  agent: agent_lib.Agent
  loop_config: loop_lib.LoopConfig
  loop: loop_lib.EvalLoop
  seeds: list[int]
  iterations_per_call: int
  num_calls: int
  output_dir: Path

  @property
  def iterations(self) -> int:
    return self.iterations_per_call * self.num_calls

  @property
  def env_steps(self) -> int:
    """Environment steps per seed of the whole run."""
    return self.iterations * self.loop_config.env_steps_per_iteration


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


def _check_int(config, name: str, minimum: int) -> int:
  value = config[name]
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise UsageError(f"config.{name} must be an integer, got {value!r}.")
  if value < minimum:
    raise UsageError(f"config.{name} must be >= {minimum}, got {value}.")
  return int(value)


def plan_iterations(total_env_steps: int, env_steps_per_iteration: int,
                    iterations_per_call: int) -> tuple[int, int]:
  """``(iterations_per_call, num_calls)`` covering ``total_env_steps``.

  The iteration count ``ceil(total_env_steps / env_steps_per_iteration)`` is
  rounded up to equal calls of at most ``iterations_per_call`` iterations, so
  one compiled program serves every call (fewer iterations per call when that
  overshoots less, e.g. a single short call).
  """
  needed = max(1, math.ceil(total_env_steps / env_steps_per_iteration))
  num_calls = math.ceil(needed / iterations_per_call)
  return math.ceil(needed / num_calls), num_calls


def _label(rule: str) -> str:
  if rule in common.rule_names():
    return rule
  return Path(rule).stem or "rule"


def _output_dir(config, label: str) -> Path:
  if config.output_dir:
    out = Path(config.output_dir).expanduser()
  else:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    out = Path("runs") / f"eval-{safe}-{stamp}"
    suffix = 1
    while out.exists():
      suffix += 1
      out = Path("runs") / f"eval-{safe}-{stamp}-{suffix}"
  if out.exists() and not out.is_dir():
    raise UsageError(f"output_dir {out} exists and is not a folder.")
  if (out / "config.json").exists() and not config.overwrite:
    raise UsageError(
        f"output_dir {out} already holds a run (config.json): choose another "
        "folder or pass --config.overwrite=True.")
  return out


def build(config: config_dict.ConfigDict,
          log: Callable[[str], None] = print) -> Plan:
  """Checks ``config`` and builds the rule, environment, agent and loop.

  Raises:
    UsageError: for any bad setting, with a one-line explanation.
  """
  _check_config_keys(config)
  total_env_steps = _check_int(config, "total_env_steps", 1)
  num_seeds = _check_int(config, "num_seeds", 1)
  seed = _check_int(config, "seed", 0)
  num_envs = _check_int(config, "num_envs", 1)
  rollout_len = _check_int(config, "rollout_len", 2)
  batch_size = _check_int(config, "batch_size", 1)
  replay_capacity = _check_int(config, "replay_capacity", 0)
  min_replay_size = _check_int(config, "min_replay_size", 0)
  per_call = _check_int(config, "iterations_per_call", 1)
  _check_int(config, "last_episodes", 1)
  if not isinstance(config.overwrite, bool):
    raise UsageError(f"config.overwrite must be True or False, got "
                     f"{config.overwrite!r}.")
  if config.learning_rate is not None and not config.learning_rate > 0:
    raise UsageError(
        f"config.learning_rate must be > 0, got {config.learning_rate}.")
  if replay_capacity and replay_capacity < num_envs:
    raise UsageError(
        f"replay_capacity ({replay_capacity}) must be >= num_envs "
        f"({num_envs}): each iteration inserts num_envs trajectories at once "
        "(or use replay_capacity=0 for no replay).")
  try:
    loop_config = loop_lib.LoopConfig(
        num_envs=num_envs, rollout_len=rollout_len, batch_size=batch_size,
        replay_capacity=replay_capacity, min_replay_size=min_replay_size)
  except ValueError as e:
    raise UsageError(f"Invalid loop settings: {common.one_line(e)}") from None

  label = _label(str(config.rule))
  output_dir = _output_dir(config, label)

  # Environment.
  if config.env not in registry.ENV_NAMES:
    raise UsageError(f"Unknown env {config.env!r}; valid envs: "
                     f"{', '.join(registry.ENV_NAMES)}.")
  env_settings = dict(config.env_settings.to_dict()
                      if isinstance(config.env_settings, config_dict.ConfigDict)
                      else config.env_settings or {})
  jittable = registry.is_jittable(config.env)
  if not jittable:
    if num_seeds != 1:
      raise UsageError(
          f"env {config.env!r} runs on the host and trains one seed at a "
          "time: use num_seeds=1 (or a jittable env such as 'catch').")
    # A host environment draws its own random numbers: seed it too.
    env_settings.setdefault("seed", seed)
  try:
    env = registry.make_env(config.env, num_envs, **env_settings)
  except (ValueError, TypeError) as e:
    raise UsageError(f"Bad env settings: {common.one_line(e)}") from None

  # Rule and agent.
  settings, meta_params = common.resolve_rule(config.rule, config.weights)
  if (config.rule in configs.RULES and config.weights is None
      and jax.tree.leaves(meta_params)):
    log(f"Warning: rule {config.rule!r} has meta-parameters and none were "
        "given: using a random initialisation (use rule=disco103 or a .npz "
        "file for trained ones).")
  if config.learning_rate is not None:
    settings.learning_rate = float(config.learning_rate)
  try:
    agent = configs.make_agent(settings, env.num_actions)
  except ValueError as e:
    raise UsageError(f"Bad rule settings: {common.one_line(e)}") from None
  try:
    loop = loop_lib.EvalLoop(agent, env, loop_config)
  except ValueError as e:
    raise UsageError(common.one_line(e)) from None
  iterations_per_call, num_calls = plan_iterations(
      total_env_steps, loop_config.env_steps_per_iteration, per_call)
  return Plan(config=config, label=label, settings=settings,
              meta_params=meta_params, env=env, agent=agent,
              loop_config=loop_config, loop=loop,
              seeds=list(range(seed, seed + num_seeds)),
              iterations_per_call=iterations_per_call, num_calls=num_calls,
              output_dir=output_dir)


# ------------------------------------------------------------- running ----


def _to_jsonable(x):
  if isinstance(x, dict):
    return {str(k): _to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_to_jsonable(v) for v in x]
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, (np.floating,)):
    return float(x)
  if isinstance(x, Path):
    return str(x)
  return x


def _write_json(path: Path, data) -> None:
  path.write_text(json.dumps(_to_jsonable(data), indent=2, sort_keys=True)
                  + "\n")


def _fmt(x: float | None, digits: int = 3) -> str:
  return "n/a" if x is None else f"{x:.{digits}f}"


def evaluate(config: config_dict.ConfigDict,
             log: Callable[[str], None] = print,
             progress: bool = True) -> dict[str, Any]:
  """Builds, runs and writes one evaluation; returns the summary dict.

  Raises:
    UsageError: for bad settings (before anything is trained).
  """
  plan = build(config, log)
  cfg = plan.loop_config
  out = plan.output_dir
  try:
    out.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UsageError(f"Cannot create output_dir {out}: {e}.") from None
  resolved = config.to_dict()
  resolved.update(output_dir=str(out), learning_rate=plan.settings.learning_rate)
  _write_json(out / "config.json", dict(
      config=resolved,
      rule_settings=plan.settings.to_dict(),
      run=dict(seeds=plan.seeds, iterations=plan.iterations,
               num_calls=plan.num_calls,
               iterations_per_call=plan.iterations_per_call,
               env_steps_per_iteration=cfg.env_steps_per_iteration,
               env_steps_per_seed=plan.env_steps,
               disco_version=disco.__version__, jax_version=jax.__version__,
               devices=[str(d) for d in jax.devices()])))

  log(f"Evaluating {plan.label} on {config.env} "
      f"{dict(plan.config.env_settings)} with seeds {plan.seeds}; writing to "
      f"{out}")
  log(f"{plan.iterations} iterations x {cfg.env_steps_per_iteration} env "
      f"steps ({cfg.num_envs} envs x {cfg.rollout_len} steps) = "
      f"{plan.env_steps} env steps per seed (asked for "
      f"{config.total_env_steps}), in {plan.num_calls} call(s) of "
      f"{plan.iterations_per_call} iterations, so the loop is compiled once "
      "(the first call includes compilation).")

  wall_start = time.perf_counter()
  loop = plan.loop
  states = loop.init_seeds(plan.seeds)
  num_seeds = len(plan.seeds)
  chunks: list[dict[str, np.ndarray]] = []
  call_times: list[float] = []
  learner_done: list[int] = []
  prev_learner = 0
  steps_per_call = plan.iterations_per_call * cfg.env_steps_per_iteration
  with tqdm.tqdm(total=plan.env_steps, unit="step", unit_scale=True,
                 desc=plan.label, disable=not progress, file=sys.stderr,
                 dynamic_ncols=True) as bar:
    for _ in range(plan.num_calls):
      start = time.perf_counter()
      states, metrics = loop.run(states, plan.meta_params,
                                 plan.iterations_per_call)
      call_times.append(time.perf_counter() - start)
      chunks.append(metrics)
      learner_now = int(np.asarray(metrics["learner_steps"])[:, -1].sum())
      learner_done.append(learner_now - prev_learner)
      prev_learner = learner_now
      curve = analysis.return_curve(analysis.concat_metrics(chunks),
                                    CURVE_EPISODES)[:, -1]
      finite = curve[np.isfinite(curve)]
      bar.update(steps_per_call)
      bar.set_postfix(
          steps_per_s=f"{steps_per_call * num_seeds / call_times[-1]:.0f}",
          mean_return=_fmt(float(finite.mean()) if finite.size else None,
                           2))
  wall_time = time.perf_counter() - wall_start
  metrics = analysis.concat_metrics(chunks)

  # Timing: the first call compiles; later calls are the steady state.
  if len(call_times) > 1:
    steady = float(np.median(call_times[1:]))
    compile_time = max(0.0, call_times[0] - steady)
    timed, timed_learner = sum(call_times[1:]), sum(learner_done[1:])
    timed_env = (len(call_times) - 1) * steps_per_call * num_seeds
  else:
    compile_time = None
    timed, timed_learner = call_times[0], learner_done[0]
    timed_env = steps_per_call * num_seeds

  # Outputs.
  analysis.write_metrics_csv(out / "metrics.csv", metrics, plan.seeds)
  analysis.plot_learning_curves(
      {plan.label: metrics}, path=out / "learning_curve.png",
      min_episodes=CURVE_EPISODES,
      title=f"{plan.label} on {config.env}")
  params_files = []
  for k, seed in enumerate(plan.seeds):
    params = jax.tree.map(lambda x, k=k: np.asarray(x[k]),
                          states.learner.params)
    path = out / f"params_seed{seed}.npz"
    weights_lib.save_meta_params(path, params, metadata=dict(
        kind=common.AGENT_PARAMS_KIND, rule=plan.settings.rule,
        rule_label=plan.label, seed=seed, env=config.env,
        env_settings=plan.config.env_settings.to_dict(),
        network=plan.settings.network.to_dict()))
    params_files.append(path.name)
  summary = analysis.summarize(metrics, config.last_episodes)
  summary.update(
      rule=plan.label, env=config.env, seeds=plan.seeds,
      output_dir=str(out), params_files=params_files,
      compile_time_s=compile_time, wall_time_s=wall_time,
      env_steps_per_s=timed_env / timed if timed > 0 else None,
      learner_steps_per_s=timed_learner / timed if timed > 0 else None,
      total_env_steps=int(plan.env_steps * num_seeds),
      timing_note=("steady-state rates exclude the first call, which "
                   "compiles" if compile_time is not None else
                   "single call: rates include compilation"))
  _write_json(out / "summary.json", summary)

  log(f"Learning curve (mean return over windows of {CURVE_EPISODES} "
      "episodes, mean over seeds):\n"
      + analysis.text_curve(metrics, CURVE_EPISODES))
  ci = summary["final_return_ci"]
  ci_text = (f"95% bootstrap CI [{ci[0]:.3f}, {ci[1]:.3f}] over "
             f"{num_seeds} seeds" if ci is not None else
             f"{num_seeds} seed: no confidence interval")
  per_seed = ", ".join(_fmt(x) for x in summary["final_return_per_seed"])
  log(f"Final mean return over the last {config.last_episodes} episodes: "
      f"{_fmt(summary['final_return_mean'])} ({ci_text}); per seed: "
      f"{per_seed}")
  log(f"Env steps: {summary['env_steps']} per seed; learner steps: "
      f"{summary['learner_steps']} per seed")
  log(f"Compile time: {_fmt(compile_time, 1)} s; wall time: "
      f"{wall_time:.1f} s; {_fmt(summary['env_steps_per_s'], 0)} env steps/s, "
      f"{_fmt(summary['learner_steps_per_s'], 1)} learner steps/s "
      f"(all seeds; {summary['timing_note']})")
  log(f"Outputs in {out}: {', '.join(OUTPUT_FILES)}, "
      f"{', '.join(params_files)}")
  return summary


# ------------------------------------------------------- command line ----


def parse_flags(argv: Sequence[str],
                flag_values: flags.FlagValues | None = None) -> list[str]:
  """Parses ``argv`` with ``--config`` (see ``common.parse_config_flags``)."""
  return common.parse_config_flags(
      argv, DEFAULT_CONFIG,
      "Evaluation config file (default: configs/evaluate.py); override "
      "its values with --config.<key>=<value>.",
      flag_values)


def _fail(message: Any) -> None:
  common.fail(PROGRAM, message)


def _flags_parser(argv: list[str]) -> list[str]:
  try:
    return parse_flags(argv)
  except UsageError as e:
    _fail(e)


def main(argv: Sequence[str]) -> None:
  if not flags.FLAGS["verbosity"].present:
    # Keep the output to this program's own lines (JAX and matplotlib log
    # INFO messages through absl otherwise); --verbosity=0 shows them.
    logging.set_verbosity(logging.WARNING)
  try:
    if len(argv) > 1:
      raise UsageError(f"Unexpected argument(s) {list(argv[1:])}: settings "
                       "are given as --config.<key>=<value>.")
    evaluate(flags.FLAGS.config)
  except UsageError as e:
    _fail(e)


def run() -> None:
  """Console entry point (``disco-eval``)."""
  main_module = sys.modules.get("__main__")
  if main_module is not None and not getattr(main_module, "__doc__", None):
    main_module.__doc__ = __doc__  # what absl's --help shows
  app.run(main, flags_parser=_flags_parser)


if __name__ == "__main__":
  run()
