"""What a meta-evaluation writes into its run folder (whole files only) and
tells trackers: ``config.json`` before training (with the input files' SHA-256),
then ``metrics.csv``, ``learning_curve.png``, ``params_seed<k>.npz`` (with
normalisation also ``normalizer_seed<k>.npz``, ``normalization.load``) and
``summary.json``; per-episode environment info adds ``episode/<name>`` columns
and ``final_episode_info``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
from pathlib import Path
from typing import Any

import jax
import numpy as np

from disco import distributed
from disco import errors
from disco import files
from disco import run_folders
from disco import tracking
from disco import weights as weights_lib
from disco.environments import registry as env_registry
from disco.evaluation import plan as plan_lib
from disco.evaluation import running
from disco.evaluation import settings as settings_lib
from disco.scoring import aggregates
from disco.training import acting
from disco.training import analysis
from disco.training import loop as loop_lib
from disco.training import normalization
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve

OUTPUT_FILES = (
    "config.json",
    "metrics.csv",
    "learning_curve.png",
    "summary.json",
)
RUN_KIND = run_folders.RunKind(
    name="eval",
    description="an evaluation run",
    owns=(
        *OUTPUT_FILES,
        "params_seed*.npz",
        "normalizer_seed*.npz",
        tracking.TENSORBOARD_DIR,
        tracking.WANDB_DIR,
    ),
    again="pass --config.overwrite=True to replace it",
)
INPUT_FILES = "input_files"  # the key of the files read, by digest
# Environment settings that name a file the environment reads (XLand's
# ruleset benchmark, ``disco.environments.xminigrid_envs``).
FILE_SETTINGS = ("benchmark_path",)
_SHOWN_HEX = 12  # digits of a digest shown in a message


def env_input_paths(
    env_settings: Mapping[str, Any], prefix: str = "env_settings."
) -> dict[str, str]:
  """``{prefix + setting: path}`` of the ``FILE_SETTINGS`` that
  ``env_settings`` sets (to a non-empty value)."""
  return {
      prefix + key: str(env_settings[key])
      for key in FILE_SETTINGS
      if env_settings.get(key)
  }


def input_paths(plan: plan_lib.EvalPlan) -> dict[str, str]:
  """The files a run reads, by role, paths as given: ``rule`` (a rule file),
  ``weights`` (a named rule's meta-parameter file, if given) and
  ``env_settings.<setting>`` (``env_input_paths``)."""
  paths = {}
  rule = str(plan.settings.rule).strip()
  if rule not in rule_registry.rule_names() and resolve.is_rule_path(rule):
    paths["rule"] = rule
  weights = str(plan.settings.weights or "").strip()
  if weights:
    paths["weights"] = weights
  paths.update(env_input_paths(plan.env_settings))
  return paths


def file_digests(paths: Mapping[str, str]) -> dict[str, dict[str, str]]:
  """``{role: {"path": path, "sha256": hex}}`` of ``{role: path}`` (``~``
  expanded to read, not in the record).

  Raises:
    UsageError: a file cannot be read (naming its role and path).
  """
  out = {}
  for role, path in sorted(paths.items()):
    try:
      digest = files.file_digest(Path(path).expanduser())
    except OSError as e:
      raise errors.UsageError(
          f"Cannot read the {role} file {path}: {e.strerror or e}."
      ) from None
    out[role] = dict(path=str(path), sha256=digest)
  return out


def input_files(plan: plan_lib.EvalPlan) -> dict[str, dict[str, str]]:
  """``file_digests`` of ``input_paths``: ``config.json``'s ``input_files``.

  Raises:
    UsageError: a file cannot be read.
  """
  return file_digests(input_paths(plan))


def input_file_changes(
    saved: Any,
    current: Mapping[str, Mapping[str, str]],
    since: str = "the run",
) -> list[str]:
  """Why recorded digests ``saved`` (a ``file_digests`` record; anything else:
  none recorded) do not vouch for ``current``: per role of ``current``,
  ``"<role> file <path> changed since <since> (sha256 ...)"`` or ``"no digest of
  <role> file <path> was recorded, ..."``; empty when every file is the same."""
  saved = saved if isinstance(saved, dict) else {}
  out = []
  for role, now in sorted(current.items()):
    what = f"{role} file {now['path']}"
    entry = saved.get(role)
    old = entry.get("sha256") if isinstance(entry, dict) else None
    if not isinstance(old, str):
      out.append(f"no digest of {what} was recorded, so it cannot be verified")
    elif old != now["sha256"]:
      out.append(
          f"{what} changed since {since} (sha256 {old[:_SHOWN_HEX]}... -> "
          f"{now['sha256'][:_SHOWN_HEX]}...)"
      )
  return out


def resolved_config(plan: plan_lib.EvalPlan) -> dict[str, Any]:
  """The config as ``config.json`` saves it: the settings given, with the run's
  resolved environment settings, learning rate and loop."""
  resolved = plan.settings.to_config()
  resolved.update(
      output_dir=str(plan.output_dir),
      env_settings=plan.env_settings,
      learning_rate=plan.rule.settings.learning_rate,
      **dataclasses.asdict(plan.loop_config),
  )
  return run_folders.to_jsonable(resolved)


def write_config(plan: plan_lib.EvalPlan) -> None:
  """Creates ``output_dir`` and writes ``config.json``, whose
  ``run.input_files`` lets a later change of an input file mark the run stale
  (``disco.comparison.runs.Cell.status``).

  Raises:
    UsageError: an input file cannot be read.
  """
  inputs = input_files(plan)
  out = run_folders.make_dir(plan.output_dir)
  run_folders.write_json(
      out / "config.json",
      dict(
          config=resolved_config(plan),
          rule_settings=plan.rule.settings.to_dict(),
          preset=plan.preset.record() if plan.preset else None,
          run={
              "seeds": plan.seeds,
              **plan.schedule,
              **run_folders.run_record(),
              INPUT_FILES: inputs,
          },
      ),
  )


def open_output(
    plan: plan_lib.EvalPlan,
    program: str = settings_lib.PROGRAM,
    *,
    warn: bool = True,
) -> files.FolderLock:
  """Takes ``plan.output_dir``'s lock (held until released; ``warn`` as
  ``run_folders.claim_output_dir``'s), checks under it that the folder is free
  (``run_folders.open_run_folder``; ``overwrite`` removes an earlier
  evaluation's files), writes ``config.json`` and returns the lock.

  Raises:
    UsageError: another writer, an earlier run (without overwrite), another kind
      of run, or foreign files.
  """
  lock = run_folders.claim_output_dir(plan.output_dir, program, warn=warn)
  try:
    run_folders.open_run_folder(
        plan.output_dir, lock, RUN_KIND, overwrite=plan.settings.overwrite
    )
    write_config(plan)
  except BaseException:
    lock.release()
    raise
  return lock


def _rates(
    plan: plan_lib.EvalPlan, result: running.EvalResult
) -> dict[str, Any]:
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
          "steady-state rates exclude the first call, which compiles"
          if compile_time is not None
          else "single call: rates include compilation"
      ),
  )


