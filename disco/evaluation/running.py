"""Running a meta-evaluation: every seed trained, one compiled call at a time."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import sys
import time

import numpy as np
import tqdm

from disco import distributed
from disco import run_folders
from disco import stopping
from disco.environments import registry as env_registry
from disco.evaluation import plan as plan_lib
from disco.evaluation import settings as settings_lib
from disco.training import analysis
from disco.training import loop as loop_lib

CURVE_EPISODES = 100  # episodes per window of the learning curve / progress


@dataclasses.dataclass(frozen=True)
class EvalResult:
  """What ``run`` returns.

  Attributes:
    states: the final states of this process's ``local_seeds``.
    metrics: ``{name: [S, iterations]}`` on the host.
    call_times: seconds of each compiled call (the first compiles).
    learner_steps_per_call: learner steps of all seeds per call.
    wall_time: seconds of the whole run.
  """

  states: loop_lib.TrainState
  metrics: dict[str, np.ndarray]
  call_times: list[float]
  learner_steps_per_call: list[int]
  wall_time: float


def _describe(plan: plan_lib.EvalPlan, log: Callable[[str], None]) -> None:
  cfg = plan.loop_config
  log(
      f"Evaluating {plan.label} on "
      f"{env_registry.describe_settings(plan.settings.env, plan.env_settings)} "
      f"with seeds {plan.seeds}"
      + run_folders.processes_text("over")
      + f"; writing to {plan.output_dir}"
  )
  log(
      f"{plan.iterations} iterations x {cfg.env_steps_per_iteration} env "
      f"steps ({cfg.num_envs} envs x {cfg.rollout_len} steps) = "
      f"{plan.env_steps} env steps per seed (asked for "
      f"{plan.settings.total_env_steps}), in {plan.num_calls} call(s) of "
      f"{plan.iterations_per_call} iterations, so the loop is compiled once "
      "(the first call includes compilation)."
  )


class _Progress:
  """The progress bar of a run, and the seeds reported as diverged."""

  def __init__(
      self, plan: plan_lib.EvalPlan, report: Callable[[str], None], show: bool
  ):
    self.plan, self.report, self.reported = plan, report, set()
    self.steps_per_call = (
        plan.iterations_per_call * plan.loop_config.env_steps_per_iteration
    )
    self.bar = tqdm.tqdm(
        total=plan.env_steps,
        unit="step",
        unit_scale=True,
        desc=plan.label,
        disable=not (show and distributed.is_main()),
        file=sys.stderr,
        dynamic_ncols=True,
    )

  def update(self, so_far: dict[str, np.ndarray], seconds: float) -> None:
    """Reports newly diverged seeds and moves the bar one call on."""
    curve = analysis.return_curve(so_far, CURVE_EPISODES)[:, -1]
    finite = curve[np.isfinite(curve)]
    diverged = analysis.diverged_env_steps(so_far)
    for seed, at in zip(self.plan.local_seeds, diverged, strict=True):
      if at is not None and seed not in self.reported:
        self.reported.add(seed)
        self.report(
            f"Seed {seed} diverged at env step {at} (non-finite agent "
            "parameters): left out of the curves and final statistics "
            "from there on."
        )
    self.bar.update(self.steps_per_call)
    rate = self.steps_per_call * len(self.plan.local_seeds) / seconds
    self.bar.set_postfix(
        steps_per_s=f"{rate:.0f}",
        mean_return=run_folders.fmt(
            float(finite.mean()) if finite.size else None, 2
        ),
        **({"diverged": len(self.reported)} if self.reported else {}),
    )

  def __enter__(self) -> _Progress:
    return self

  def __exit__(self, *exc) -> None:
    self.bar.close()


def run(
    plan: plan_lib.EvalPlan,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> EvalResult:
  """Trains every seed of ``plan`` (vmapped), one compiled call at a time; with
  several processes each trains its ``local_seeds`` and every process gets every
  seed's metrics."""
  report = log  # every process reports its own seeds' divergence
  _describe(plan, distributed.main_only(log))
  wall_start = time.perf_counter()
  chunks: list[dict[str, np.ndarray]] = []
  call_times: list[float] = []
  hint = "start the evaluation again in every process."
  program = settings_lib.PROGRAM
  with (
      distributed.ends_process_on_failure(program, hint),
      distributed.Watchdog(
          program, plan.settings.step_timeout, "training call", hint
      ) as watchdog,
      _Progress(plan, report, progress) as bar,
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
      bar.update(analysis.concat_metrics(chunks), call_times[-1])
    metrics = distributed.gather(
        analysis.concat_metrics(chunks),
        [len(block) for block in distributed.split(plan.seeds)],
    )
  # Learner steps of all seeds at the end of each call.
  done = np.asarray(metrics["learner_steps"])[
      :, plan.iterations_per_call - 1 :: plan.iterations_per_call
  ].sum(axis=0)
  return EvalResult(
      states=states,
      metrics=metrics,
      call_times=call_times,
      learner_steps_per_call=[int(x) for x in np.diff(done, prepend=0)],
      wall_time=time.perf_counter() - wall_start,
  )
