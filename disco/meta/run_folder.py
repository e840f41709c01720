"""A meta-training run's folder: its files, and resuming from it.

A run resumes only with the settings it was made with, except
``RESUMABLE_KEYS``; the saved config is read from ``config.json`` or, if missing
or damaged, from the newest readable checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
from typing import Any

from ml_collections import config_dict

from disco import errors
from disco import run_folders
from disco import tracking
from disco.meta import checkpoints as ckpt_lib
from disco.meta import settings as settings_lib
from disco.meta import validation_record
from disco.update_rules import migrations
from disco.update_rules import overrides

CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = (
    "config.json",
    "metrics.csv",
    "summary.json",
)
REWARDS_PLOT, LOSS_PLOT = "rewards.png", "meta_loss.png"
META_PARAMS_FILE = "meta_params.npz"
RUN_KIND = run_folders.RunKind(
    name="meta-train",
    description="a meta-training run",
    owns=(
        CONFIG_FILE,
        METRICS_FILE,
        SUMMARY_FILE,
        REWARDS_PLOT,
        LOSS_PLOT,
        META_PARAMS_FILE,
        CHECKPOINT_DIR,
        validation_record.CSV_FILE,
        validation_record.PLOT_FILE,
        validation_record.BEST_FILE,
        validation_record.SETTINGS_FILE,
        validation_record.LOCK_FILE,
        tracking.TENSORBOARD_DIR,
        tracking.WANDB_DIR,
    ),
    again="pass --config.resume=True to continue it",
)
# Settings a resumed run may change: they do not alter the computation (the
# devices and processes only change the rounding of the meta-gradient mean).
RESUMABLE_KEYS = (
    "num_meta_steps",
    "checkpoint_every",
    "keep_checkpoints",
    "resume",
    "log_every",
    "output_dir",
    "num_devices",
    "distributed",
    "max_consecutive_skips",
    "tracking",
    # Validation only reads the meta-parameters; its rows are checked
    # against the settings they were made with (validation.json).
    "validation",
)


def checkpoint_steps(directory: Path) -> list[int]:
  """The meta-steps of the checkpoints in ``directory`` (sorted)."""
  if not directory.is_dir():
    return []
  return sorted(
      int(p.name)
      for p in directory.iterdir()
      if p.is_dir() and p.name.isdigit()
  )


def _with_rule_defaults(config: dict) -> dict:
  """A saved ``config`` with ``hyper_params`` and ``rule_kwargs`` completed by
  the rule's defaults (so a config giving only overrides compares equal to the
  complete one)."""
  out = dict(config)
  for key in overrides.KEYS:
    try:
      out[key] = overrides.completed(
          str(config.get("rule")), config.get(key), key
      )
    except (ValueError, TypeError):  # an unknown rule: compared as saved
      pass
  return out


def _with_added_keys(saved: dict, current: dict, defaults: dict) -> dict:
  """``saved`` plus the (nested) keys ``current`` holds that it lacks, at their
  defaults, so such a run resumes with its own settings."""
  out = dict(saved)
  for key, value in current.items():
    default = defaults.get(key) if isinstance(defaults, dict) else None
    if key not in out:
      if isinstance(defaults, dict) and key in defaults and value == default:
        out[key] = value
    elif isinstance(value, dict) and isinstance(out[key], dict):
      out[key] = _with_added_keys(out[key], value, default or {})
  return out


def check_same_config(saved: dict, current: Any, where) -> None:
  """Refuses to resume a run saved with other settings (``where``: the saved
  config's file)."""
  if isinstance(current, config_dict.ConfigDict):
    current = current.copy_and_resolve_references().to_dict()
  try:
    saved = migrations.upgraded_meta_train_config(saved, str(where))
    current = migrations.upgraded_meta_train_config(current, "config")
  except ValueError as e:
    raise errors.UsageError(f"Cannot resume: {errors.one_line(e)}") from None
  defaults = settings_lib.default_config()
  defaults = defaults.copy_and_resolve_references().to_dict()
  saved = _with_added_keys(saved, current, defaults)
  saved, current = _with_rule_defaults(saved), _with_rule_defaults(current)
  diff = run_folders.setting_differences(saved, current, RESUMABLE_KEYS)
  if diff:
    raise errors.UsageError(
        f"Cannot resume: the config differs from the run in {where} "
        f"({'; '.join(diff)}). Only {', '.join(RESUMABLE_KEYS)} may change "
        "when resuming: use the run's settings, or start a new output folder."
    )


def read_saved_config(path: Path) -> tuple[dict | None, str | None]:
  """``(config saved in config.json, None)``, or ``(None, what is wrong)`` when
  missing or damaged."""
  if not path.exists():
    return None, "missing"
  try:
    saved = json.loads(path.read_text())["config"]
    if not isinstance(saved, dict):
      raise TypeError("its 'config' is not an object")
  except (OSError, ValueError, KeyError, TypeError) as e:
    return None, f"unreadable ({type(e).__name__}: {errors.one_line(e)})"
  return saved, None


def resume(
    out: Path,
    config: dict,
    num_meta_steps: int,
    manager: ckpt_lib.CheckpointManager,
    template: Callable[[], Any],
    log: Callable[[str], None],
) -> ckpt_lib.Restored | None:
  """The newest readable checkpoint of the run in ``out``, or None; newer
  damaged ones are moved aside, saying so.

  ``config`` is checked against the one in ``config.json``, or if that is
  missing or damaged the checkpoint's (saying so). ``template()`` gives the
  state's shapes and shardings.
  """
  saved_config, problem = read_saved_config(out / CONFIG_FILE)
  if manager.latest_step() is None:
    if problem is not None and problem != "missing":
      raise errors.UsageError(
          f"{out / CONFIG_FILE} is {problem} and there is no checkpoint to "
          "read the run's config from: start a new output folder."
      )
    if saved_config is not None:
      check_same_config(saved_config, config, out / CONFIG_FILE)
    log(f"No checkpoint in {manager.directory}: starting a new run.")
    return None
  try:
    restored = manager.restore_newest_readable(template(), log)
  except ckpt_lib.CheckpointError as e:
    raise errors.UsageError(errors.one_line(e)) from None
  if restored is None:
    raise errors.UsageError(
        f"No readable checkpoint is left in {manager.directory} (the damaged "
        f"ones were moved aside to <step>{ckpt_lib.DAMAGED_SUFFIX}): start a "
        "new output folder."
    )
  if problem is not None:
    log(
        f"{out / CONFIG_FILE} is {problem}: resuming with the config saved in "
        f"checkpoint {restored.path} (and rewriting {CONFIG_FILE})."
    )
  if restored.config is not None:
    check_same_config(restored.config, config, restored.path)
  if restored.step > num_meta_steps:
    raise errors.UsageError(
        f"The latest checkpoint ({restored.path}) is at meta-step "
        f"{restored.step}, beyond num_meta_steps={num_meta_steps}:"
        " raise num_meta_steps, or start a new output folder."
    )
  log(f"Resuming from {restored.path} (meta-step {restored.step}).")
  return restored
