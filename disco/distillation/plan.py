"""Building a distillation: ``build(settings)`` resolves the teacher and its
meta-parameters and makes the student's settings and rule, checks that they fit
together, and returns a ``DistillPlan``. Nothing is written."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from disco import errors
from disco import run_folders
from disco.distillation import settings as settings_lib
from disco.update_rules import agent_settings
from disco.update_rules import disco as disco_rule
from disco.update_rules import registry
from disco.update_rules import resolve


@dataclasses.dataclass(frozen=True)
class DistillPlan:
  """A distillation, built from checked settings.

  Attributes:
    settings: the checked settings.
    teacher: the teacher rule with its meta-parameters.
    student_config: the student's agent settings (``student_settings``).
    student: the student rule (a ``disco.update_rules.disco.Disco``).
    output_dir: the run folder.
  """

  settings: settings_lib.DistillSettings
  teacher: resolve.ResolvedRule
  student_config: agent_settings.AgentSettings
  student: disco_rule.Disco
  output_dir: Path

  @property
  def heads(self) -> tuple[str, ...]:
    """The targets the student learns (``Disco.target_heads``)."""
    return self.student.target_heads

  @property
  def dataset_dir(self) -> Path:
    """The dataset's folder: ``config.dataset.folder``, or
    ``output_dir/dataset``."""
    folder = self.settings.dataset.folder
    return Path(folder).expanduser() if folder else self.output_dir / "dataset"


def student_settings(
    teacher: resolve.ResolvedRule,
    student: dict[str, Any],
    student_agent: str = "teacher",
    student_torso: tuple[int, ...] | None = None,
) -> agent_settings.AgentSettings:
  """The student's agent settings: the teacher's, its Disco meta-network changed
  by ``student`` (``MetaNetConfig`` fields), without the action-conditional
  model for a ``'flat'`` ``student_agent``, with ``student_torso`` as its
  agents' torso.

  Raises:
    UsageError: a teacher that is not a Disco rule, or student targets of
      another size.
  """
  if not isinstance(teacher.rule, disco_rule.Disco):
    raise errors.UsageError(
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
    raise errors.UsageError(
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


def build(settings: settings_lib.DistillSettings) -> DistillPlan:
  """Resolves the teacher and makes the student (see ``DistillPlan``).

  Raises:
    UsageError: a teacher that is not a Disco rule, a student that cannot be
      made or would predict targets of another size, fit costs of the student's
      targets all 0, or an output folder that is a file.
  """
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
    raise errors.UsageError(f"config.student: {errors.one_line(e)}") from None
  heads = student.target_heads
  if not any(getattr(settings.fit, f"{k}_cost") for k in heads):
    raise errors.UsageError(
        f"config.fit costs of the student's targets {heads} are all 0: give "
        "one of them a positive weight."
    )
  return DistillPlan(
      settings=settings,
      teacher=teacher,
      student_config=student_config,
      student=student,
      output_dir=run_folders.output_dir(settings.output_dir, "distill"),
  )
