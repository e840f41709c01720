"""Rules by registry name or by file, built once and checked (``resolve_rule``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any

import jax

from disco import errors
from disco import run_folders
from disco import weights as weights_lib
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import base as rule_base
from disco.update_rules import migrations
from disco.update_rules import overrides as overrides_lib
from disco.update_rules import registry

AGENT_PARAMS_KIND = "agent_params"


@dataclasses.dataclass(frozen=True)
class ResolvedRule:
  """A rule ready to train with.

  Attributes:
    label: a short name for outputs (registry name or file stem).
    settings: agent settings (``settings.rule``: a registry name).
    rule: the rule built from ``settings``.
    meta_params: its checked meta-parameters (``{}`` if hand-designed).
    source: ``"none"``, ``"random"``, ``"pretrained"`` or ``"file"``.
  """

  label: str
  settings: agent_settings_lib.AgentSettings
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


def _build_rule(settings: agent_settings_lib.AgentSettings, where: str = ""):
  """``(rule, expected meta-parameter shapes)``; ``where`` prefixes the error."""
  try:
    rule = registry.make_rule(settings)
  except ValueError as e:
    raise errors.UsageError(f"{where}{errors.one_line(e)}") from None
  return rule, rule.meta_param_shapes()


def _with_overrides(
    settings: agent_settings_lib.AgentSettings,
    label: str,
    overrides: Mapping[str, Any] | None,
) -> agent_settings_lib.AgentSettings:
  """``settings`` with ``overrides`` (``overrides.merged``'s keywords)."""
  if not overrides:
    return settings
  try:
    return overrides_lib.merged(settings, label, **overrides)
  except ValueError as e:
    raise errors.UsageError(errors.one_line(e)) from None


def _misfit(
    base: agent_settings_lib.AgentSettings,
    expected: Any,
    overrides: Mapping[str, Any] | None,
    label: str,
    source: str,
) -> str | None:
  """Why given meta-parameters may not fit, if that is why: ``rule_kwargs``
  overrides under which the meta-parameters' shapes (``expected``) differ from
  those of the settings without them (``base``). None otherwise."""
  rule_kwargs = (overrides or {}).get("rule_kwargs")
  if not rule_kwargs:
    return None
  _, unchanged = _build_rule(base)
  if not weights_lib.params_diff(unchanged, expected):
    return None
  return (
      f"config.rule_kwargs {run_folders.to_jsonable(rule_kwargs)} change the "
      f"shapes of the meta-parameters of {label!r}, so its {source} "
      "meta-parameters no longer fit: keep its network settings."
  )


def _loaded(
    load: Callable[[], Any], misfit: Callable[[], str | None], what: str
) -> Any:
  """``load()``'s meta-parameters; a file that does not fit is one line:
  ``misfit()`` if it says why, else ``what`` and the reason.

  Raises:
    UsageError: non-finite or mismatching meta-parameters.
  """
  try:
    return load()
  except weights_lib.NonFiniteError as e:
    raise errors.UsageError(errors.one_line(e)) from None
  except weights_lib.WeightsError as e:
    raise errors.UsageError(
        misfit() or f"{what}: {errors.one_line(e)}"
    ) from None


def _resolve_named(
    name: str, weights: str | None, overrides: Mapping[str, Any] | None
) -> ResolvedRule:
  entry = registry.get_entry(name)
  base = registry.default_settings(name)
  settings = _with_overrides(base, name, overrides)
  rule, expected = _build_rule(settings)
  has_meta_params = bool(jax.tree.leaves(expected))
  if entry.pretrained is not None:
    try:
      meta_params = entry.pretrained(weights, expected)
    except weights_lib.WeightsError as e:
      raise errors.UsageError(
          _misfit(base, expected, overrides, name, "pretrained")
          or f"Cannot load {name}: {errors.one_line(e)}"
      ) from None
    source = "pretrained"
  elif weights is not None:
    if not has_meta_params:
      raise errors.UsageError(
          f"Rule {name!r} has no meta-parameters, so a weights file "
          f"({weights}) makes no sense for it: drop the weights setting."
      )
    meta_params = _loaded(
        lambda: weights_lib.load_meta_params(weights, expected),
        lambda: _misfit(base, expected, overrides, name, "file"),
        f"Weights {weights} do not fit rule {name!r}",
    )
    source = "file"
  else:
    meta_params = rule.random_meta_params()
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
) -> agent_settings_lib.AgentSettings:
  """The agent settings a rule file's metadata describes (its ``settings`` and
  ``rule_kwargs`` over the rule's defaults, old spellings upgraded)."""
  if metadata.get("kind") == AGENT_PARAMS_KIND:
    raise errors.UsageError(
        f"{path} holds trained agent parameters, not an update "
        "rule's meta-parameters."
    )
  name = metadata.get("rule")
  if not isinstance(name, str):
    raise errors.UsageError(
        f"{path} does not say which rule it belongs to (no 'rule' in its "
        "metadata): save it with disco.weights.save_meta_params(path, params, "
        "metadata={'rule': ...})."
    )
  if name not in registry.rule_names():
    raise errors.UsageError(
        f"{path} holds meta-parameters of rule {name!r}, which is "
        f"not registered: use {_valid_rules_text()} (or import "
        "the module that registers it with config.imports)."
    )
  given = metadata.get("settings") or {}
  rule_kwargs = metadata.get("rule_kwargs")
  try:
    if not isinstance(given, dict):
      raise TypeError("'settings' must be a JSON object")
    if rule_kwargs is not None and not isinstance(rule_kwargs, dict):
      raise TypeError("'rule_kwargs' must be a JSON object")
    saved = registry.default_settings(name).to_dict()
    for key, value in given.items():
      if isinstance(value, dict) and isinstance(saved.get(key), dict):
        value = {**saved[key], **value}
      saved[key] = value
    saved["rule_kwargs"] = {**saved["rule_kwargs"], **(rule_kwargs or {})}
    if saved.get("rule") != name:
      raise errors.UsageError(
          f"The metadata of {path} names rule {name!r} but its "
          f"settings say {saved.get('rule')!r}."
      )
    saved = migrations.upgraded_settings(saved, f"rule file {path}")
    return agent_settings_lib.AgentSettings.from_dict(saved)
  except (TypeError, AttributeError, KeyError, ValueError) as e:
    raise errors.UsageError(
        f"The settings in the metadata of {path} do not fit rule {name!r}: "
        f"{errors.one_line(e)}"
    ) from None


