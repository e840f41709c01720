"""Pieces shared by the launchers: usage errors, rule resolution and
command-line parsing."""

from __future__ import annotations

import os
import re
import runpy
import sys
from pathlib import Path
from typing import Any, Sequence

from absl import flags

import jax
from ml_collections import config_dict
from ml_collections import config_flags

from disco import configs
from disco import weights as weights_lib

DISCO103 = "disco103"
AGENT_PARAMS_KIND = "agent_params"


class UsageError(Exception):
  """Bad user input; launchers print it as one line and exit with status 2."""


def one_line(message: Any) -> str:
  """Collapses a (possibly multi-line) message into a single line."""
  parts = [p.strip() for p in str(message).splitlines() if p.strip()]
  return " ".join(parts)


def rule_names() -> tuple[str, ...]:
  """Everything ``resolve_rule`` accepts by name (looked up at call time, so
  rules registered later are included)."""
  return (DISCO103, *configs.RULES)


def _is_path(name_or_path: str) -> bool:
  return (name_or_path.endswith(".npz") or os.sep in name_or_path
          or (os.altsep is not None and os.altsep in name_or_path)
          or Path(name_or_path).expanduser().is_file())


def _expected_meta_params(settings: config_dict.ConfigDict):
  """Shapes/dtypes of the meta-parameters of the rule ``settings`` describe."""
  try:
    rule = configs.make_rule(settings.rule, **settings.rule_kwargs.to_dict())
  except ValueError as e:
    raise UsageError(one_line(e)) from None
  return jax.eval_shape(rule.init_params, jax.random.PRNGKey(0)), rule


def _default_settings(rule: str) -> config_dict.ConfigDict:
  if rule not in configs.RULES:
    raise UsageError(
        f"Unknown rule {rule!r}: use one of {', '.join(rule_names())}, or the "
        "path of a .npz file saved by disco.weights.save_meta_params.")
  try:
    return configs.get_settings(rule)
  except ValueError as e:
    raise UsageError(one_line(e)) from None


def _load_checked(path, expected, what: str):
  try:
    return weights_lib.load_meta_params(path, expected)
  except weights_lib.WeightsError as e:
    raise UsageError(f"{what}: {one_line(e)}") from None


def resolve_rule(name_or_path: str, weights: str | None = None
                 ) -> tuple[config_dict.ConfigDict, Any]:
  """Settings and meta-parameters of a rule given by name or file.

  Args:
    name_or_path: ``'disco103'`` (the published Disco103 weights with
      ``configs.get_settings('disco')``); the path of an ``.npz`` written by
      ``disco.weights.save_meta_params`` whose metadata names the ``rule``
      (and optionally ``rule_kwargs`` and ``settings`` overriding that rule's
      default settings); or the name of a registered rule (``configs.RULES``),
      which gets its default settings and its initial meta-parameters
      (``{}`` for hand-designed rules; a random initialisation otherwise).
    weights: for ``'disco103'``, the path of the Disco103 file (default: found
      or downloaded by ``disco.weights.load_disco103``); for a named rule with
      meta-parameters, a file of them to load. Not allowed with a path.

  Returns:
    ``(settings, meta_params)``; the meta-parameters have been checked against
    the structure of the rule's ``init_params``.

  Raises:
    UsageError: unknown rule, missing or mismatching file.
  """
  name_or_path = str(name_or_path).strip()
  if weights is not None:
    weights = str(weights).strip() or None
  if not name_or_path:
    raise UsageError(f"No rule given: use one of {', '.join(rule_names())} "
                     "or the path of a .npz file.")

  if name_or_path == DISCO103:
    settings = _default_settings("disco")
    expected, _ = _expected_meta_params(settings)
    try:
      meta_params = weights_lib.load_disco103(weights, expected=expected)
    except weights_lib.WeightsError as e:
      raise UsageError(f"Cannot load Disco103: {one_line(e)}") from None
    return settings, meta_params

  if name_or_path in configs.RULES:
    settings = _default_settings(name_or_path)
    expected, rule = _expected_meta_params(settings)
    if weights is None:
      return settings, rule.init_params(jax.random.PRNGKey(0))
    if not jax.tree.leaves(expected):
      raise UsageError(
          f"Rule {name_or_path!r} has no meta-parameters, so a weights file "
          f"({weights}) makes no sense for it: drop the weights setting.")
    return settings, _load_checked(
        weights, expected, f"Weights {weights} do not fit rule {name_or_path!r}")

  if not _is_path(name_or_path):
    raise UsageError(
        f"Unknown rule {name_or_path!r}: use one of {', '.join(rule_names())}, "
        "or the path of a .npz file saved by disco.weights.save_meta_params.")
  if weights is not None:
    raise UsageError(
        f"The rule is already a file ({name_or_path}); the weights setting "
        f"({weights}) only applies to rule={DISCO103} or a rule name.")
  path = Path(name_or_path).expanduser()
  if not path.is_file():
    raise UsageError(f"Rule file {path} does not exist: check the path "
                     f"(or use one of {', '.join(rule_names())}).")
  try:
    metadata = weights_lib.load_metadata(path)
  except weights_lib.WeightsError as e:
    raise UsageError(f"Cannot read rule file {path}: {one_line(e)}") from None
  if metadata.get("kind") == AGENT_PARAMS_KIND:
    raise UsageError(
        f"{path} holds trained agent parameters, not an update rule's "
        "meta-parameters.")
  rule = metadata.get("rule")
  if not isinstance(rule, str):
    raise UsageError(
        f"{path} does not say which rule it belongs to (no 'rule' in its "
        "metadata): save it with disco.weights.save_meta_params(path, params, "
        "metadata={'rule': ...}).")
  settings = _default_settings(rule)
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
        f"The settings in the metadata of {path} do not fit rule {rule!r}: "
        f"{one_line(e)}") from None
  if settings.rule != rule:
    raise UsageError(f"The metadata of {path} names rule {rule!r} but its "
                     f"settings say {settings.rule!r}.")
  expected, _ = _expected_meta_params(settings)
  return settings, _load_checked(
      path, expected, f"Rule file {path} does not fit rule {rule!r}")


