"""Pieces shared by the launchers: usage errors and rule resolution."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
from ml_collections import config_dict

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