def _resolve_file(
    path: Path, overrides: Mapping[str, Any] | None
) -> ResolvedRule:
  if not path.is_file():
    raise errors.UsageError(
        f"Rule file {path} does not exist: check the path (or "
        f"use {_valid_rules_text()})."
    )
  # Read once: the metadata names the rule, whose shapes are checked
  # against the arrays' headers before their data is read.
  try:
    npz = weights_lib.NpzFile(path)
  except weights_lib.WeightsError as e:
    raise errors.UsageError(
        f"Cannot read rule file {path}: {errors.one_line(e)}"
    ) from None
  with npz:
    try:
      metadata = npz.metadata()
    except weights_lib.WeightsError as e:
      raise errors.UsageError(
          f"Cannot read rule file {path}: {errors.one_line(e)}"
      ) from None
    label = path.stem or "rule"
    base = _settings_from_metadata(path, metadata)
    settings = _with_overrides(base, label, overrides)
    rule, expected = _build_rule(
        settings, f"The settings in the metadata of rule file {path}: "
    )
    meta_params = _loaded(
        lambda: npz.params(expected),
        lambda: _misfit(base, expected, overrides, label, "file"),
        f"Rule file {path} does not fit rule {settings.rule!r}",
    )
  return ResolvedRule(
      label=label,
      settings=settings,
      rule=rule,
      meta_params=meta_params,
      source="file",
  )


def resolve_rule(
    name_or_path: str,
    weights: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ResolvedRule:
  """A rule by registry name or file, its agent settings merged with
  ``overrides``, built once.

  Args:
    name_or_path: a registered rule (default settings; pretrained
      meta-parameters such as ``disco103``'s, those in ``weights``, or random
      ones), or a ``.npz`` of ``disco.weights.save_meta_params`` whose metadata
      names the ``rule`` (and optionally ``rule_kwargs`` and ``settings``).
    weights: a pretrained entry's file (default: found or downloaded), or a file
      of a rule's meta-parameters; not with a path.
    overrides: ``overrides.merged``'s keywords; old spellings upgraded.

  Raises:
    UsageError: an unknown rule, a missing or mismatching file, agent parameters
      given as a rule, a setting the rule lacks, or ``rule_kwargs`` its
      meta-parameters do not fit.
  """
  name_or_path = str(name_or_path).strip()
  if weights is not None:
    weights = str(weights).strip() or None
  if not name_or_path:
    raise errors.UsageError(f"No rule given: use {_valid_rules_text()}.")
  if name_or_path in registry.rule_names():
    return _resolve_named(name_or_path, weights, overrides)
  if not is_rule_path(name_or_path):
    close = difflib.get_close_matches(name_or_path, registry.rule_names(), 3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise errors.UsageError(
        f"Unknown rule {name_or_path!r}.{hint} Use " f"{_valid_rules_text()}."
    )
  if weights is not None:
    raise errors.UsageError(
        f"The rule is already a file ({name_or_path}); the weights setting "
        f"({weights}) only applies to a rule name."
    )
  return _resolve_file(Path(name_or_path).expanduser(), overrides)
