"""Meta-training as a library:

```python
from disco.meta import trainer
summary = trainer.meta_train(num_meta_steps=10, output_dir="runs/my-rule")
```

``train`` checks the settings, builds the run (``plan.build``), meta-trains
(``MetaTrainer``, handing every meta-step to its hooks) and writes the outputs;
``disco-meta-train`` is this with flags.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from pathlib import Path
import time
from typing import Any

import jax
from ml_collections import config_dict

from disco import checks
from disco import distributed
from disco import errors
from disco import run_folders
from disco import weights as weights_lib
from disco.meta import checkpoints as ckpt_lib
from disco.meta import divergence
from disco.meta import history as history_lib
from disco.meta import hooks as hooks_lib
from disco.meta import meta_step
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import validation as validation_lib
from disco.update_rules import migrations

REWARDS_PLOT, LOSS_PLOT = run_folder.REWARDS_PLOT, run_folder.LOSS_PLOT


@dataclasses.dataclass(frozen=True)
class MetaTrainResult:
  """What ``run`` returns.

  Attributes:
    state: the final state.
    history: the metrics of every logged meta-step (resumed ones included).
    start_step: the meta-step this run started from.
    step_times: seconds of each meta-step of this run (the first compiles).
    wall_time: seconds of this run.
    checkpoints: the kept checkpoint folders.
    divergence: skipped meta-updates and restarted agents.
  """

  state: meta_step.MetaTrainState
  history: history_lib.MetricsHistory
  start_step: int
  step_times: list[float]
  wall_time: float
  checkpoints: list[Path]
  divergence: divergence.DivergenceRecord


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


class MetaTrainer:
  """Meta-trains (or resumes) a built run to ``num_meta_steps``; ``hooks`` run
  after the built-in ones. With several processes, process 0 alone logs and
  writes the outputs other than checkpoints; SIGTERM stops every process at the
  same meta-step with a checkpoint."""

  def __init__(
      self,
      plan: plan_lib.MetaTrainPlan,
      log: Callable[[str], None] = print,
      progress: bool = True,
      hooks: Sequence[hooks_lib.Hook] = (),
  ):
    self.plan = plan
    self.log = distributed.main_only(log)
    self.show_progress = progress
    self.extra_hooks = tuple(hooks)

  def _begin(self, manager: ckpt_lib.CheckpointManager) -> hooks_lib.Progress:
    """The run's progress at its start, resumed from the newest checkpoint
    (``config.resume``) or new; writes ``config.json``."""
    plan, s = self.plan, self.plan.run_settings
    resumed = None
    if s.resume:
      resumed = run_folder.resume(
          plan.output_dir,
          plan.resolved_config(),
          s.num_meta_steps,
          manager,
          lambda: plan_lib.abstract_state(plan.population, plan.rule),
          self.log,
      )
    if distributed.is_main():
      plan_lib.write_config(plan)
    record = divergence.DivergenceRecord.from_json(
        None if resumed is None else resumed.extra.get("divergence"),
        [g.name for g in plan.groups],
        s.max_consecutive_skips,
    )
    if resumed is None:
      state, history = (
          plan_lib.initial_state(plan),
          history_lib.MetricsHistory(),
      )
    else:
      state = resumed.state
      history = history_lib.MetricsHistory(resumed.history)
    start = int(jax.device_get(state.step))
    return hooks_lib.Progress(
        plan=plan,
        log=self.log,
        state=state,
        step=start,
        start=start,
        history=history,
        record=record,
    )

  def _describe(self, progress: hooks_lib.Progress) -> str:
    plan, s = self.plan, self.plan.run_settings
    return (
        f"Meta-training a {s.rule} rule (init: {s.init_meta_params}, "
        f"estimator: {s.estimator}) on {plan.groups_text()} over "
        f"{len(plan.population.devices)} device(s)"
        + run_folders.processes_text("of")
        + f"; {s.batch_size} envs per agent, rollouts of "
        f"{s.population.rollout_len}, {s.population.inner_steps} inner "
        f"step(s); meta-steps {progress.start} -> {s.num_meta_steps}; "
        f"writing to {plan.output_dir}"
    )

  def _loop(
      self, hooks, progress: hooks_lib.Progress, step_times, watchdog
  ) -> None:
    """The meta-steps, each handed to every hook; every started hook ends,
    however the loop ends."""
    population, last = self.plan.population, progress.num_meta_steps
    started: list[hooks_lib.Hook] = []
    failure = None
    try:
      for hook in hooks:
        started.append(hook)
        hook.start(progress)
      for k in range(progress.start + 1, last + 1):
        t0 = time.perf_counter()
        state, logs = population.step(progress.state)
        jax.block_until_ready(state.step)
        step_times.append(time.perf_counter() - t0)
        progress.step_time = step_times[-1]
        progress.state, progress.logs, progress.step = state, logs, k
        watchdog.beat()
        for hook in hooks:
          hook.after_step(progress)
        watchdog.beat()
        if progress.diverged:
          break
    except BaseException as e:
      failure = e
      raise
    finally:
      for hook in reversed(started):
        hook.end(progress, failure)

  def run(self) -> MetaTrainResult:
    """Meta-trains to ``num_meta_steps``.

    Raises:
      errors.Diverged: ``max_consecutive_skips`` meta-steps in a row skipped
        their update (metrics written up to there; no checkpoint added).
    """
    plan, s = self.plan, self.plan.run_settings
    out = plan.output_dir
    # Every process has checked the output folder before process 0 writes.
    distributed.barrier("disco-meta-train: built")
    manager = ckpt_lib.CheckpointManager(
        out / run_folder.CHECKPOINT_DIR, keep=s.keep_checkpoints
    )
    progress = self._begin(manager)
    hooks: list[hooks_lib.Hook] = [
        hooks_lib.DivergenceHook(),
        hooks_lib.MetricsHook(self.show_progress),
        hooks_lib.CheckpointHook(manager),
    ]
    if plan.validation is not None:
      hooks.append(hooks_lib.ValidationHook(plan.validation))
    hooks += self.extra_hooks
    self.log(self._describe(progress))
    resume_hint = (
        "restart every process with --config.resume=True "
        f"--config.output_dir={out} to continue from the last checkpoint."
    )
    step_times: list[float] = []
    wall_start = time.perf_counter()
    with (
        distributed.ends_process_on_failure(settings_lib.PROGRAM, resume_hint),
        distributed.Watchdog(
            settings_lib.PROGRAM,
            s.distributed.step_timeout if s.distributed else 0,
            "meta-step",
            resume_hint,
        ) as watchdog,
    ):
      # The hooks end before a failure is reported (the progress bar closes
      # its line first).
      self._loop(hooks, progress, step_times, watchdog)
    if progress.diverged:
      raise errors.Diverged(
          _diverged_message(
              progress.record, progress.step, progress.checkpoints
          )
      )
    return MetaTrainResult(
        state=progress.state,
        history=progress.history,
        start_step=progress.start,
        step_times=step_times,
        wall_time=time.perf_counter() - wall_start,
        checkpoints=progress.checkpoints,
        divergence=progress.record,
    )


def run(
    plan: plan_lib.MetaTrainPlan,
    log: Callable[[str], None] = print,
    progress: bool = True,
    hooks: Sequence[hooks_lib.Hook] = (),
) -> MetaTrainResult:
  """``MetaTrainer(plan, log, progress, hooks).run()``."""
  return MetaTrainer(plan, log, progress, hooks).run()


# ------------------------------------------------------------- writing ----


def write(
    plan: plan_lib.MetaTrainPlan,
    result: MetaTrainResult,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Exports the meta-parameters, plots the curves and writes the summary
  (process 0 only; every process returns the summary)."""
  out, history = plan.output_dir, result.history
  main, log = distributed.is_main(), distributed.main_only(log)
  final_step = int(jax.device_get(result.state.step))
  export_path = out / run_folder.META_PARAMS_FILE
  try:
    if main:
      plan_lib.exporter(plan)(export_path, result.state.meta_params, final_step)
  except weights_lib.NonFiniteError as e:  # the meta-step never lets this be
    raise errors.Diverged(errors.one_line(e)) from None
  if main and len(history):
    history.plot(
        out / REWARDS_PLOT,
        out / LOSS_PLOT,
        title=f"Meta-training on {plan.groups_text()}",
    )
  steady, compile_time = run_folders.steady_state(result.step_times)
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
    run_folders.write_json(out / run_folder.SUMMARY_FILE, summary)
  fmt = run_folders.fmt
  log(
      f"Meta-step {final_step}: meta loss {fmt(last_row.get('meta_loss'))}, "
      f"reward per step {fmt(last_row.get('rewards'))} (positive "
      f"{fmt(last_row.get('pos_reward_frac'))}, negative "
      f"{fmt(last_row.get('neg_reward_frac'))}); "
      f"{fmt(steady, 2)} s per meta-step, compile "
      f"{fmt(compile_time, 1)} s, wall {result.wall_time:.1f} s."
  )
  log(
      f"Outputs in {out}: {run_folder.CONFIG_FILE}, {run_folder.METRICS_FILE}, {REWARDS_PLOT}, "
      f"{LOSS_PLOT}, {run_folder.META_PARAMS_FILE}, {run_folder.SUMMARY_FILE}, {run_folder.CHECKPOINT_DIR}/. "
      f"Evaluate the rule with: disco-eval --config.rule={export_path}"
  )
  return summary


