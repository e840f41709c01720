"""One distillation from start to end: ``distill``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ml_collections import config_dict

from disco.distillation import outputs
from disco.distillation import plan as plan_lib
from disco.distillation import running
from disco.distillation import settings as settings_lib


def distill(
    config: config_dict.ConfigDict | settings_lib.DistillSettings,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Distils ``config.teacher`` into a student, holding the folder's lock;
  returns the summary.

  Raises:
    UsageError: a bad setting or mismatched teacher and student, before anything
      is trained (or a dataset shard of other settings).
  """
  settings = config
  if not isinstance(settings, settings_lib.DistillSettings):
    settings = settings_lib.DistillSettings.from_config(config)
  plan = plan_lib.build(settings)
  lock = outputs.open_output(plan)
  try:
    result = running.run(plan, log)
    return outputs.write(plan, result, log)
  finally:
    lock.release()
