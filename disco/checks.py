"""Checking user settings where they enter.

Each check raises ``errors.UsageError`` with one line naming the key, the value
and what it must be; ``Problems`` collects several so one pass reports every bad
setting together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
import contextlib
import difflib
import importlib
import math
import os
from pathlib import Path
import runpy
import sys
from typing import Any, TypeVar

from ml_collections import config_dict
import numpy as np

from disco import configs as configs_pkg
from disco import errors
from disco import policies
from disco import tracking

T = TypeVar("T")


class Problems:
  """Collects the usage errors of one settings pass.

  ``with problems.check(): ...`` records a ``UsageError`` raised inside;
  ``get(fn, *args)`` returns ``fn(*args)``, or ``default`` after recording its
  error; ``raise_if_any`` raises one ``UsageError`` listing every problem in
  order.
  """

  def __init__(self):
    self.messages: list[str] = []

  @contextlib.contextmanager
  def check(self) -> Iterator[None]:
    try:
      yield
    except errors.UsageError as e:
      self.messages.append(errors.one_line(e))

  def get(self, fn: Callable[..., T], *args: Any, default: Any = None) -> T:
    try:
      return fn(*args)
    except errors.UsageError as e:
      self.messages.append(errors.one_line(e))
      return default

  def raise_if_any(self) -> None:
    if len(self.messages) == 1:
      raise errors.UsageError(self.messages[0])
    if self.messages:
      listed = " ".join(
          f"({i}) {m}" for i, m in enumerate(self.messages, start=1)
      )
      raise errors.UsageError(f"{len(self.messages)} problems: {listed}")


def config_path(name: str) -> Path:
  """The file of launcher config ``name`` (``configs/<name>.py``)."""
  return Path(configs_pkg.__file__).resolve().parent / f"{name}.py"


def config_or_default(
    config: config_dict.ConfigDict | None, name: str
) -> config_dict.ConfigDict:
  """A copy of ``config``, or launcher ``name``'s default config."""
  if config is None:
    return load_config(name)
  return config.copy_and_resolve_references()


def load_config(name: str) -> config_dict.ConfigDict:
  """The default config of launcher ``name``."""
  return runpy.run_path(str(config_path(name)))["get_config"]()


def load_config_file(path: Path, arg: str | None) -> config_dict.ConfigDict:
  """``get_config()`` (or ``get_config(arg)``) of an ml_collections file."""
  if not path.is_file():
    raise errors.UsageError(f"Config file {path} does not exist.")
  try:
    get_config = runpy.run_path(str(path))["get_config"]
    config = get_config() if arg is None else get_config(arg)
  except Exception as e:  # noqa: BLE001 - a broken config file is bad input
    raise errors.UsageError(
        f"Config file {path} does not load: {type(e).__name__}: "
        f"{errors.one_line(e)}"
    ) from None
  if not isinstance(config, config_dict.ConfigDict):
    raise errors.UsageError(
        f"Config file {path} did not give a ConfigDict "
        f"({type(config).__name__})."
    )
  return config


def check_config_keys(
    config: config_dict.ConfigDict, expected: config_dict.ConfigDict, name: str
) -> None:
  """Raises a ``UsageError`` for keys ``config`` adds or lacks at the top."""
  keys, valid = set(config.keys()), set(expected.keys())
  if keys - valid:
    raise errors.UsageError(
        f"Unknown config key(s) {sorted(keys - valid)}; valid keys: "
        f"{', '.join(sorted(valid))}."
    )
  if valid - keys:
    raise errors.UsageError(
        f"The config lacks key(s) {sorted(valid - keys)}: start from "
        f"{config_path(name)}."
    )


# The largest seed: ``jax.random.PRNGKey`` reads a seed's low 32 bits
# (``ops.prng_seeds``), so a larger one would repeat a smaller one's keys.
MAX_SEED = 2**32 - 1
# The largest count of environment steps: the training loop counts them in
# int32 (``training.loop``).
MAX_ENV_STEPS = 2**31 - 1


