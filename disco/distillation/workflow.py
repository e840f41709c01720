"""``distill``: gather the dataset, fit the student, measure, export.

The run folder (``output_dir``) receives:

* ``config.json``: the settings;
* ``dataset/``: the shards (``dataset``), kept, so that a stopped or
  repeated run reuses them;
* ``fit.csv``, ``fit.png``: the loss and the KL per head against steps;
* ``agreement.csv``: per environment and split, the student's KL per head
  and top-1 policy agreement with the teacher, beside an untrained
  student's (the scale of "no agreement");
* ``student.npz``: the student as a rule file (``disco-eval
  --config.rule=.../student.npz``, ``disco-compare``), with the teacher and
  its licence terms in its metadata;
* ``summary.json``: parameters of both, agreement, times.
"""

from __future__ import annotations

from collections.abc import Callable
import csv
import dataclasses
from pathlib import Path
import time
from typing import Any

import jax
from ml_collections import config_dict
import numpy as np

from disco import errors
from disco import files
from disco import run_folders
from disco import weights
from disco.distillation import dataset as dataset_lib
from disco.distillation import fitting
from disco.distillation import settings as settings_lib
from disco.meta import rule_files
from disco.update_rules import disco as disco_rule
from disco.update_rules import registry
from disco.update_rules import resolve

UsageError = errors.UsageError
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


def num_params(tree) -> int:
  return int(sum(np.size(x) for x in jax.tree.leaves(tree)))


def student_settings(
    teacher: resolve.ResolvedRule,
    student: dict[str, Any],
    student_agent: str = "teacher",
    student_torso: tuple[int, ...] | None = None,
) -> config_dict.ConfigDict:
  """The student's agent settings: the teacher's, with the Disco rule's
  meta-network changed by ``student`` (``MetaNetConfig`` fields), for a
  ``'flat'`` ``student_agent`` without the action-conditional model, and
  with ``student_torso`` the dense layers of its agents' torso.

  Raises:
    UsageError: the teacher is not a Disco meta-network rule, or the student
      would predict targets of another size than the teacher's.
  """
  if not isinstance(teacher.rule, disco_rule.Disco):
    raise UsageError(
        f"The teacher {teacher.label!r} is rule {teacher.settings.rule!r}, "
        "not a Disco meta-network rule: give 'disco103' or a rule file of "
        "rule 'disco'."
    )
  net = {
      f.name: getattr(teacher.rule.net_config, f.name)
      for f in dataclasses.fields(teacher.rule.net_config)
      if f.name != "input_option"
      or isinstance(teacher.rule.net_config.input_option, str)
  }
  size = net["prediction_size"]
  if student.get("prediction_size", size) != size:
    raise UsageError(
        f"config.student.prediction_size={student['prediction_size']} but the "
        f"teacher's targets y and z have {size} entries: the student must "
        "predict targets of the teacher's size (drop the setting)."
    )
  rule_kwargs = dict(
      teacher.settings.rule_kwargs,
      net=run_folders.to_jsonable({**net, **student}),
  )
  if student_agent == "flat":
    rule_kwargs["action_model"] = False
  network = dict(teacher.settings.network)
  if student_torso is not None:
    network["dense"] = tuple(student_torso)
  return teacher.settings.replace(
      rule="disco", rule_kwargs=rule_kwargs, network=network
  )


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
  """The terms a student carries: Disco103's for the published weights, a
  teacher file's own ``licence`` line otherwise (None: none given)."""
  if teacher.source == "pretrained":
    return DISCO103_TERMS
  if teacher.source == "file":
    return weights.load_metadata(name).get("licence")
  return None


