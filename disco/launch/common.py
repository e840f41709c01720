"""The launcher core shared by ``disco-eval`` and ``disco-meta-train``.

A launcher is a config (``disco.configs.<name>``, i.e. the top-level
``configs/<name>.py``) and three steps that other launchers may reuse:
``build`` checks the config and builds what a run needs, ``run`` trains, and
``write`` saves the outputs. This module holds what they share:

* usage errors: bad input is a ``UsageError``, printed as one line with exit
  status 2 (``fail``); training that diverged raises ``Diverged``, printed as
  one line with exit status 3; a full disk or an exhausted device memory is a
  ``ResourceError`` (``resource_errors``), one line naming the resource and
  how to continue, exit status 1;
* signals: SIGINT and SIGTERM set a flag (``stop_requested``) that the
  launchers check at safe points (``check_stop`` raises ``Stopped`` there),
  never an exception in the middle of a write; ``signals_deferred`` marks a
  save that a second signal must not cut short;
* the output folder: one writer at a time (``claim_output_dir``, a
  ``disco.files.FolderLock``) and ``overwrite=True`` emptying it first
  (``empty_output_dir``);
* config checks (``check_config_keys``, ``check_int``, ...), user modules that
  register rules or environments (``import_modules``);
* rule resolution by registry name or file (``resolve_rule``);
* outputs (``output_dir``, ``write_json``, ``fmt``, ``steady_state``);
* the command line (``run_launcher``: absl flags with an ``ml_collections``
  ``--config`` file whose values are overridden as ``--config.key=value``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
import contextlib
import dataclasses
import datetime
import difflib
import importlib
import math
import os
from pathlib import Path
import re
import runpy
import signal
import sys
import threading
from typing import Any, NoReturn

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_dict
from ml_collections import config_flags
import numpy as np

from disco import compile_cache
from disco import configs as configs_pkg
from disco import files
from disco import tracking
from disco import weights as weights_lib
from disco.launch import rule_settings
from disco.update_rules import base as rule_base
from disco.update_rules import registry

AGENT_PARAMS_KIND = "agent_params"


class UsageError(Exception):
  """Bad user input; launchers print it as one line and exit with status 2."""


class Diverged(Exception):
  """Training diverged (non-finite values) beyond recovery; launchers print
  it as one line and exit with status ``DIVERGED_EXIT``."""


DIVERGED_EXIT = 3
RESOURCE_EXIT = 1
INTERRUPTED_EXIT = 130


class ResourceError(Exception):
  """The disk is full or the device's memory is exhausted; launchers print it
  as one line (naming the resource and how to continue) and exit with status
  ``RESOURCE_EXIT``."""


class Stopped(KeyboardInterrupt):
  """Raised at a safe point after SIGINT or SIGTERM asked the launcher to
  stop (``check_stop``); launchers exit with status ``INTERRUPTED_EXIT``.
  The signal handler itself never raises."""


def one_line(message: Any) -> str:
  """Collapses a (possibly multi-line) message into a single line."""
  parts = [p.strip() for p in str(message).splitlines() if p.strip()]
  return " ".join(parts)


def fail(program: str, message: Any, status: int = 2) -> NoReturn:
  """Prints a one-line error and exits with ``status``."""
  print(f"{program}: error: {one_line(message)}", file=sys.stderr)
  sys.exit(status)


# -------------------------------------------------------------- configs ----


def config_path(name: str) -> Path:
  """The file of launcher config ``name`` (``configs/<name>.py``)."""
  return Path(configs_pkg.__file__).resolve().parent / f"{name}.py"


def load_config(name: str) -> config_dict.ConfigDict:
  """The default config of launcher ``name``."""
  return runpy.run_path(str(config_path(name)))["get_config"]()


def check_config_keys(
    config: config_dict.ConfigDict, expected: config_dict.ConfigDict, name: str
) -> None:
  """Raises a ``UsageError`` for keys ``config`` adds or lacks at the top."""
  keys, valid = set(config.keys()), set(expected.keys())
  if keys - valid:
    raise UsageError(
        f"Unknown config key(s) {sorted(keys - valid)}; valid keys: "
        f"{', '.join(sorted(valid))}."
    )
  if valid - keys:
    raise UsageError(
        f"The config lacks key(s) {sorted(valid - keys)}: start from "
        f"{config_path(name)}."
    )


def check_int(value: Any, name: str, minimum: int) -> int:
  """``value`` as an int ``>= minimum`` (``name`` is its config key)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise UsageError(f"config.{name} must be an integer, got {value!r}.")
  if value < minimum:
    raise UsageError(f"config.{name} must be >= {minimum}, got {value}.")
  return int(value)