def check_int(
    value: Any,
    name: str,
    minimum: int,
    maximum: int | None = None,
    why: str = "",
) -> int:
  """``value`` as an int ``>= minimum`` and, if given, ``<= maximum`` (``name``:
  its config key; ``why``: why the maximum, for the message)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise errors.UsageError(f"config.{name} must be an integer, got {value!r}.")
  if value < minimum:
    raise errors.UsageError(f"config.{name} must be >= {minimum}, got {value}.")
  if maximum is not None and value > maximum:
    raise errors.UsageError(
        f"config.{name} must be <= {maximum}{f' ({why})' if why else ''}, "
        f"got {value}."
    )
  return int(value)


def check_seed(value: Any, name: str = "seed", count: int = 1) -> int:
  """``value`` as the first of ``count`` seeds ``value .. value + count - 1``,
  each in ``0 .. MAX_SEED``."""
  why = "seeds are 32-bit: jax.random.PRNGKey reads their low 32 bits"
  if count > 1:
    why += f", and the {count} seeds run from seed to seed + {count - 1}"
  return check_int(value, name, 0, MAX_SEED - max(count - 1, 0), why)


def check_bool(value: Any, name: str) -> bool:
  if not isinstance(value, bool):
    raise errors.UsageError(
        f"config.{name} must be True or False, got {value!r}."
    )
  return value


def is_finite_number(value: Any) -> bool:
  """Whether ``value`` is a finite int or float (not a bool)."""
  return (
      isinstance(value, (int, float))
      and not isinstance(value, bool)
      and math.isfinite(value)
  )


def check_number(value: Any, name: str, positive: bool = False) -> float:
  """``value`` as a finite float (``> 0`` if ``positive``)."""
  if not is_finite_number(value) or (positive and not value > 0):
    need = "a number > 0" if positive else "a finite number"
    raise errors.UsageError(f"config.{name} must be {need}, got {value!r}.")
  return float(value)


def check_policy(value: Any, name: str = "policy") -> dict[str, Any]:
  """``config.<name>``: the continuous-action policy's settings
  (``disco.policies.make_policy``; None values: defaults)."""
  given = as_dict(value or {}, name)
  set_values = {k: v for k, v in given.items() if v is not None}
  if "squash" in set_values:
    check_bool(set_values["squash"], f"{name}.squash")
  if "init_log_std" in set_values:
    check_number(set_values["init_log_std"], f"{name}.init_log_std")
  if "log_std" in set_values and set_values["log_std"] not in policies.LOG_STDS:
    raise errors.UsageError(
        f"config.{name}.log_std must be one of "
        f"{', '.join(policies.LOG_STDS)}, got {set_values['log_std']!r}."
    )
  return given


def as_dict(value: Any, name: str) -> dict[str, Any]:
  if isinstance(value, config_dict.ConfigDict):
    return value.to_dict()
  if isinstance(value, dict):
    return dict(value)
  raise errors.UsageError(f"config.{name} must be a dict, got {value!r}.")


def check_tracking(spec: Any) -> tuple[str, ...]:
  """The backends of ``config.tracking`` (``disco.tracking``), checked."""
  try:
    return tracking.parse(spec)
  except tracking.TrackingError as e:
    raise errors.UsageError(f"config.tracking: {errors.one_line(e)}") from None


def import_modules(names: str) -> None:
  """Imports the comma-separated modules of ``config.imports`` (which register
  rules or environments), from ``sys.path`` or, as ``python -m`` would, the
  current directory."""
  for name in (n.strip() for n in str(names or "").split(",")):
    if not name:
      continue
    if os.getcwd() not in sys.path:
      sys.path.append(os.getcwd())
    try:
      importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure is a usage error
      raise errors.UsageError(
          f"Cannot import module {name!r} (config.imports): "
          f"{type(e).__name__}: {errors.one_line(e)}. Check the name and that it is "
          "in the current directory or on PYTHONPATH."
      ) from None


def override(
    config: config_dict.ConfigDict,
    overrides: Mapping[str, Any],
    moved: Callable[[str], str | None] = lambda path: None,
) -> None:
  """Sets ``config``'s values as ``--config.KEY=VALUE`` flags would (a dict
  value sets keys of a group, e.g. ``env_settings={"rows": 5}``);
  ``moved(path)`` names a moved key's new spelling.

  Raises:
    UsageError: naming every unknown key (with close matches) or value of the
      wrong type.
  """
  problems = Problems()
  _override(config, dict(overrides), "config", moved, problems)
  problems.raise_if_any()


def _override(node, values, where, moved, problems: Problems) -> None:
  for key, value in values.items():
    if key not in node:
      close = difflib.get_close_matches(key, list(node.keys()), 2)
      hint = " or ".join(f"'{where}.{c}'" for c in close)
      new = moved(f"{where}.{key}".removeprefix("config."))
      if new is not None:
        hint = f"'config.{new}' (it moved there)"
      problems.messages.append(
          f"Unknown config key '{where}.{key}'."
          + (f" Did you mean {hint}?" if hint else "")
          + f" Valid keys of {where}: {', '.join(sorted(node.keys()))}."
      )
    elif isinstance(value, Mapping) and isinstance(
        node[key], config_dict.ConfigDict
    ):
      _override(node[key], dict(value), f"{where}.{key}", moved, problems)
    else:
      try:
        node[key] = value
      except (TypeError, ValueError) as e:
        problems.messages.append(
            f"{where}.{key}={value!r}: {errors.one_line(e)}"
        )
