"""The run folder of a distillation: ``config.json``, ``dataset/`` (reused by a
stopped or repeated run), ``fit.csv`` and ``fit.png``, ``agreement.csv`` (per
environment and split, the student's KL per head and top-1 policy agreement,
beside an untrained student's), ``student.npz`` (a rule file naming the teacher
and its licence terms) and ``summary.json``."""

from __future__ import annotations

from collections.abc import Callable
import csv
import dataclasses
from typing import Any

from disco import errors
from disco import files
from disco import run_folders
from disco import weights
from disco.distillation import plan as plan_lib
from disco.distillation import running
from disco.distillation import settings as settings_lib
from disco.meta import rule_files
from disco.update_rules import resolve

STUDENT_FILE = "student.npz"
RUN_KIND = run_folders.RunKind(
    name="distill",
    description="a distillation run",
    owns=(
        "config.json",
        "dataset",
        "fit.csv",
        "fit.png",
        "agreement.csv",
        STUDENT_FILE,
        "summary.json",
    ),
    again="pass overwrite=True to run it again",
)
# The terms a rule derived from the Disco103 meta-parameters carries.
DISCO103_TERMS = (
    "Derived from the Disco103 meta-parameters (Google DeepMind, CC-BY 4.0, "
    "https://creativecommons.org/licenses/by/4.0/): share with attribution."
)


def open_output(plan: plan_lib.DistillPlan) -> files.FolderLock:
  """Takes the lock of ``plan.output_dir`` (held until released), checks under
  it that the folder is free (an unfinished distillation continues; a finished
  one needs ``overwrite``, which removes its files), writes ``config.json`` and
  returns the lock.

  Raises:
    UsageError: another writer, a finished distillation (without overwrite),
      another kind of run, or foreign files.
  """
  out, settings = plan.output_dir, plan.settings
  lock = run_folders.claim_output_dir(out, settings_lib.PROGRAM)
  try:
    if not settings.overwrite and (out / "summary.json").exists():
      raise errors.UsageError(
          f"output_dir {out} holds a finished distillation: use a new "
          "output_dir, or overwrite=True to run it again."
      )
    run_folders.open_run_folder(
        out,
        lock,
        RUN_KIND,
        overwrite=settings.overwrite,
        resume=not settings.overwrite,
    )
    run_folders.write_json(
        out / "config.json",
        dict(
            settings=dataclasses.asdict(settings),
            student=plan.student_config.to_dict(),
        ),
    )
  except BaseException:
    lock.release()
    raise
  return lock


def _write_csv(path, rows: list[dict[str, Any]]) -> None:
  with files.atomic_write(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def _plot(path, history: list[dict[str, float]]) -> None:
  from matplotlib import pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 3.5))
  steps = [r["step"] for r in history]
  for key in [k for k in history[0] if k != "step"]:
    ax.plot(steps, [r[key] for r in history], label=key)
  ax.set_yscale("log")
  ax.set_xlabel("fitting step")
  ax.set_ylabel(f"KL to the teacher (mean of {history[0]['step']} steps)")
  ax.legend()
  fig.tight_layout()
  files.save_figure(fig, path, dpi=100)
  plt.close(fig)


def _licence(teacher: resolve.ResolvedRule, name: str) -> str | None:
  """The terms a student carries: Disco103's for the published weights, else a
  teacher file's own ``licence`` (None: none)."""
  if teacher.source == "pretrained":
    return DISCO103_TERMS
  if teacher.source == "file":
    return weights.load_metadata(name).get("licence")
  return None


def write(
    plan: plan_lib.DistillPlan,
    result: running.DistillResult,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Writes the fit, the agreement, the student's rule file and
  ``summary.json``; returns the summary."""
  settings, teacher, out = plan.settings, plan.teacher, plan.output_dir
  _write_csv(out / "fit.csv", result.history)
  _plot(out / "fit.png", result.history)
  _write_csv(out / "agreement.csv", result.agreement)
  for row in result.agreement:
    if row["who"] == "student":
      log(
          f"{row['split']} {row['env']}: top-1 {row['pi_top1']:.3f}, "
          + ", ".join(f"{k} {row[f'{k}_kl']:.3g}" for k in plan.heads)
      )
  terms = _licence(teacher, settings.teacher)
  path = rule_files.export_meta_params(
      out / STUDENT_FILE,
      result.params,
      plan.student_config,
      meta_step=settings.fit.steps,
      with_network=True,
      distilled_from=settings.teacher,
      **({"licence": terms} if terms else {}),
  )
  summary = dict(
      teacher=settings.teacher,
      teacher_meta_params=running.num_params(teacher.meta_params),
      student_meta_params=running.num_params(result.params),
      student=path,
      student_net=run_folders.to_jsonable(
          plan.student_config.rule_kwargs["net"]
      ),
      student_agent=settings.student_agent,
      student_network=run_folders.to_jsonable(plan.student_config.network),
      final_fit=result.history[-1],
      agreement=result.agreement,
      teacher_returns={
          f"{s.split} {s.label}": s.teacher_return for s in result.shards
      },
      gather_seconds=result.gather_seconds,
      fit_seconds=result.fit_seconds,
      licence=terms,
  )
  run_folders.write_json(out / "summary.json", summary)
  log(f"Student written to {path}")
  return summary
