"""Running a comparison: rules x environments x seeds, then its statistics.

Every rule runs on every environment through ``disco.evaluation`` into
``output_dir/runs/<rule>/<env>``; finished runs are skipped, so a killed sweep
continues where it stopped. Then ``output_dir`` gets ``report.md``,
``results.csv``, ``statistics.json`` and figures (``disco.comparison.report``).
With ``run_dirs`` it only aggregates existing ``disco-eval`` folders; with
``shard="i/n"`` it runs every n-th run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import json
from pathlib import Path
from typing import Any

from ml_collections import config_dict

from disco import errors
from disco import evaluation
from disco import files
from disco import run_folders
from disco import startup
from disco import stopping
from disco.comparison import report as report_lib
from disco.comparison import results as results_lib
from disco.comparison import runs
from disco.comparison import settings as settings_lib
from disco.comparison import tuning as tuning_lib
from disco.comparison import vmapped_grid
from disco.environments import reference_scores
from disco.environments import registry as env_registry
from disco.scoring import aggregates

RUN_KIND = run_folders.RunKind(
    name="compare",
    description="a comparison",
    owns=(
        runs.RUNS_DIR,
        tuning_lib.TUNING_DIR,
        tuning_lib.TUNING_CSV,
        "report.md",
        "results.csv",
        "statistics.json",
        "*.png",
    ),
    again="run the same command to continue it",
)


def build(
    settings: settings_lib.CompareSettings | config_dict.ConfigDict,
) -> runs.ComparePlan:
  """Resolves the runs of ``settings`` (a config is checked first) and builds
  every run's ``disco-eval`` plan once, so a bad rule, environment or setting
  fails before anything is trained.

  Raises:
    UsageError: any bad setting, in one line.
  """
  if not isinstance(settings, settings_lib.CompareSettings):
    settings = settings_lib.CompareSettings.from_config(settings)
  startup.start(settings_lib.PROGRAM, imports=settings.imports)
  output_dir = run_folders.output_dir(settings.output_dir, "compare")
  cells = []
  if not settings.run_dirs:
    if settings.tuning is not None:
      tuning_lib.check_grid(settings.tuning)
    cells = runs.make_cells(settings, output_dir)
  plan = runs.ComparePlan(settings=settings, cells=cells, output_dir=output_dir)
  for cell in cells:  # every run's settings, checked before training
    points = tuning_lib.tuning_cells(plan, cell) if cell.tuned else []
    for c in [*(c for _, c in points), cell]:
      _check_cell(plan, c)
  return plan


def _check_cell(plan: runs.ComparePlan, cell: runs.Cell) -> None:
  try:
    reference_scores.normalize(0.0, cell.env_key, plan.references)
  except ValueError as e:
    raise errors.UsageError(
        f"{errors.one_line(e)} From the command line: --config.references="
        f"\"('{cell.env_key}:random=R,reference=X,source=TEXT',)\" (R: the "
        "random policy's return, X: a good policy's)."
    ) from None
  cell.build(plan.settings)


def run(
    plan: runs.ComparePlan,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> list[Path]:
  """Runs this process's unfinished runs (a damaged or stale one runs again,
  saying why); returns every run folder."""
  cells = plan.my_cells()
  status = [tuning_lib.status(plan, c) for c in cells]
  todo = [
      c for c, (finished, _) in zip(cells, status, strict=True) if not finished
  ]
  s = plan.settings
  log(
      f"{len(plan.cells)} runs ({len(s.rules)} rules x {len(s.envs)} "
      f"environments, {s.num_seeds} seeds each); this process: "
      f"{len(cells)}, of which {len(cells) - len(todo)} finished already; "
      f"writing to {plan.output_dir}"
  )
  for cell, (_, why) in zip(cells, status, strict=True):
    if why is not None:
      log(f"Running {cell.output_dir} again: {why}.")
  for i, cell in enumerate(todo):
    stopping.check_stop(f"before run {i + 1} of {len(todo)}")
    where = f"[{i + 1}/{len(todo)}]"
    if cell.tuned:
      cell = _tune(plan, cell, where, log, progress)
      if cell.status(plan.settings)[0]:
        continue
    env_text = env_registry.describe_settings(cell.env, cell.env_settings)
    log(f"{where} {cell.label} on {env_text}")
    _train(cell, plan.settings, progress)
  return [c.output_dir for c in plan.cells]


def _tune(
    plan: runs.ComparePlan,
    cell: runs.Cell,
    where: str,
    log: Callable[[str], None],
    progress: bool,
) -> runs.Cell:
  """Trains ``cell``'s unfinished tuning runs (one vmapped program where
  ``vmapped_grid.prepare`` allows and ``tune.vmap``, else one by one); returns
  ``cell`` with the chosen settings."""
  todo = []
  for point, tuning_cell in tuning_lib.tuning_cells(plan, cell):
    finished, why = tuning_cell.status(plan.settings)
    if finished:
      continue
    if why is not None:
      log(f"Running {tuning_cell.output_dir} again: {why}.")
    todo.append((point, tuning_cell))
  if todo:
    what = (
        f"{where} tuning {cell.rule} on "
        f"{env_registry.describe_settings(cell.env, cell.env_settings)}: "
        f"{len(todo)} point(s), seeds {list(plan.tuning.seeds)}"
    )
    program: vmapped_grid.GridProgram | str = "config.tune.vmap=False"
    if plan.tuning.vmap:
      program = vmapped_grid.prepare(
          [c.build(plan.settings) for _, c in todo], list(plan.tuning.grid)
      )
    if isinstance(program, str):
      log(f"{what}, point by point ({program})")
      tuning_lib.write_grid_record(plan, cell, program, len(todo))
      for j, (point, tuning_cell) in enumerate(todo):
        log(f"{where} point {j + 1}/{len(todo)} {point}")
        _train(tuning_cell, plan.settings, progress)
    else:
      log(f"{what}, as one vmapped program")
      tuning_lib.write_grid_record(plan, cell, None, len(todo))
      _train_grid(program, progress)
  choice = tuning_lib.choose(plan, cell)
  log(
      f"Tuned {cell.rule} on {cell.env_key}: {choice['point']} (mean "
      f"normalised score {run_folders.fmt(choice['score'])} on the tuning "
      "seeds)"
  )
  return tuning_lib.apply_point(cell, choice["point"])


def _train_grid(program: vmapped_grid.GridProgram, progress: bool) -> None:
  """Trains a grid program's points into their folders (earlier runs' files
  removed first), holding every folder's lock; folders that a killed grid left
  are named in one warning."""
  locks = []
  try:
    for plan in program.plans:
      locks.append(
          evaluation.open_output(plan, settings_lib.PROGRAM, warn=False)
      )
    run_folders.warn_abandoned(settings_lib.PROGRAM, locks)
    results = vmapped_grid.train(program, progress)
    for plan, result in zip(program.plans, results, strict=True):
      evaluation.write(plan, result, lambda _: None)
  finally:
    for lock in locks:
      lock.release()


def _train(
    cell: runs.Cell, settings: settings_lib.CompareSettings, progress: bool
) -> None:
  """Trains ``cell`` into its folder (an earlier run's files removed first),
  holding its lock."""
  plan = cell.build(settings)
  lock = evaluation.open_output(plan, settings_lib.PROGRAM)
  try:
    evaluation.write(
        plan, evaluation.run(plan, lambda _: None, progress), lambda _: None
    )
  finally:
    lock.release()


def _summary_complete(folder: Path) -> bool:
  """Whether ``folder`` holds a ``summary.json`` that reads back whole."""
  try:
    return isinstance(
        json.loads((folder / results_lib.SUMMARY).read_text()), dict
    )
  except (OSError, ValueError):
    return False


def write(
    plan: runs.ComparePlan,
    run_dirs: Sequence[Path],
    log: Callable[[str], None] = print,
    wait_for_shards: bool = False,
) -> dict[str, Any] | None:
  """The statistics of the runs in ``run_dirs``; with ``wait_for_shards``, runs
  other processes have not finished are not an error: nothing is written (None).
  """
  missing = [d for d in run_dirs if not _summary_complete(d)]
  if missing and wait_for_shards:
    log(
        f"{len(missing)} run(s) not finished yet (e.g. {missing[0]}): the "
        "report is written once every shard is done (run again without "
        "shard, or with config.run_dirs)."
    )
    return None
  try:
    results = results_lib.Results.from_runs(
        [results_lib.load_run(d) for d in run_dirs]
    )
    run_folders.make_dir(plan.output_dir)
    stats = report_lib.write_report(
        results,
        plan.output_dir,
        plan.settings.statistics,
        plan.references,
        title=f"Comparison of {', '.join(results.rules)}",
    )
  except ValueError as e:
    raise errors.UsageError(errors.one_line(e)) from None
  if plan.tuning is not None and plan.cells:
    choices = [
        tuning_lib.with_reported(plan, c, tuning_lib.choose(plan, c))
        for c in plan.cells
        if c.tuned
    ]
    tuning_lib.write(plan, choices, stats)
    for choice in choices:
      log(
          f"{choice['label']} on {choice['env']}: {choice['point']} "
          f"(score {run_folders.fmt(choice['score'])} on the tuning seeds, "
          f"{run_folders.fmt(choice['reported']['score'])} on the reported "
          f"seeds; grid trained as "
          f"{tuning_lib.grid_text(choice['grid'])}; {tuning_lib.TUNING_CSV})"
      )
      if choice["warning"]:
        log(f"Warning: {choice['warning']}")
  log(
      f"Report: {plan.output_dir / 'report.md'}; results.csv, "
      f"statistics.json and {len(stats['figures'])} figures beside it."
  )
  for rule, agg in stats["aggregates"].items():
    log(f"{rule}: IQM normalised score {aggregates.Interval(**agg['iqm'])}")
  return stats


def compare(
    config: config_dict.ConfigDict | None = None,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    **overrides: Any,
) -> dict[str, Any] | None:
  """Builds, runs and reports a comparison, holding the output folder's lock (a
  shard: its own, then the folder's for the report) and each run folder's while
  training it; returns the statistics (None for a shard whose report another
  writes).

  ``overrides`` are set on ``config`` (default: ``configs/compare.py``'s) as
  flags would, e.g. ``compare(rules=("ppo", "actor_critic"), envs=("catch",),
  num_seeds=5)``.

  Raises:
    UsageError: bad settings (before anything is trained).
  """
  settings = settings_lib.CompareSettings.from_config(
      settings_lib.make_config(config, **overrides)
  )
  plan = build(settings)
  index, count = plan.shard
  hint = "run the same command again: finished runs are kept."
  if count == 1:
    with run_folders.claim_output_dir(
        plan.output_dir, settings_lib.PROGRAM
    ) as lock:
      run_folders.open_run_folder(plan.output_dir, lock, RUN_KIND, resume=True)
      with errors.resource_errors(hint):
        if plan.run_dirs:
          return write(plan, plan.run_dirs, log)
        return write(plan, run(plan, log, progress), log)
  shard_lock = f"{files.LOCK_FILE}-shard-{index}-of-{count}"
  with run_folders.claim_output_dir(
      plan.output_dir, settings_lib.PROGRAM, shard_lock
  ) as lock:
    run_folders.open_run_folder(plan.output_dir, lock, RUN_KIND, resume=True)
    with errors.resource_errors(hint):
      run_dirs = run(plan, log, progress)
      if not all(_summary_complete(d) for d in run_dirs):
        return write(plan, run_dirs, log, wait_for_shards=True)
      try:
        report_lock = run_folders.claim_output_dir(
            plan.output_dir, settings_lib.PROGRAM
        )
      except errors.UsageError as e:
        log(f"Not writing the report: {errors.one_line(e)}")
        return None
      with report_lock:
        return write(plan, run_dirs, log, wait_for_shards=True)
