"""One meta-evaluation from start to end: ``evaluate``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ml_collections import config_dict

from disco import distributed
from disco import errors
from disco.evaluation import outputs
from disco.evaluation import plan as plan_lib
from disco.evaluation import running
from disco.evaluation import settings as settings_lib


def evaluate(
    config: config_dict.ConfigDict | None = None,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
  """Trains agents with a rule and writes the run folder, holding its lock;
  returns the summary. ``overrides`` are set on ``config`` (default:
  ``configs/evaluate.py``'s) as flags would, e.g.
  ``evaluate(rule="actor_critic", env_settings={"rows": 5})``.

  Raises:
    UsageError: bad settings (before anything is trained).
    errors.Diverged: every seed diverged (after the outputs are written).
  """
  settings = settings_lib.EvalSettings.from_config(
      settings_lib.make_config(config, **overrides)
  )
  plan = plan_lib.build(settings, log)
  # Every process has checked the output folder before process 0 writes.
  distributed.barrier("disco-eval: built")
  lock = outputs.open_output(plan) if distributed.is_main() else None
  try:
    distributed.barrier("disco-eval: output folder ready")
    with errors.resource_errors(
        f"run the same command again with --config.overwrite=True "
        f"(--config.output_dir={plan.output_dir} holds the unfinished run)."
    ):
      result = running.run(plan, log, progress)
      summary = outputs.write(plan, result, log)
  finally:
    if lock is not None:
      lock.release()
  if summary["num_diverged_seeds"] == len(plan.seeds):
    raise errors.Diverged(
        f"Every seed diverged ({outputs.diverged_text(summary)}): their "
        "agents' parameters became non-finite, so the run has no result "
        f"(outputs in {plan.output_dir}). Try a lower learning_rate."
    )
  return summary