def _params_file(seed: int) -> str:
  return f"params_seed{seed}.npz"


def normalizer_file(seed: int) -> str:
  """The file of seed ``seed``'s normaliser statistics in a run folder
  (written when the run normalised observations or rewards;
  ``normalization.load`` reads it)."""
  return f"normalizer_seed{seed}.npz"


def _save_params(
    plan: plan_lib.EvalPlan, states: loop_lib.TrainState, diverged: set[int]
) -> None:
  """Saves the parameters (and normaliser statistics, if any) of this
  process's seeds, except those of the ``diverged`` seeds."""
  # One transfer to the host; slicing there compiles nothing.
  all_params, all_stats = jax.device_get(
      (states.learner.params, states.normalizer)
  )
  for k, seed in enumerate(plan.local_seeds):
    if seed in diverged:
      continue
    take = lambda tree, k=k: jax.tree.map(lambda x: np.asarray(x[k]), tree)
    metadata = dict(
        rule=plan.rule.settings.rule,
        rule_label=plan.label,
        seed=seed,
        env=plan.settings.env,
        env_settings=run_folders.to_jsonable(plan.env_settings),
    )
    weights_lib.save_meta_params(
        plan.output_dir / _params_file(seed),
        take(all_params),
        metadata=dict(
            metadata,
            kind=resolve.AGENT_PARAMS_KIND,
            network=dict(plan.rule.settings.network),
        ),
    )
    if all_stats is not None:
      normalization.save(
          plan.output_dir / normalizer_file(seed), take(all_stats), metadata
      )


def diverged_text(summary: dict[str, Any]) -> str:
  """``seed S at env step N, ...`` of a summary's diverged seeds."""
  return ", ".join(
      f"seed {d['seed']} at env step {d['env_step']}"
      for d in summary["diverged_seeds"]
  )