def check_bool(value: Any, name: str) -> bool:
  if not isinstance(value, bool):
    raise UsageError(f"config.{name} must be True or False, got {value!r}.")
  return value


def check_number(value: Any, name: str, positive: bool = False) -> float:
  """``value`` as a finite float (``> 0`` if ``positive``)."""
  if (
      isinstance(value, bool)
      or not isinstance(value, (int, float))
      or not math.isfinite(value)
      or (positive and not value > 0)
  ):
    need = "a number > 0" if positive else "a finite number"
    raise UsageError(f"config.{name} must be {need}, got {value!r}.")
  return float(value)


def as_dict(value: Any, name: str) -> dict[str, Any]:
  if isinstance(value, config_dict.ConfigDict):
    return value.to_dict()
  if isinstance(value, dict):
    return dict(value)
  raise UsageError(f"config.{name} must be a dict, got {value!r}.")


def check_tracking(spec: Any) -> tuple[str, ...]:
  """The backends of ``config.tracking`` (``disco.tracking``), checked."""
  try:
    return tracking.parse(spec)
  except tracking.TrackingError as e:
    raise UsageError(f"config.tracking: {one_line(e)}") from None


def import_modules(names: str) -> None:
  """Imports the comma-separated modules of ``config.imports`` (modules that
  register rules or environments when imported)."""
  for name in (n.strip() for n in str(names or "").split(",")):
    if not name:
      continue
    try:
      importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure is a usage error
      raise UsageError(
          f"Cannot import module {name!r} (config.imports): "
          f"{type(e).__name__}: {one_line(e)}. Check the name and that it is "
          "on PYTHONPATH."
      ) from None


# ---------------------------------------------------------------- rules ----


@dataclasses.dataclass(frozen=True)
class ResolvedRule:
  """A rule ready to train with.

  Attributes:
    label: a short name for outputs (the registry name or the file's stem).
    settings: agent settings (``settings.rule`` is a registry name).
    rule: the rule built from ``settings``.
    meta_params: its meta-parameters, checked against the structure of
      ``rule.init_meta_params`` (``{}`` for hand-designed rules).
    source: where they come from: ``"none"`` (hand-designed), ``"random"``
      (a random initialisation), ``"pretrained"`` or ``"file"``.
  """

  label: str
  settings: config_dict.ConfigDict
  rule: rule_base.UpdateRule
  meta_params: Any
  source: str


def _valid_rules_text() -> str:
  return (
      f"one of {', '.join(registry.rule_names())}, or the path of a .npz "
      "file saved by disco.weights.save_meta_params"
  )


def is_rule_path(name_or_path: str) -> bool:
  """Whether ``name_or_path`` names a rule file rather than a registered
  rule."""
  return (
      name_or_path.endswith(".npz")
      or os.sep in name_or_path
      or (os.altsep is not None and os.altsep in name_or_path)
      or Path(name_or_path).expanduser().is_file()
  )


def _build_rule(settings: config_dict.ConfigDict):
  """``(rule, expected meta-parameter shapes)``."""
  try:
    rule = registry.make_rule(settings)
  except ValueError as e:
    raise UsageError(one_line(e)) from None
  return rule, jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))


def _load_checked(path, expected, what: str):
  try:
    return weights_lib.load_meta_params(path, expected)
  except weights_lib.NonFiniteError as e:
    raise UsageError(one_line(e)) from None
  except weights_lib.WeightsError as e:
    raise UsageError(f"{what}: {one_line(e)}") from None


def _resolve_named(name: str, weights: str | None) -> ResolvedRule:
  entry = registry.get_entry(name)
  settings = registry.default_settings(name)
  rule, expected = _build_rule(settings)
  has_meta_params = bool(jax.tree.leaves(expected))
  if entry.pretrained is not None:
    try:
      meta_params = entry.pretrained(weights, expected)
    except weights_lib.WeightsError as e:
      raise UsageError(f"Cannot load {name}: {one_line(e)}") from None
    source = "pretrained"
  elif weights is not None:
    if not has_meta_params:
      raise UsageError(
          f"Rule {name!r} has no meta-parameters, so a weights file "
          f"({weights}) makes no sense for it: drop the weights setting."
      )
    meta_params = _load_checked(
        weights, expected, f"Weights {weights} do not fit rule {name!r}"
    )
    source = "file"
  else:
    meta_params = rule.init_meta_params(jax.random.PRNGKey(0))
    source = "random" if has_meta_params else "none"
  return ResolvedRule(
      label=name,
      settings=settings,
      rule=rule,
      meta_params=meta_params,
      source=source,
  )


