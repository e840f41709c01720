"""The hooks of the meta-training loop (``disco.meta.trainer.MetaTrainer``).

After every meta-step the loop hands its ``Progress`` to each hook in order:
``DivergenceHook``, ``MetricsHook``, ``CheckpointHook``, ``ValidationHook``,
then the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from pathlib import Path
import sys
from typing import Any

import jax
import tqdm

from disco import distributed
from disco import errors
from disco import run_folders
from disco import stopping
from disco import tracking
from disco.meta import checkpoints as ckpt_lib
from disco.meta import divergence
from disco.meta import history as history_lib
from disco.meta import meta_step
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import validation as validation_lib

# ---------------------------------------------------------- the loop ----


@dataclasses.dataclass
class Progress:
  """What one run's hooks share on the host: the ``plan``, ``log`` (prints in
  process 0), the latest ``state``, its meta-``step`` (``start``: the first),
  device ``logs``, ``step_time`` and logged ``row``, the ``history``, the
  divergence ``record``, the ``tracker``, ``diverged`` and, after the run, the
  kept ``checkpoints``."""

  plan: plan_lib.MetaTrainPlan
  log: Callable[[str], None]
  state: meta_step.MetaTrainState
  step: int
  start: int
  history: history_lib.MetricsHistory
  record: divergence.DivergenceRecord
  tracker: tracking.Tracker = dataclasses.field(
      default_factory=tracking.Tracker
  )
  logs: Any = None
  step_time: float = 0.0
  row: dict[str, Any] | None = None
  diverged: bool = False
  checkpoints: list[Path] = dataclasses.field(default_factory=list)

  @property
  def num_meta_steps(self) -> int:
    return self.plan.run_settings.num_meta_steps

  @property
  def main(self) -> bool:
    return distributed.is_main()


class Hook:
  """A step of the meta-training loop's bookkeeping.

  ``start`` runs before the first meta-step, ``after_step`` after each
  (``progress.step``), ``end`` once when the loop ends however it ends
  (``failure``: the exception ending it, else None). Hooks run in order; ``end``
  in reverse order.
  """

  def start(self, progress: Progress) -> None:
    del progress

  def after_step(self, progress: Progress) -> None:
    del progress

  def end(self, progress: Progress, failure: BaseException | None) -> None:
    del progress, failure


class DivergenceHook(Hook):
  """Logs skipped meta-updates and restarted agents; marks the run diverged
  after ``max_consecutive_skips`` skips in a row."""

  def after_step(self, progress: Progress) -> None:
    names = [g.name for g in progress.plan.groups]
    health = divergence.DivergenceRecord.health_logs(progress.logs, names)
    for event in progress.record.update(progress.step, jax.device_get(health)):
      progress.log(event)
    progress.diverged = progress.record.should_stop


class MetricsHook(Hook):
  """``metrics.csv`` (a row every ``log_every`` meta-steps), the tracking
  backends and the progress bar."""

  def __init__(self, show_bar: bool = True):
    self.show_bar = show_bar
    self.bar = None

  def start(self, progress: Progress) -> None:
    plan, out = progress.plan, progress.plan.output_dir
    self.csv = out / run_folder.METRICS_FILE
    if progress.main:
      progress.history.write_csv(self.csv)
      if plan.run_settings.tracking != (tracking.CSV,):
        progress.tracker = tracking.open_tracker(
            plan.config.tracking,
            out,
            name=f"meta-train-{out.resolve().name}",
            config=dict(config=plan.resolved_config()),
        )
    self.bar = tqdm.tqdm(
        total=progress.num_meta_steps,
        initial=progress.start,
        unit="meta-step",
        desc="meta-train",
        disable=not (self.show_bar and progress.main),
        file=sys.stderr,
        dynamic_ncols=True,
    )

  def after_step(self, progress: Progress) -> None:
    k, s = progress.step, progress.plan.run_settings
    progress.row = None
    if k % s.log_every == 0 or k == s.num_meta_steps or progress.diverged:
      row = history_lib.metrics_row(
          k, progress.logs, progress.plan.groups, s.population.rollout_len
      )
      row.update(progress.record.totals())
      if progress.main:
        progress.history.append_csv(self.csv, row)
        progress.tracker.scalars(k, row)
      else:
        progress.history.append(row)
      progress.row = row
      self.bar.set_postfix(
          s_per_step=f"{progress.step_time:.2f}",
          meta_loss=run_folders.fmt(row.get("meta_loss")),
          reward=run_folders.fmt(row.get("rewards")),
          skipped=progress.record.skipped_updates,
          refresh=False,
      )
    self.bar.update(1)

  def end(self, progress: Progress, failure: BaseException | None) -> None:
    del failure
    if self.bar is not None:
      self.bar.close()
    progress.tracker.close()


class CheckpointHook(Hook):
  """Checkpoints every ``checkpoint_every`` meta-steps, on a stop signal or
  pre-emption, and at exit (also after an error), whenever the last meta-step
  applied its update; with several processes, no exit checkpoint after a
  failure."""

  def __init__(self, manager: ckpt_lib.CheckpointManager):
    self.manager = manager

  def save(self, progress: Progress) -> Path:
    # A second SIGINT/SIGTERM while saving does not cut the save short.
    with stopping.signals_deferred():
      return self.manager.save(
          progress.state,
          history=progress.history.rows,
          config=progress.plan.resolved_config(),
          extra=dict(
              csv_rows=len(progress.history),
              divergence=progress.record.to_json(),
          ),
      )

  def after_step(self, progress: Progress) -> None:
    if progress.diverged:
      return
    k, every = progress.step, progress.plan.run_settings.checkpoint_every
    preempted = distributed.preempted(k)
    # Every process writes a checkpoint together: a signal to this process
    # alone saves only in a single-process run.
    stop_now = preempted or (
        stopping.stop_requested() and not distributed.is_multiprocess()
    )
    if progress.record.last_update_applied and (
        stop_now or (every and k % every == 0)
    ):
      self.save(progress)
    if preempted:
      raise distributed.Preempted(f"SIGTERM: stopped at meta-step {k}")
    stopping.check_stop(f"at meta-step {k}")

  def end(self, progress: Progress, failure: BaseException | None) -> None:
    step, start = progress.step, progress.start
    out = progress.plan.output_dir
    completed = failure is None and not progress.diverged
    if failure is not None and errors.resource_problem(failure) == "disk":
      pass  # a full disk: an exit checkpoint cannot be written either
    elif (
        failure is not None
        and distributed.is_multiprocess()
        and not isinstance(failure, distributed.Preempted)
    ):
      # A failure ends this process alone: no joint exit checkpoint.
      pass
    elif step > start and progress.record.last_update_applied:
      try:
        path = self.save(progress)
        if not completed:
          progress.log(
              f"Interrupted at meta-step {step}; saved {path}. "
              "Continue with --config.resume=True "
              f"--config.output_dir={out}."
          )
      except Exception as e:  # noqa: BLE001 - report, then re-raise the cause
        progress.log(
            f"Warning: the exit checkpoint failed: {errors.one_line(e)}"
        )
    elif step > start and not progress.diverged:
      progress.log(
          f"Meta-step {step} skipped its update, so no exit checkpoint was "
          "written; a resumed run continues from the newest checkpoint."
      )
    progress.checkpoints = [
        self.manager.path(s) for s in self.manager.all_steps()
    ]
    self.manager.close()


class ValidationHook(Hook):
  """Validates the meta-parameters on held-out environments when due
  (``validation.every``; at the start too), after applied meta-updates."""

  def __init__(self, validation: validation_lib.Validation):
    self.validation = validation

  def _validate(self, progress: Progress) -> None:
    # Reads the meta-parameters only; steps validated already are skipped.
    k = progress.step
    if self.validation.settings.due(k, progress.num_meta_steps):
      result = self.validation(progress.state.meta_params, k, progress.log)
      if result is not None:
        progress.tracker.scalars(k, result.scalars())

  def start(self, progress: Progress) -> None:
    self._validate(progress)

  def after_step(self, progress: Progress) -> None:
    if not progress.diverged and progress.record.last_update_applied:
      self._validate(progress)
