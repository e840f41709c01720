r"""Validation launcher: validate a meta-training run's checkpoints.

  disco-validate RUN_DIR --follow

(or ``python -m disco.launch.validate RUN_DIR --follow``; the settings live
in ``configs/validate.py``). It reads the run's ``config.json``, builds the
rule and its held-out validation (``disco.meta.validation``, with the run's
``config.validation`` and any ``--config.validation.<key>=<value>``
overrides) and restores meta-parameters from ``RUN_DIR/checkpoints``:

* with ``--follow`` (``--config.follow=True``) it validates the initial
  meta-parameters (with ``validation.at_start``) and every checkpoint as it
  appears (at multiples of ``validation.every``; 0: all), until the run has
  finished (its ``summary.json`` reaches ``num_meta_steps``) or no new
  checkpoint came for ``max_idle_seconds``;
* without, it validates the latest checkpoint once.

The outputs are those of in-process validation, in the run's folder:
``validation.csv``, ``validation.png`` and ``best_meta_params.npz``. A
meta-step the CSV already holds is not validated again, so the follower can
be stopped and started at any time, also beside a run that validates
itself. The held-out loops compile once and are reused for every checkpoint.

Bad input (no run folder, unknown held-out environments, a budget that
cannot run, ...) ends the program with one line on stderr and exit status 2
before anything is trained. A run folder's config is data: modules it would
import (``config.imports``) and XLand ruleset files it names
(``env_settings.benchmark_path``) are refused unless the command line repeats
them (``--config.imports``, ``--config.benchmark_paths``). One follower
validates a run folder at a time (a second gets one line and exit status
2).
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
import sys
import time
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import distributed
from disco import errors
from disco import files
from disco import run_folders
from disco import stopping
from disco.launch import common
from disco.launch import meta_train as mt
from disco.meta import checkpoints as ckpt_lib
from disco.meta import validation as validation_lib

UsageError = errors.UsageError

PROGRAM = "disco-validate"
CONFIG_NAME = "validate"
# The follower's own lock in the run folder: one follower per run (beside
# the run itself, which holds the folder's main lock; both write the
# validation outputs under validation.LOCK_FILE).
LOCK_FILE = files.LOCK_FILE + "-validate"


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/validate.py``."""
  return checks.load_config(CONFIG_NAME)


def _read_json(path: Path) -> dict[str, Any]:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError) as e:
    raise UsageError(f"{path} is unreadable ({e}).") from None


def _names(text: Any) -> list[str]:
  return [n.strip() for n in str(text or "").split(",") if n.strip()]


def _benchmark_paths(tree: Any) -> list[str]:
  """Every ``benchmark_path`` setting in a (saved) config."""
  found = []
  if isinstance(tree, dict):
    for key, value in tree.items():
      if key == "benchmark_path" and value:
        found.append(str(value))
      else:
        found += _benchmark_paths(value)
  elif isinstance(tree, (list, tuple)):
    for value in tree:
      found += _benchmark_paths(value)
  return found


def _same_file(a: str, b: str) -> bool:
  return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def check_code_settings(
    saved: dict[str, Any], path: Path, imports: Any, benchmark_paths: Any
) -> None:
  """Refuses a saved config that names modules to import or ruleset files
  to read unless the command line repeats each of them.

  Raises:
    UsageError: one line naming what the saved config would load and the
      flags that allow it.
  """
  modules = [
      m for m in _names(saved.get("imports")) if m not in _names(imports)
  ]
  given = _names(benchmark_paths)
  rulesets = [
      p
      for p in _benchmark_paths(saved)
      if not any(_same_file(p, g) for g in given)
  ]
  if not modules and not rulesets:
    return
  what, flags_text = [], []
  if modules:
    what.append(f"imports module(s) {', '.join(modules)}")
    flags_text.append(f"--config.imports={','.join(_names(saved['imports']))}")
  if rulesets:
    what.append(f"reads ruleset file(s) {', '.join(rulesets)}")
    flags_text.append(
        f"--config.benchmark_paths={','.join([*given, *rulesets])}"
    )
  raise UsageError(
      f"The run's config ({path}) {' and '.join(what)}; disco-validate loads "
      "no code or ruleset named only in a run folder. If you trust them, "
      f"repeat them on the command line: {' '.join(flags_text)}."
  )