def final_episode_info(
    metrics: dict[str, np.ndarray], last_episodes: int
) -> dict[str, dict[str, Any]]:
  """Per ``episode/<name>`` metric, its final value over the same last episodes
  as the final return: ``{name: {"per_seed": [...], "mean": x}}`` (None where a
  seed diverged or has no episode); empty without environment info."""
  episodes = np.asarray(metrics["episodes"])
  out = {}
  for name in sorted(metrics):
    if not name.startswith(acting.EPISODE_INFO_PREFIX):
      continue
    # Iteration means back to sums, so that windows weigh every episode.
    sums = np.nan_to_num(np.asarray(metrics[name], np.float64)) * episodes
    windowed = dict(metrics, return_sum=sums)
    per_seed = analysis.final_scores(windowed, last_episodes)
    finite = per_seed[np.isfinite(per_seed)]
    out[name] = dict(
        per_seed=[_finite(x) for x in per_seed],
        mean=_finite(finite.mean()) if finite.size else None,
    )
  return out


def _finite(x: float) -> float | None:
  return float(x) if np.isfinite(x) else None


def summarize(
    plan: plan_lib.EvalPlan, result: running.EvalResult
) -> dict[str, Any]:
  """The summary (``summary.json``) of a run: its final scores, diverged
  seeds, parameter files and rates."""
  summary = analysis.summarize(result.metrics, plan.settings.last_episodes)
  diverged_seeds = [
      dict(seed=seed, env_step=at)
      for seed, at in zip(
          plan.seeds, summary["diverged_at_env_step"], strict=True
      )
      if at is not None
  ]
  lost = {d["seed"] for d in diverged_seeds}
  summary.update(
      rule=plan.label,
      env=plan.settings.env,
      seeds=plan.seeds,
      diverged_seeds=diverged_seeds,
      output_dir=str(plan.output_dir),
      params_files=[_params_file(s) for s in plan.seeds if s not in lost],
      wall_time_s=result.wall_time,
      total_env_steps=int(plan.env_steps * len(plan.seeds)),
      **_rates(plan, result),
  )
  if plan.loop_config.normalizes:
    summary["normalizer_files"] = [
        normalizer_file(s) for s in plan.seeds if s not in lost
    ]
  info = final_episode_info(result.metrics, plan.settings.last_episodes)
  if info:
    summary["final_episode_info"] = info
  return summary