def _settings_from_metadata(
    path: Path, metadata: dict[str, Any]
) -> config_dict.ConfigDict:
  """The agent settings a rule file's metadata describes."""
  if metadata.get("kind") == AGENT_PARAMS_KIND:
    raise UsageError(
        f"{path} holds trained agent parameters, not an update "
        "rule's meta-parameters."
    )
  name = metadata.get("rule")
  if not isinstance(name, str):
    raise UsageError(
        f"{path} does not say which rule it belongs to (no 'rule' in its "
        "metadata): save it with disco.weights.save_meta_params(path, params, "
        "metadata={'rule': ...})."
    )
  if name not in registry.rule_names():
    raise UsageError(
        f"{path} holds meta-parameters of rule {name!r}, which is "
        f"not registered: use {_valid_rules_text()} (or import "
        "the module that registers it with config.imports)."
    )
  settings = registry.default_settings(name)
  overrides = metadata.get("settings") or {}
  rule_kwargs = metadata.get("rule_kwargs")
  try:
    if not isinstance(overrides, dict):
      raise TypeError("'settings' must be a JSON object")
    settings.update(overrides)
    if rule_kwargs is not None:
      if not isinstance(rule_kwargs, dict):
        raise TypeError("'rule_kwargs' must be a JSON object")
      settings.rule_kwargs = {**settings.rule_kwargs.to_dict(), **rule_kwargs}
  except (TypeError, AttributeError, KeyError, ValueError) as e:
    raise UsageError(
        f"The settings in the metadata of {path} do not fit rule {name!r}: "
        f"{one_line(e)}"
    ) from None
  if settings.rule != name:
    raise UsageError(
        f"The metadata of {path} names rule {name!r} but its "
        f"settings say {settings.rule!r}."
    )
  return settings


def _resolve_file(path: Path) -> ResolvedRule:
  if not path.is_file():
    raise UsageError(
        f"Rule file {path} does not exist: check the path (or "
        f"use {_valid_rules_text()})."
    )
  # Read once: the metadata names the rule, whose shapes are checked
  # against the arrays' headers before their data is read.
  try:
    npz = weights_lib.NpzFile(path)
  except weights_lib.WeightsError as e:
    raise UsageError(f"Cannot read rule file {path}: {one_line(e)}") from None
  with npz:
    try:
      metadata = npz.metadata()
    except weights_lib.WeightsError as e:
      raise UsageError(f"Cannot read rule file {path}: {one_line(e)}") from None
    settings = _settings_from_metadata(path, metadata)
    rule, expected = _build_rule(settings)
    try:
      meta_params = npz.params(expected)
    except weights_lib.NonFiniteError as e:
      raise UsageError(one_line(e)) from None
    except weights_lib.WeightsError as e:
      raise UsageError(
          f"Rule file {path} does not fit rule {settings.rule!r}: "
          f"{one_line(e)}"
      ) from None
  return ResolvedRule(
      label=path.stem or "rule",
      settings=settings,
      rule=rule,
      meta_params=meta_params,
      source="file",
  )