def run_config(
    run_dir: Path,
    overrides: Any,
    imports: Any = "",
    benchmark_paths: Any = "",
) -> config_dict.ConfigDict:
  """The meta-training config of the run in ``run_dir``, set up to read
  its checkpoints in this one process, with ``overrides`` of its
  ``validation`` block (None values keep the run's). Modules to import and
  ruleset files to read that the saved config names are refused unless
  ``imports`` and ``benchmark_paths`` (the command line's) repeat them.

  Raises:
    UsageError: not a run folder, a config this version cannot read, or
      code or ruleset files named only in the folder.
  """
  path = run_dir / mt.CONFIG_FILE
  if not path.is_file():
    raise UsageError(
        f"{run_dir} holds no meta-training run ({mt.CONFIG_FILE} is "
        "missing): give the output_dir of a disco-meta-train run."
    )
  saved = _read_json(path).get("config")
  if not isinstance(saved, dict):
    raise UsageError(f"{path} has no 'config': is it a disco-meta-train run?")
  check_code_settings(saved, path, imports, benchmark_paths)
  config = mt.default_config()
  try:
    config.update(saved)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    raise UsageError(
        f"The config in {path} does not fit this version of "
        f"disco-meta-train ({errors.one_line(e)})."
    ) from None
  with config.unlocked():
    for key, value in checks.as_dict(overrides, "validation").items():
      if value is not None:
        config.validation[key] = value
  # Read the checkpoints here, in one process, on one device.
  config.update(
      output_dir=str(run_dir),
      resume=True,
      num_devices=1,
      distributed=distributed.default_config(),
  )
  return config


class Follower:
  """Validates a run's checkpoints (see the module docstring).

  Args:
    config: the ``configs/validate.py`` settings.
    log: where messages go.
    progress: show a progress bar per held-out environment.

  Raises:
    UsageError: for bad input, before anything is trained.
  """

  def __init__(
      self,
      config: config_dict.ConfigDict,
      log: Callable[[str], None] = print,
      progress: bool = True,
  ):
    checks.check_config_keys(config, default_config(), CONFIG_NAME)
    if not str(config.run_dir).strip():
      raise UsageError(
          "No run folder given: disco-validate RUN_DIR [--follow] (or "
          "--config.run_dir=RUN_DIR)."
      )
    self.run_dir = Path(str(config.run_dir).strip()).expanduser()
    self.follow = checks.check_bool(config.follow, "follow")
    self.poll = checks.check_number(
        config.poll_seconds, "poll_seconds", positive=True
    )
    self.max_idle = checks.check_number(
        config.max_idle_seconds, "max_idle_seconds"
    )
    if self.max_idle < 0:
      raise UsageError(
          f"config.max_idle_seconds must be >= 0 (0: never), got "
          f"{self.max_idle}."
      )
    self.log, self.progress = log, progress
    run = run_config(
        self.run_dir,
        config.validation,
        config.imports,
        config.benchmark_paths,
    )
    self.every = validation_lib.parse_settings(run.validation).every
    with run.unlocked():
      run.validation.every = 0  # this process validates, not mt.run
    self.plan = mt.build(run)
    self.validation = mt.make_validation(self.plan)
    if self.validation is None:
      raise UsageError(
          f"The run in {self.run_dir} has no held-out environments "
          "(config.validation.envs): give them, e.g. "
          "--config.validation.envs=\"({'env': 'delayed_chain'},)\"."
      )
    self.manager = ckpt_lib.CheckpointManager(
        self.run_dir / mt.CHECKPOINT_DIR, keep=2**30
    )
    self._template = None

  # ------------------------------------------------------------ queries
  def _num_meta_steps(self) -> int:
    saved = _read_json(self.run_dir / mt.CONFIG_FILE)["config"]
    return int(saved["num_meta_steps"])

  def finished(self) -> bool:
    """Whether the run has written its outputs at its last meta-step."""
    path = self.run_dir / mt.SUMMARY_FILE
    if not path.is_file():
      return False
    try:
      done = int(json.loads(path.read_text())["meta_steps"])
    except (OSError, ValueError, KeyError, TypeError):
      return False
    return done >= self._num_meta_steps()

  def due(self, step: int) -> bool:
    return (
        not self.every
        or step % self.every == 0
        or step == self._num_meta_steps()
    )

  def todo(self) -> list[int]:
    """Checkpoints to validate, oldest first."""
    done = self.validation.record.validated_steps()
    return [
        s for s in self.manager.all_steps() if s not in done and self.due(s)
    ]

  # ----------------------------------------------------------- actions
  def meta_params(self, step: int):
    """The meta-parameters of checkpoint ``step`` (None if it is gone or
    unreadable, e.g. rotated out by the run meanwhile)."""
    if self._template is None:
      self._template = mt.abstract_state(self.plan.population, self.plan.rule)
    try:
      return self.manager.restore(self._template, step).state.meta_params
    except ckpt_lib.CheckpointError as e:
      self.log(f"Skipping checkpoint {step}: {errors.one_line(e)}")
      return None

  def validate(self, step: int, meta_params) -> None:
    self.validation(meta_params, step, self.log, self.progress)

  def initial(self) -> None:
    """Validates the run's initial meta-parameters (meta-step 0)."""
    settings = self.validation.settings
    if not settings.at_start or 0 in self.validation.record.validated_steps():
      return
    config = self.plan.config
    params = mt.load_initial_meta_params(
        config.init_meta_params,
        self.plan.rule,
        int(config.init_seed),
        self.plan.settings.rule,
    )
    self.validate(0, params)

  def once(self) -> None:
    latest = self.manager.latest_step()
    if latest is None:
      raise UsageError(
          f"No checkpoint in {self.manager.directory} yet: wait for the "
          "run's first checkpoint, or use --follow."
      )
    if latest in self.validation.record.validated_steps():
      self.log(f"Meta-step {latest} (the latest checkpoint) is validated.")
      return
    params = self.meta_params(latest)
    if params is not None:
      self.validate(latest, params)

  def follow_run(self) -> None:
    self.log(
        f"Following {self.run_dir}: validating its checkpoints on "
        f"{', '.join(e.key for e in self.validation.settings.envs)} until "
        "the run has finished (Ctrl-C stops)."
    )
    self.initial()
    last_new = time.monotonic()
    while True:
      finished = self.finished()  # before listing: no last one is missed
      todo = self.todo()
      for step in todo:
        params = self.meta_params(step)
        if params is not None:
          self.validate(step, params)
      if todo:
        last_new = time.monotonic()
      if finished:
        self.log("The run has finished and every checkpoint is validated.")
        return
      if self.max_idle and time.monotonic() - last_new > self.max_idle:
        self.log(
            f"No new checkpoint for {self.max_idle:g} s "
            "(config.max_idle_seconds): stopping. Start again to go on."
        )
        return
      stopping.wait_for_stop(self.poll)
      stopping.check_stop("while following the run")

  def close(self) -> None:
    self.manager.close()