def write(
    plan: plan_lib.EvalPlan,
    result: running.EvalResult,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Writes metrics, curve, parameters and summary; returns the summary. With
  several processes, each writes its seeds' parameters and process 0 the rest.
  """
  out, metrics = plan.output_dir, result.metrics
  main = distributed.is_main()
  if main:
    analysis.write_metrics_csv(out / "metrics.csv", metrics, plan.seeds)
    analysis.plot_learning_curves(
        {plan.label: metrics},
        path=out / "learning_curve.png",
        min_episodes=running.CURVE_EPISODES,
        title=f"{plan.label} on {plan.settings.env}",
    )
  summary = summarize(plan, result)
  _save_params(
      plan, result.states, {d["seed"] for d in summary["diverged_seeds"]}
  )
  if main:
    run_folders.write_json(out / "summary.json", summary)
    track(plan, metrics, summary)
  _log_summary(plan, metrics, summary, distributed.main_only(log))
  return summary


# Disco103 on Catch 8x8 with its own settings and the published notebook's
# loop (the README's first command), 8 seeds to 101,500 env steps: 7 first
# reached a 500-episode mean return of 0.9 between these env steps, one did
# not (benchmarks/first_run_seeds.py; docs: results/learning.md).
FIRST_RUN_TAKEOFF = dict(earliest=32_074, latest=50_170, reached=7, seeds=8)
FIRST_RUN_THRESHOLD = 0.9


def first_run_note(
    plan: plan_lib.EvalPlan, summary: dict[str, Any]
) -> str | None:
  """For the README's first run (Disco103 on default Catch, default settings)
  with seeds that ended below ``FIRST_RUN_THRESHOLD``: when such seeds learn,
  so a late seed is not mistaken for a fault; else None."""
  late = [
      seed
      for seed, value in zip(
          plan.seeds, summary["final_return_per_seed"], strict=True
      )
      if value is not None and value < FIRST_RUN_THRESHOLD
  ]
  if (
      not late
      or plan.rule.label != "disco103"
      or plan.rule.settings != rule_registry.default_settings("disco103")
      or env_registry.describe_settings(plan.settings.env, plan.env_settings)
      != "catch"
      or plan.loop_config != loop_lib.LoopConfig()
  ):
    return None
  t = FIRST_RUN_TAKEOFF
  return (
      f"Seed(s) {', '.join(map(str, late))} ended below "
      f"{FIRST_RUN_THRESHOLD}: Disco103 learns Catch late, at a point that "
      f"depends on the seed. With these settings {t['reached']} of "
      f"{t['seeds']} seeds measured first reached {FIRST_RUN_THRESHOLD} "
      f"between {t['earliest']} and {t['latest']} env steps (the other "
      f"stayed near 0.5); train longer to see it, e.g. "
      f"--config.total_env_steps={-(-t['latest'] // 10_000) * 10_000}."
  )


def _log_summary(
    plan: plan_lib.EvalPlan,
    metrics: dict[str, np.ndarray],
    summary: dict[str, Any],
    log: Callable[[str], None],
) -> None:
  fmt = run_folders.fmt
  log(
      f"Learning curve (mean return over windows of {running.CURVE_EPISODES} "
      "episodes, mean over seeds):\n"
      + analysis.text_curve(metrics, running.CURVE_EPISODES)
  )
  ci, num_seeds = summary["final_return_ci"], summary["final_return_seeds"]
  ci_text = f"{num_seeds} seed(s): no confidence interval"
  if ci is not None:
    ci_text = (
        f"95% bootstrap CI [{ci[0]:.3f}, {ci[1]:.3f}] over {num_seeds} seeds"
    )
    actual = aggregates.short_coverage(num_seeds, 1)
    if actual is not None:  # the plug-in variance: few seeds, too narrow
      ci_text += f", which covers about {actual:.0%} at this seed count"
  if summary["diverged_seeds"]:
    ci_text += f"; diverged: {diverged_text(summary)}"
  per_seed = ", ".join(fmt(x) for x in summary["final_return_per_seed"])
  log(
      f"Final mean return over the last {plan.settings.last_episodes} "
      f"episodes: {fmt(summary['final_return_mean'])} ({ci_text}); per "
      f"seed: {per_seed}"
  )
  note = first_run_note(plan, summary)
  if note:
    log(note)
  info = summary.get("final_episode_info") or {}
  if info:
    shown = {k: v["mean"] for k, v in info.items() if v["mean"] != 0.0}
    zeros = len(info) - len(shown)
    log(
        "Final episode info over the same episodes (mean over seeds): "
        + ", ".join(f"{k} {fmt(v)}" for k, v in shown.items())
        + (f"{'; ' if shown else ''}{zeros} more at 0" if zeros else "")
    )
  log(
      f"Env steps: {summary['env_steps']} per seed; learner steps: "
      f"{summary['learner_steps']} per seed"
  )
  compile_text = (
      f"{fmt(summary['compile_time_s'], 1)} s longer than a later call "
      "(mostly compiling)"
      if summary["compile_time_s"] is not None
      else "the only call (compilation not separable from training)"
  )
  log(
      f"First call: {compile_text}; wall time: "
      f"{summary['wall_time_s']:.1f} s; "
      f"{fmt(summary['env_steps_per_s'], 0)} env steps/s, "
      f"{fmt(summary['learner_steps_per_s'], 1)} learner steps/s "
      f"(all seeds; {summary['timing_note']})"
  )
  seed_files = summary["params_files"] + summary.get("normalizer_files", [])
  log(
      f"Outputs in {plan.output_dir}: {', '.join(OUTPUT_FILES)}, "
      f"{', '.join(seed_files)}"
  )


def track(
    plan: plan_lib.EvalPlan,
    metrics: dict[str, np.ndarray],
    summary: dict[str, Any],
) -> None:
  """Sends ``metrics.csv``'s and ``summary.json``'s contents to the trackers of
  ``settings.tracking`` (nothing for ``csv``): per iteration, every metric as
  ``<metric>/seed_<k>`` against environment steps, then the summary."""
  spec = plan.settings.tracking
  if tracking.parse(spec) == (tracking.CSV,):
    return
  rows = analysis.metrics_to_rows(metrics, plan.seeds)
  with tracking.open_tracker(
      spec,
      plan.output_dir,
      name=f"eval-{plan.label}-{plan.settings.env}",
      config=dict(
          config=plan.settings.to_config(),
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