def train(
    config: settings_lib.MetaTrainSettings | config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
    hooks: Sequence[hooks_lib.Hook] = (),
) -> dict[str, Any]:
  """Builds, runs (or resumes) and writes one meta-training run, holding the
  output folder's lock throughout; returns the summary.

  Raises:
    UsageError: bad settings (before anything is trained), or an output folder
      another process writes.
    errors.ResourceError: the disk is full or the device memory exhausted.
  """
  plan = plan_lib.build(config)
  out, resume = plan.output_dir, plan.run_settings.resume
  lock = None
  if distributed.is_main():
    lock = run_folders.claim_output_dir(out, settings_lib.PROGRAM)
  try:
    if lock is not None:  # again, now that no other process writes
      run_folders.open_run_folder(out, lock, run_folder.RUN_KIND, resume=resume)
    with errors.resource_errors(
        f"continue with --config.resume=True --config.output_dir={out} (the "
        "same command otherwise)."
    ):
      return write(plan, run(plan, log, progress, hooks), log)
  finally:
    if lock is not None:
      lock.release()


def meta_train(
    config: config_dict.ConfigDict | None = None,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    hooks: Sequence[hooks_lib.Hook] = (),
    **overrides: Any,
) -> dict[str, Any]:
  """One meta-training run from Python; returns its summary.

  ``config`` defaults to ``configs/meta_train.py``'s; ``overrides`` set its keys
  (``num_meta_steps=10``, ``population=({'env': 'catch'},)``,
  ``es={'population_size': 8}``: a dict updates that block). Every setting is
  checked before anything runs.
  """
  config = checks.config_or_default(config, settings_lib.CONFIG_NAME)
  rule = str(overrides.get("rule") or config.rule)
  checks.override(
      config, overrides, lambda path: migrations.new_key(rule, path)
  )
  return train(config, log=log, progress=progress, hooks=hooks)