def resolve_rule(name_or_path: str, weights: str | None = None) -> ResolvedRule:
  """A rule given by registry name or by file, built once.

  Args:
    name_or_path: a registered rule (``update_rules.registry``): it gets its
      default settings and its pretrained meta-parameters (``disco103``), the
      ones in ``weights``, or a random initialisation (``{}`` for
      hand-designed rules); or the path of an ``.npz`` written by
      ``disco.weights.save_meta_params`` whose metadata names the ``rule``
      (and optionally ``rule_kwargs`` and ``settings`` overriding that rule's
      default settings).
    weights: for a pretrained entry, the path of its file (default: found or
      downloaded); for a rule with meta-parameters, a file of them to load.
      Not allowed with a path.

  Raises:
    UsageError: unknown rule, missing or mismatching file.
  """
  name_or_path = str(name_or_path).strip()
  if weights is not None:
    weights = str(weights).strip() or None
  if not name_or_path:
    raise UsageError(f"No rule given: use {_valid_rules_text()}.")
  if name_or_path in registry.rule_names():
    return _resolve_named(name_or_path, weights)
  if not is_rule_path(name_or_path):
    close = difflib.get_close_matches(name_or_path, registry.rule_names(), 3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UsageError(
        f"Unknown rule {name_or_path!r}.{hint} Use " f"{_valid_rules_text()}."
    )
  if weights is not None:
    raise UsageError(
        f"The rule is already a file ({name_or_path}); the weights setting "
        f"({weights}) only applies to a rule name."
    )
  return _resolve_file(Path(name_or_path).expanduser())


# -------------------------------------------------------------- outputs ----


def output_dir(requested: str, prefix: str) -> Path:
  """``requested`` (``~`` expanded), or ``runs/<prefix>-<UTC time>[-k]``."""
  if requested:
    out = Path(requested).expanduser()
  else:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", prefix)
    out = Path("runs") / f"{safe}-{stamp}"
    suffix = 1
    while out.exists():
      suffix += 1
      out = Path("runs") / f"{safe}-{stamp}-{suffix}"
  if out.exists() and not out.is_dir():
    raise UsageError(f"output_dir {out} exists and is not a folder.")
  return out


def make_dir(path: Path) -> Path:
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UsageError(f"Cannot create output_dir {path}: {e}.") from None
  return path


def to_jsonable(x: Any) -> Any:
  """Plain JSON values from configs, NumPy and JAX arrays and scalars (e.g.
  gymnax's environment parameters), paths and containers."""
  if isinstance(x, config_dict.ConfigDict):
    x = x.to_dict()
  if isinstance(x, (np.ndarray, jax.Array)):
    return to_jsonable(np.asarray(x).tolist())
  if isinstance(x, dict):
    return {str(k): to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [to_jsonable(v) for v in x]
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  if isinstance(x, Path):
    return str(x)
  return x


def write_json(path: Path, data: Any) -> None:
  """Writes ``data`` (``to_jsonable``) as JSON, atomically."""
  files.write_json(path, to_jsonable(data))


def claim_output_dir(
    out: Path, program: str, name: str = files.LOCK_FILE
) -> files.FolderLock:
  """Creates ``out`` and takes its writer's lock (held until released or
  the process ends).

  Raises:
    UsageError: another process holds it (one line naming that process), or
      the folder cannot be created.
  """
  try:
    return files.FolderLock(out, program, name).acquire()
  except files.FolderInUse as e:
    raise UsageError(str(e)) from None
  except OSError as e:
    raise UsageError(f"Cannot create output_dir {out}: {e}.") from None


def _left_over(name: str) -> bool:
  """A temporary file of an interrupted atomic write."""
  return name.startswith(".") and name.endswith(".tmp")


def empty_output_dir(out: Path, lock: files.FolderLock) -> list[str]:
  """Empties ``out`` for ``overwrite=True`` (keeping ``lock``'s files);
  returns the names removed. Only a folder that holds a run (its
  ``config.json`` or ``summary.json``) or nothing but left-over temporary
  files is emptied.

  Raises:
    UsageError: ``out`` holds other files: it is not a run folder.
  """
  entries = sorted(n for n in os.listdir(out) if n not in lock.names)
  if not entries:
    return []
  holds_run = (out / "config.json").exists() or (out / "summary.json").exists()
  if not holds_run and not all(_left_over(n) for n in entries):
    raise UsageError(
        f"output_dir {out} is not empty and holds no run (no config.json): "
        "overwrite=True only empties run folders; choose an empty or new "
        "folder."
    )
  try:
    files.clear_folder(out, keep=lock.names)
  except OSError as e:
    raise UsageError(
        f"Cannot empty output_dir {out} for overwrite=True: {e}."
    ) from None
  return entries


def fmt(x: float | None, digits: int = 3) -> str:
  """``x`` with ``digits`` decimals; ``n/a`` for None, NaN or infinity."""
  if x is None or not math.isfinite(x):
    return "n/a"
  return f"{x:.{digits}f}"


def steady_state(times: Sequence[float]) -> tuple[float | None, float | None]:
  """``(steady time per call, compile time)`` of calls of one compiled
  program: the first call compiles, the median of the others is the steady
  state. With one call there is no compile estimate."""
  if not times:
    return None, None
  if len(times) == 1:
    return float(times[0]), None
  steady = float(np.median(times[1:]))
  return steady, max(0.0, times[0] - steady)


def processes_text(preposition: str) -> str:
  """``" <preposition> N processes"`` in a multi-process run, else ``""``."""
  processes = jax.process_count()
  return f" {preposition} {processes} processes" if processes > 1 else ""


def run_record() -> dict[str, Any]:
  """Versions and devices, saved with every run."""
  import disco

  return dict(
      disco_version=disco.__version__,
      jax_version=jax.__version__,
      devices=[str(d) for d in jax.devices()],
      processes=jax.process_count(),
  )


# --------------------------------------------------------- command line ----


_CONFIG_FILE_ARG = re.compile(r"^--?config(=(.*))?$")


def config_file_from_argv(
    argv: Sequence[str], default: Path
) -> tuple[Path, str | None, list[str]]:
  """The ``--config=FILE[:ARG]`` of the command line (else ``default``), its
  argument, and ``argv`` without it."""
  rest, found = [], None
  i = 0
  while i < len(argv):
    m = _CONFIG_FILE_ARG.match(argv[i])
    if m and found is None:
      if m.group(1):
        found = m.group(2)
      else:
        found = argv[i + 1] if i + 1 < len(argv) else ""
        i += 1
    else:
      rest.append(argv[i])
    i += 1
  if found is None:
    return default, None, rest
  if Path(found).exists() or ":" not in found:
    return Path(found), None, rest
  path, arg = found.split(":", 1)
  return Path(path), arg, rest


def load_config_file(path: Path, arg: str | None) -> config_dict.ConfigDict:
  """``get_config()`` (or ``get_config(arg)``) of an ml_collections file."""
  if not path.is_file():
    raise UsageError(f"Config file {path} does not exist.")
  try:
    get_config = runpy.run_path(str(path))["get_config"]
    config = get_config() if arg is None else get_config(arg)
  except Exception as e:  # noqa: BLE001 - a broken config file is bad input
    raise UsageError(
        f"Config file {path} does not load: {type(e).__name__}: "
        f"{one_line(e)}"
    ) from None
  if not isinstance(config, config_dict.ConfigDict):
    raise UsageError(
        f"Config file {path} did not give a ConfigDict "
        f"({type(config).__name__})."
    )
  return config


def unknown_override(
    argv: Sequence[str], config: config_dict.ConfigDict
) -> str | None:
  """Describes the first ``--config.a.b=...`` naming a key that is not in
  ``config``, with its close matches."""
  for arg in argv:
    m = re.match(r"^--?(?:no)?config\.([^=]+)", arg)
    if not m:
      continue
    node, path = config, []
    for key in m.group(1).split("."):
      if not isinstance(node, config_dict.ConfigDict) or key not in node:
        where = "config" + "".join(f".{p}" for p in path)
        keys = (
            list(node.keys())
            if isinstance(node, config_dict.ConfigDict)
            else []
        )
        close = difflib.get_close_matches(key, keys, 2)
        hint = " or ".join(f"'{where}.{c}'" for c in close)
        return (
            f"Unknown config key '{where}.{key}' (in {arg.split('=')[0]})."
            + (f" Did you mean {hint}?" if hint else "")
            + f" Valid keys of {where}: {', '.join(sorted(keys)) or 'none'}."
        )
      node, path = node[key], [*path, key]
  return None


def parse_config_flags(
    argv: Sequence[str],
    default_config: Path,
    help_text: str,
    flag_values: flags.FlagValues | None = None,
    prepare: Callable[[config_dict.ConfigDict, list[str]], None] | None = None,
) -> list[str]:
  """Defines ``--config`` on ``flag_values`` (default: absl's FLAGS) and
  parses ``argv``; returns the remaining arguments.

  ``--config=FILE[:ARG]`` names an ml_collections config file (default:
  ``default_config``); ``--config.key=value`` overrides its values.
  ``prepare(config, argv)``, if given, may adjust the loaded config before
  the overrides apply (e.g. give ``env_settings`` the keys of the
  environment the command line names).

  Raises:
    UsageError: for unknown flags or config keys, bad values, or a config
      file that does not load.
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  path, arg, argv = config_file_from_argv(list(argv), default_config)
  config = load_config_file(path, arg)
  if prepare is not None:
    prepare(config, argv)
  try:
    if "config" not in fv:
      config_flags.DEFINE_config_dict(
          "config",
          config,
          help_text,
          flag_values=fv,
          lock_config=True,
          sys_argv=argv,
      )
    return fv(argv)
  except Exception as e:  # noqa: BLE001 - every parse failure is a usage error
    # ml_collections raises AttributeError/KeyError for unknown keys, absl
    # its own errors for bad values.
    message = None
    if isinstance(e, (AttributeError, KeyError)):
      message = unknown_override(argv, config)
    raise UsageError(message or one_line(e)) from None


def override_value(argv: Sequence[str], key: str) -> str | None:
  """The last value given as ``--config.<key>=VALUE`` in ``argv``, if any."""
  value = None
  for arg in argv:
    if arg.startswith(f"--config.{key}="):
      value = arg.split("=", 1)[1]
  return value


# ---------------------------------------------------------------- signals --


class _StopState:
  """What the signal handler records (module-level: one per process)."""

  def __init__(self):
    self.event = threading.Event()
    self.signal_name: str | None = None
    self.deferring = 0
    self.program = "disco"


_STOP = _StopState()


def _say(text: str) -> None:
  # os.write, not print: a handler that prints while the main thread is
  # printing would raise a "reentrant call" error.
  try:
    os.write(2, f"{_STOP.program}: {text}\n".encode())
  except OSError:
    pass


def _on_signal(signum, frame) -> None:
  del frame
  name = signal.Signals(signum).name
  if not _STOP.event.is_set():
    _STOP.signal_name = name
    _STOP.event.set()
    _say(
        f"{name} received: stopping at the next safe point (a run that "
        "checkpoints saves first)."
    )
  elif _STOP.deferring or signum != signal.SIGINT:
    _say(f"{name} received again: still stopping; ignored.")
  else:  # Ctrl-C twice, outside a save: the user will not wait.
    _say(f"{name} received again: stopping now.")
    os._exit(INTERRUPTED_EXIT)  # every output file is written atomically


def install_stop_handlers(program: str) -> None:
  """SIGINT and SIGTERM set the stop flag (see ``check_stop``) instead of
  raising where the program happens to be."""
  _STOP.program = program
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _on_signal)


def stop_requested() -> bool:
  """Whether SIGINT or SIGTERM asked this process to stop."""
  return _STOP.event.is_set()


def check_stop(where: str) -> None:
  """A safe point: raises ``Stopped`` if a signal asked to stop."""
  if _STOP.event.is_set():
    raise Stopped(f"{_STOP.signal_name}: stopped {where}")


def wait_for_stop(seconds: float) -> bool:
  """Sleeps ``seconds`` or until a signal asks to stop; returns whether
  one did."""
  return _STOP.event.wait(seconds)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
  """A save that must finish: signals received meanwhile are only noted."""
  _STOP.deferring += 1
  try:
    yield
  finally:
    _STOP.deferring -= 1


# -------------------------------------------------------------- resources --


def resource_problem(error: BaseException) -> str | None:
  """``"disk"`` or ``"memory"`` when ``error`` (or its cause) is a full
  disk or an exhausted device memory."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    text = str(error)
    if files.is_disk_full(error) or "No space left on device" in text:
      return "disk"
    if "RESOURCE_EXHAUSTED" in text:
      return "memory"
    error = error.__cause__ or error.__context__
  return None


def resource_message(error: BaseException, hint: str) -> str | None:
  """The one line for a full disk or exhausted device memory (None for
  other errors); ``hint`` says how to continue."""
  problem = resource_problem(error)
  if problem == "disk":
    where = getattr(error, "filename", None)
    where = f" while writing {where}" if where else ""
    return (
        f"The disk is full (no space left on device{where}): free space on "
        f"it, then {hint}"
    )
  if problem == "memory":
    detail = one_line(error).split("RESOURCE_EXHAUSTED:", 1)[-1].strip()
    return (
        "Out of device memory (RESOURCE_EXHAUSTED: "
        f"{detail[:160].rstrip(' .')}): lower the sizes (num_seeds, "
        "batch_size, num_envs, the population) or free the device, then "
        f"{hint}"
    )
  return None


@contextlib.contextmanager
def resource_errors(hint: str) -> Iterator[None]:
  """Turns a full disk or an exhausted device memory into a
  ``ResourceError`` whose one line ends with ``hint`` (how to continue)."""
  try:
    yield
  except (ResourceError, UsageError, Diverged, KeyboardInterrupt):
    raise
  except Exception as e:
    message = resource_message(e, hint)
    if message is None:
      raise
    raise ResourceError(message) from None


def print_rule_settings(
    program: str, config: config_dict.ConfigDict, names: str | None
) -> None:
  """Prints the settings of the rules ``names`` (comma-separated; None:
  every rule) after importing ``config.imports``; an unknown name fails with
  exit status 2."""
  try:
    import_modules(config.get("imports", ""))
    wanted = None
    if names is not None:
      wanted = [n.strip() for n in names.split(",") if n.strip()]
    print(rule_settings.describe(wanted))
  except (UsageError, ValueError) as e:
    fail(program, e)


def run_launcher(
    program: str,
    doc: str,
    config_name: str,
    body: Callable[[config_dict.ConfigDict], Any],
    prepare: Callable[[config_dict.ConfigDict, list[str]], None] | None = None,
) -> None:
  """Runs a launcher from the command line.

  Parses ``--config`` (default: ``configs/<config_name>.py``) and its
  overrides (``prepare``: see ``parse_config_flags``), then calls
  ``body(config)`` with the persistent compilation cache that
  ``config.compilation_cache`` names (`disco.compile_cache`), then prints what
  it saved. A ``UsageError`` (while parsing or
  from ``body``) prints one line and exits with status 2, ``Diverged`` one
  line and status 3, a ``ResourceError`` (or a full disk or exhausted device
  memory that ``body`` did not name) one line and status 1. Ctrl-C and
  SIGTERM set a flag that ``body`` checks at safe points (``check_stop``),
  where it may save its state; the program then exits with status 130.
  """
  default_config = config_path(config_name)
  main_module = sys.modules.get("__main__")
  if main_module is not None and not getattr(main_module, "__doc__", None):
    main_module.__doc__ = doc  # what absl's --help shows

  def flags_parser(argv: list[str]) -> list[str]:
    try:
      return parse_config_flags(
          argv,
          default_config,
          f"Config file (default: {default_config}); override its values "
          "with --config.<key>=<value>.",
          prepare=prepare,
      )
    except UsageError as e:
      fail(program, e)

  if "describe_rule" not in flags.FLAGS:
    flags.DEFINE_boolean(
        "list_rules",
        False,
        "Print every registered rule's settings (default, meaning) and exit.",
    )
    flags.DEFINE_string(
        "describe_rule",
        None,
        "Print the settings of these rules (comma-separated names) and exit.",
    )

  def main(argv: Sequence[str]) -> None:
    if flags.FLAGS.list_rules or flags.FLAGS.describe_rule:
      print_rule_settings(
          program,
          flags.FLAGS.config,
          None if flags.FLAGS.list_rules else flags.FLAGS.describe_rule,
      )
      return
    if not flags.FLAGS["verbosity"].present:
      # Keep the output to this program's own lines (JAX, orbax and
      # matplotlib log INFO messages through absl otherwise); --verbosity=0
      # shows them.
      logging.set_verbosity(logging.WARNING)
    # SIGTERM (e.g. a scheduler's pre-emption) is handled like Ctrl-C: a
    # flag checked at safe points.
    install_stop_handlers(program)
    config = flags.FLAGS.config
    cache_folder = compile_cache.enable(
        config.get("compilation_cache", ""), program
    )
    compile_stats = compile_cache.CompileStats()
    try:
      if len(argv) > 1:
        raise UsageError(
            f"Unexpected argument(s) {list(argv[1:])}: settings "
            "are given as --config.<key>=<value>."
        )
      body(config)
      if jax.process_index() == 0:  # as the launchers' other output
        print(compile_stats.describe(cache_folder))
    except UsageError as e:
      fail(program, e)
    except Diverged as e:
      fail(program, e, DIVERGED_EXIT)
    except ResourceError as e:
      fail(program, e, RESOURCE_EXIT)
    except KeyboardInterrupt:
      sys.exit(INTERRUPTED_EXIT)
    except Exception as e:
      message = resource_message(e, "run the same command again.")
      if message is None:
        raise
      fail(program, message, RESOURCE_EXIT)

  app.run(main, flags_parser=flags_parser)
