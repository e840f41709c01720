"""Validating a meta-training run's checkpoints from another process
(``disco-validate``): a ``Follower`` builds the run's rule and held-out
validation from its ``config.json`` once, then validates the initial
meta-parameters and each checkpoint as it appears, until the run finishes or
none comes for ``max_idle_seconds``. Validated meta-steps are kept, so it may
stop and restart at any time."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import json
from pathlib import Path
import time
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import distributed
from disco import errors
from disco import files
from disco import run_folders
from disco import stopping
from disco.meta import checkpoints as ckpt_lib
from disco.meta import plan
from disco.meta import rule_files
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import validation as validation_lib
from disco.meta import validation_settings
from disco.update_rules import migrations

PROGRAM = "disco-validate"
CONFIG_NAME = "validate"
# The follower's own lock in the run folder: one follower per run.
LOCK_FILE = files.LOCK_FILE + "-validate"


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/validate.py``."""
  return checks.load_config(CONFIG_NAME)


def _read_json(path: Path) -> dict[str, Any]:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError) as e:
    raise errors.UsageError(f"{path} is unreadable ({e}).") from None


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
  """Refuses a saved config that names modules to import or ruleset files to
  read unless the command line repeats each.

  Raises:
    UsageError: naming what the saved config would load and the flags that allow
      it.
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
  raise errors.UsageError(
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
  """The meta-training config of the run in ``run_dir``, set to read its
  checkpoints in this one process, with ``overrides`` of ``validation`` (None
  values: the run's); ``imports`` and ``benchmark_paths``: the command line's.

  Raises:
    UsageError: not a run folder, an unreadable config, or code or ruleset files
      named only in the folder.
  """
  path = run_dir / run_folder.CONFIG_FILE
  if not path.is_file():
    raise errors.UsageError(
        f"{run_dir} holds no meta-training run ({run_folder.CONFIG_FILE} is "
        "missing): give the output_dir of a disco-meta-train run."
    )
  saved = _read_json(path).get("config")
  if not isinstance(saved, dict):
    raise errors.UsageError(
        f"{path} has no 'config': is it a disco-meta-train run?"
    )
  check_code_settings(saved, path, imports, benchmark_paths)
  config = settings_lib.default_config()
  try:
    saved = migrations.upgraded_meta_train_config(saved, str(path))
  except ValueError as e:
    raise errors.UsageError(f"{path}: {errors.one_line(e)}") from None
  try:
    config.update(saved)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    raise errors.UsageError(
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


@dataclasses.dataclass(frozen=True)
class FollowSettings:
  """``configs/validate.py``'s settings, checked (``from_config``)."""

  run_dir: Path
  follow: bool
  poll_seconds: float
  max_idle_seconds: float
  validation: dict[str, Any]  # overrides of the run's validation block
  imports: str
  benchmark_paths: str

  @classmethod
  def from_config(cls, config: config_dict.ConfigDict) -> FollowSettings:
    """Checks every setting; one ``UsageError`` names every problem."""
    checks.check_config_keys(config, default_config(), CONFIG_NAME)
    p = checks.Problems()
    run_dir = str(config.run_dir).strip()
    if not run_dir:
      p.messages.append(
          "No run folder given: disco-validate RUN_DIR [--follow] (or "
          "--config.run_dir=RUN_DIR)."
      )
    max_idle = p.get(
        checks.check_number, config.max_idle_seconds, "max_idle_seconds"
    )
    if max_idle is not None and max_idle < 0:
      p.messages.append(
          f"config.max_idle_seconds must be >= 0 (0: never), got {max_idle}."
      )
    settings = cls(
        run_dir=Path(run_dir).expanduser(),
        follow=p.get(checks.check_bool, config.follow, "follow"),
        poll_seconds=p.get(
            checks.check_number, config.poll_seconds, "poll_seconds", True
        ),
        max_idle_seconds=max_idle,
        validation=p.get(
            checks.as_dict, config.validation, "validation", default={}
        ),
        imports=str(config.imports or ""),
        benchmark_paths=str(config.benchmark_paths or ""),
    )
    p.raise_if_any()
    return settings


class Follower:
  """Validates a run's checkpoints (see the module docstring).

  Args:
    settings: the checked ``configs/validate.py`` settings (or the config).
    log: where messages go.
    progress: show a progress bar per held-out environment.

  Raises:
    UsageError: bad input, before anything is trained.
  """

  def __init__(
      self,
      settings: FollowSettings | config_dict.ConfigDict,
      log: Callable[[str], None] = print,
      progress: bool = True,
  ):
    if not isinstance(settings, FollowSettings):
      settings = FollowSettings.from_config(settings)
    self.run_dir, self.follow = settings.run_dir, settings.follow
    self.poll = settings.poll_seconds
    self.max_idle = settings.max_idle_seconds
    self.log, self.progress = log, progress
    run = run_config(
        self.run_dir,
        settings.validation,
        settings.imports,
        settings.benchmark_paths,
    )
    self.every = validation_settings.parse_settings(run.validation).every
    with run.unlocked():
      run.validation.every = 0  # this process validates, not the run's loop
    self.plan = plan.build(run)
    self.validation = plan.make_validation(self.plan)
    if self.validation is None:
      raise errors.UsageError(
          f"The run in {self.run_dir} has no held-out environments "
          "(config.validation.envs): give them, e.g. "
          "--config.validation.envs=\"({'env': 'delayed_chain'},)\"."
      )
    self.manager = ckpt_lib.CheckpointManager(
        self.run_dir / run_folder.CHECKPOINT_DIR, keep=2**30
    )
    self._template = None

  # ------------------------------------------------------------ queries
  def _num_meta_steps(self) -> int:
    saved = _read_json(self.run_dir / run_folder.CONFIG_FILE)["config"]
    return int(saved["num_meta_steps"])

  def finished(self) -> bool:
    """Whether the run has written its outputs at its last meta-step."""
    path = self.run_dir / run_folder.SUMMARY_FILE
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
    """The meta-parameters of checkpoint ``step`` (None if gone or unreadable,
    e.g. rotated out meanwhile)."""
    if self._template is None:
      self._template = plan.abstract_state(self.plan.population, self.plan.rule)
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
    run = self.plan.run_settings
    params = rule_files.load_initial_meta_params(
        run.init_meta_params, self.plan.rule, run.init_seed, run.rule
    )
    self.validate(0, params)

  def once(self) -> None:
    latest = self.manager.latest_step()
    if latest is None:
      raise errors.UsageError(
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
    config: FollowSettings | config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any]:
  """Validates a run's checkpoints (following them with ``config.follow``);
  returns the validation summary.

  Raises:
    UsageError: bad input (before anything is trained).
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