def _open(settings: settings_lib.DistillSettings):
  """The output folder, locked and checked (``RUN_KIND``): a folder of an
  unfinished distillation continues, a finished one is refused unless
  ``overwrite`` (which removes its files first)."""
  out = run_folders.output_dir(settings.output_dir, "distill")
  lock = run_folders.claim_output_dir(out, settings_lib.PROGRAM)
  try:
    if not settings.overwrite and (out / "summary.json").exists():
      raise UsageError(
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
  except BaseException:
    lock.release()
    raise
  return out, lock


def distill(
    config: config_dict.ConfigDict | settings_lib.DistillSettings,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Distils ``config.teacher`` into a student (module docstring).

  Returns:
    The summary (also ``summary.json``).

  Raises:
    UsageError: a bad setting or a mismatched teacher and student, in one
      line, before anything is trained (or a dataset shard of other
      settings, before it is used).
  """
  settings = config
  if not isinstance(settings, settings_lib.DistillSettings):
    settings = settings_lib.DistillSettings.from_config(config)
  teacher = resolve.resolve_rule(settings.teacher)
  student_config = student_settings(
      teacher,
      dict(settings.student),
      settings.student_agent,
      settings.student_torso,
  )
  try:
    student = registry.make_rule(student_config)
  except ValueError as e:
    raise UsageError(f"config.student: {errors.one_line(e)}") from None
  heads = student.target_heads
  if not any(getattr(settings.fit, f"{k}_cost") for k in heads):
    raise UsageError(
        f"config.fit costs of the student's targets {heads} are all 0: give "
        "one of them a positive weight."
    )
  out, lock = _open(settings)
  try:
    run_folders.write_json(
        out / "config.json",
        dict(
            settings=dataclasses.asdict(settings),
            student=student_config.to_dict(),
        ),
    )
    start = time.perf_counter()
    folder = settings.dataset.folder
    folder = Path(folder).expanduser() if folder else out / "dataset"
    shards = dataset_lib.gather(settings, teacher, folder, log)
    gather_seconds = time.perf_counter() - start
    pairs = [fitting.Pair(s, teacher.meta_params, student) for s in shards]
    train = [p for p in pairs if p.shard.split == "train"]
    init = student.random_meta_params(settings.fit.seed)
    log(
        f"Fitting a student of {num_params(init):,} meta-parameters (teacher "
        f"{num_params(teacher.meta_params):,}) on "
        f"{sum(p.shard.num_samples for p in train)} samples of "
        f"{len(train)} environment(s), {settings.fit.steps} steps"
    )
    start = time.perf_counter()
    params, history = fitting.fit(
        train,
        init,
        settings.fit,
        lambda _, row: log(
            f"step {row['step']}: loss {row['loss']:.4g} "
            + " ".join(f"{k} {row[f'{k}_kl']:.3g}" for k in heads)
        ),
    )
    fit_seconds = time.perf_counter() - start
    _write_csv(out / "fit.csv", history)
    _plot(out / "fit.png", history)
    rows = []
    for pair in pairs:
      measured = fitting.agreement(pair, dict(student=params, untrained=init))
      for who, figures in measured.items():
        rows.append(
            dict(
                split=pair.shard.split,
                env=pair.shard.label,
                who=who,
                samples=pair.shard.num_samples,
                **figures,
            )
        )
    _write_csv(out / "agreement.csv", rows)
    for row in rows:
      if row["who"] == "student":
        log(
            f"{row['split']} {row['env']}: top-1 {row['pi_top1']:.3f}, "
            + ", ".join(f"{k} {row[f'{k}_kl']:.3g}" for k in heads)
        )
    terms = _licence(teacher, settings.teacher)
    path = rule_files.export_meta_params(
        out / STUDENT_FILE,
        params,
        student_config,
        meta_step=settings.fit.steps,
        with_network=True,
        distilled_from=settings.teacher,
        **({"licence": terms} if terms else {}),
    )
    summary = dict(
        teacher=settings.teacher,
        teacher_meta_params=num_params(teacher.meta_params),
        student_meta_params=num_params(params),
        student=path,
        student_net=run_folders.to_jsonable(student_config.rule_kwargs["net"]),
        student_agent=settings.student_agent,
        student_network=run_folders.to_jsonable(student_config.network),
        final_fit=history[-1],
        agreement=rows,
        teacher_returns={
            f"{s.split} {s.label}": s.teacher_return for s in shards
        },
        gather_seconds=gather_seconds,
        fit_seconds=fit_seconds,
        licence=terms,
    )
    run_folders.write_json(out / "summary.json", summary)
    log(f"Student written to {path}")
    return summary
  finally:
    lock.release()