def validate(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any]:
  """Validates a run's checkpoints (following them with ``config.follow``);
  returns the validation summary.

  Raises:
    UsageError: for bad input (before anything is trained).
  """
  follower = Follower(config, log, progress)
  try:
    with run_folders.claim_output_dir(follower.run_dir, PROGRAM, LOCK_FILE):
      with errors.resource_errors(
          f"run disco-validate {follower.run_dir} again (validated "
          "meta-steps are kept)."
      ):
        if follower.follow:
          follower.follow_run()
        else:
          follower.once()
  finally:
    follower.close()
  record = follower.validation.record
  summary = validation_lib.summary(record)
  if summary["best_meta_params_file"]:
    log(
        f"Best: meta-step {summary['best_meta_step']}, score "
        f"{run_folders.fmt(summary['best_score'])}; evaluate it with: disco-eval "
        f"--config.rule={summary['best_meta_params_file']}"
    )
  log(
      f"Outputs in {follower.run_dir}: {record.csv_path.name}, "
      f"{record.plot_path.name}, {record.best_path.name}"
  )
  return summary


def _argv(argv: list[str]) -> list[str]:
  """``RUN_DIR`` and ``--follow`` as config overrides."""
  out = [argv[0]]
  for arg in argv[1:]:
    after_config = out[-1] in ("--config", "-config")  # --config FILE
    if arg in ("--follow", "-follow"):
      out.append("--config.follow=True")
    elif arg in ("--nofollow", "-nofollow"):
      out.append("--config.follow=False")
    elif (
        not arg.startswith("-")
        and not after_config
        and not any(a.startswith("--config.run_dir") for a in out)
    ):
      out.append(f"--config.run_dir={arg}")
    else:
      out.append(arg)
  return out


def main() -> None:
  """Console entry point (``disco-validate``)."""
  sys.argv = _argv(sys.argv)
  common.run_launcher(PROGRAM, __doc__, CONFIG_NAME, validate)


if __name__ == "__main__":
  main()