# ------------------------------------------------------- command line ----


def config_file_from_argv(argv: Sequence[str], default: Path) -> Path:
  """The ``--config`` file named on the command line, else ``default``."""
  for i, arg in enumerate(argv):
    m = re.match(r"^--?config(=(.*))?$", arg)
    if m:
      value = m.group(2) if m.group(1) else (
          argv[i + 1] if i + 1 < len(argv) else "")
      return Path(value.split(":", 1)[0] if not Path(value).exists()
                  else value)
  return default


def unknown_override(argv: Sequence[str], default: Path) -> str | None:
  """Describes the first ``--config.a.b=...`` naming a key that is not there."""
  try:
    base = runpy.run_path(str(config_file_from_argv(argv, default)))[
        "get_config"]()
  except Exception:  # pylint: disable=broad-except
    return None
  for arg in argv:
    m = re.match(r"^--?(?:no)?config\.([^=]+)", arg)
    if not m:
      continue
    node, path = base, []
    for key in m.group(1).split("."):
      if not isinstance(node, config_dict.ConfigDict) or key not in node:
        where = "config" + "".join(f".{p}" for p in path)
        valid = (", ".join(sorted(node.keys()))
                 if isinstance(node, config_dict.ConfigDict) else "none")
        return (f"Unknown config key '{where}.{key}' (in {arg.split('=')[0]})"
                f"; valid keys of {where}: {valid}.")
      node, path = node[key], [*path, key]
  return None


def parse_config_flags(argv: Sequence[str], default_config: Path,
                       help_text: str,
                       flag_values: flags.FlagValues | None = None
                       ) -> list[str]:
  """Defines ``--config`` (an ml_collections config file, ``default_config``
  unless given) on ``flag_values`` (default: absl's FLAGS) and parses
  ``argv``; returns the remaining arguments.

  Raises:
    UsageError: for unknown flags or config keys, bad values, or a config
      file that does not load.
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  argv = list(argv)
  try:
    if "config" not in fv:
      config_flags.DEFINE_config_file(
          "config", str(default_config), help_text, flag_values=fv,
          sys_argv=argv, lock_config=True)
    rest = fv(argv)
    config = fv["config"].value
    if not isinstance(config, config_dict.ConfigDict):
      config.keys()  # an unloadable config file raises its reason here
      raise UsageError(f"The config file did not give a ConfigDict "
                       f"({type(config).__name__}).")
    return rest
  except UsageError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # ml_collections raises AttributeError/KeyError for unknown keys, absl
    # its own errors for bad values, OSError for an unloadable config file.
    message = None
    config_file = config_file_from_argv(argv, default_config)
    if not config_file.is_file():
      message = f"Config file {config_file} does not exist."
    elif isinstance(e, (AttributeError, KeyError)):
      message = unknown_override(argv, default_config)
    raise UsageError(message or one_line(e)) from None


def fail(program: str, message: Any) -> None:
  """Prints a one-line error and exits with status 2."""
  print(f"{program}: error: {one_line(message)}", file=sys.stderr)
  sys.exit(2)
