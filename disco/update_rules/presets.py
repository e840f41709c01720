"""Presets: settings of a registered rule for a family of environments, read
from the JSON files in ``presets/`` (one per rule, ``<rule>.json``) and from
``register_preset``.

A preset gives values for the keys a ``disco-eval`` config leaves unset (the
loop and its normalisation, the optimiser, ``hyper_params``, ``rule_kwargs``,
``network``, ``policy``); whatever the user sets wins. ``find(rule, env, choice)`` picks
one: ``choice="auto"`` the first preset of ``rule`` whose ``envs`` patterns
(``fnmatch``) match ``env``, ``"none"`` none, else the preset of that name.

A file is a JSON object ``{"presets": [entry, ...]}``; an entry has ``name``,
``envs`` (patterns), ``settings`` (config keys, as on the command line),
``source`` (where the values come from) and ``budget`` (the env steps per seed
they were chosen or measured at, or null). ``{"same_as": "RULE"}`` gives a
rule RULE's presets (a self-tuning rule its base rule's).
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import fnmatch
import functools
import json
from pathlib import Path
from typing import Any

from disco import errors
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import overrides as overrides_lib
from disco.update_rules import registry

PRESET_DIR = Path(__file__).parent / "presets"
# What ``config.preset`` may say besides a preset's name.
AUTO, NONE = "auto", "none"
# The dict-valued config keys a preset may set (besides registry.LOOP_KEYS,
# NORMALIZATION_KEYS and the optimiser keys).
DICT_KEYS = ("hyper_params", "rule_kwargs", "network", "policy")
# Of those, the ones a preset gives whole or not at all (``under``).
WHOLE_KEYS = ("network", "policy")
# The training loop's normalisation options (disco.training.loop.LoopConfig).
NORMALIZATION_KEYS = (
    "normalize_observations",
    "normalize_rewards",
    "normalize_rewards_discount",
    "reward_clip",
)
ENTRY_KEYS = ("name", "envs", "settings", "source", "budget")


class PresetError(errors.UsageError):
  """A malformed preset file or entry, or an unknown preset (one line)."""


@dataclasses.dataclass(frozen=True)
class Preset:
  """Settings of ``rule`` for the environments ``envs`` matches.

  Attributes:
    name: unique among ``rule``'s presets, e.g. ``"pendulum"``.
    rule: the registered rule it is for.
    envs: ``fnmatch`` patterns of environment names, e.g. ``"brax/*"``.
    settings: config keys (``registry.LOOP_KEYS``, ``NORMALIZATION_KEYS``,
      ``agent_settings.OPTIMIZER_KEYS``, ``DICT_KEYS``) and values,
      read-only.
    source: where the values come from.
    budget: env steps per seed they were chosen or measured at (None: not
      stated).
  """

  name: str
  rule: str
  envs: tuple[str, ...]
  settings: Mapping[str, Any]
  source: str
  budget: int | None = None

  def __post_init__(self):
    object.__setattr__(self, "envs", tuple(self.envs))
    object.__setattr__(
        self, "settings", agent_settings_lib.frozen(self.settings)
    )

  def matches(self, env: str) -> bool:
    return any(fnmatch.fnmatchcase(env, p) for p in self.envs)

  @property
  def loop(self) -> dict[str, Any]:
    """Its loop settings (``registry.LOOP_KEYS``, ``NORMALIZATION_KEYS``)."""
    return {k: v for k, v in self.settings.items() if k in _LOOP_SETTINGS}

  @property
  def agent(self) -> dict[str, Any]:
    """Its agent settings as ``overrides.merged``'s keywords."""
    return {
        k: agent_settings_lib.thawed(v)
        for k, v in self.settings.items()
        if k not in _LOOP_SETTINGS
    }

  def record(self) -> dict[str, Any]:
    """What ``config.json`` records of it."""
    return dict(
        name=self.name,
        rule=self.rule,
        envs=list(self.envs),
        settings=agent_settings_lib.thawed(dict(self.settings)),
        source=self.source,
        budget=self.budget,
    )


_REGISTERED: dict[str, list[Preset]] = {}
_LOOP_SETTINGS = (*registry.LOOP_KEYS, *NORMALIZATION_KEYS)


def _check_settings(settings: Any, where: str) -> dict[str, Any]:
  if not isinstance(settings, Mapping):
    raise PresetError(f"{where}: 'settings' must be a JSON object.")
  valid = (*_LOOP_SETTINGS, *agent_settings_lib.OPTIMIZER_KEYS, *DICT_KEYS)
  unknown = sorted(set(settings) - set(valid))
  if unknown:
    raise PresetError(
        f"{where}: unknown setting(s) {unknown}; a preset may set "
        f"{', '.join(valid)}."
    )
  for key in DICT_KEYS:
    if key in settings and not isinstance(settings[key], Mapping):
      raise PresetError(f"{where}: '{key}' must be a JSON object.")
  for key in registry.LOOP_KEYS:
    value = settings.get(key)
    if key in settings and (
        isinstance(value, bool) or not isinstance(value, int)
    ):
      raise PresetError(f"{where}: '{key}' must be an integer, got {value!r}.")
  for key in NORMALIZATION_KEYS[:2]:
    if key in settings and not isinstance(settings[key], bool):
      raise PresetError(f"{where}: '{key}' must be true or false.")
  return dict(settings)


def parse(rule: str, data: Any, where: str) -> tuple[Preset, ...]:
  """The presets of ``rule`` in a file's JSON ``data``; ``where`` names the
  file in errors.

  Raises:
    PresetError: a malformed file or entry, naming it and what to fix.
  """
  if not isinstance(data, Mapping) or not isinstance(data.get("presets"), list):
    raise PresetError(
        f"{where}: expected a JSON object with a 'presets' list of entries."
    )
  out, names = [], set()
  for i, entry in enumerate(data["presets"]):
    at = f"{where}, entry {i}"
    if not isinstance(entry, Mapping):
      raise PresetError(f"{at}: each entry must be a JSON object.")
    missing = [k for k in ENTRY_KEYS if k not in entry]
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if missing or unknown:
      raise PresetError(
          f"{at}: {'missing ' + str(missing) if missing else ''}"
          f"{' and ' if missing and unknown else ''}"
          f"{'unknown ' + str(unknown) if unknown else ''} key(s); an entry "
          f"has exactly {', '.join(ENTRY_KEYS)}."
      )
    name, envs = entry["name"], entry["envs"]
    if not isinstance(name, str) or not name or name in (AUTO, NONE):
      raise PresetError(
          f"{at}: 'name' must be a non-empty string other than "
          f"{AUTO!r} and {NONE!r}."
      )
    if name in names:
      raise PresetError(f"{at}: preset name {name!r} appears twice.")
    names.add(name)
    if (
        not isinstance(envs, list)
        or not envs
        or not all(isinstance(p, str) and p for p in envs)
    ):
      raise PresetError(f"{at}: 'envs' must be a non-empty list of patterns.")
    budget = entry["budget"]
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    ):
      raise PresetError(f"{at}: 'budget' must be a positive integer or null.")
    if not isinstance(entry["source"], str) or not entry["source"].strip():
      raise PresetError(f"{at}: 'source' must say where the values come from.")
    out.append(
        Preset(
            name=name,
            rule=rule,
            envs=tuple(envs),
            settings=_check_settings(entry["settings"], at),
            source=entry["source"],
            budget=budget,
        )
    )
  return tuple(out)


def load_file(rule: str, path: Path) -> tuple[Preset, ...]:
  """The presets of ``rule`` in the JSON file ``path``.

  Raises:
    PresetError: an unreadable or malformed file.
  """
  try:
    data = json.loads(Path(path).read_text())
  except (OSError, UnicodeDecodeError, ValueError) as e:
    raise PresetError(
        f"Cannot read preset file {path}: {errors.one_line(e)} (it must be "
        "JSON: fix or remove it)."
    ) from None
  if isinstance(data, Mapping) and set(data) == {"same_as"}:
    other = data["same_as"]
    if other == rule or not (PRESET_DIR / f"{other}.json").is_file():
      raise PresetError(
          f"Preset file {path}: 'same_as' must name another rule with a "
          f"preset file, got {other!r}."
      )
    return tuple(dataclasses.replace(p, rule=rule) for p in _packaged(other))
  return parse(rule, data, f"Preset file {path}")


@functools.cache
def _packaged(rule: str) -> tuple[Preset, ...]:
  path = PRESET_DIR / f"{rule}.json"
  return load_file(rule, path) if path.is_file() else ()


def presets(rule: str) -> tuple[Preset, ...]:
  """``rule``'s presets in the order ``find`` tries them: registered ones
  first, then the packaged file's."""
  return (*_REGISTERED.get(rule, ()), *_packaged(rule))


def register_preset(preset: Preset) -> None:
  """Adds ``preset`` ahead of the packaged ones of its rule.

  Raises:
    ValueError: an unknown rule, or a name its rule's presets already have.
  """
  if preset.rule not in registry.rule_names():
    raise ValueError(
        f"Preset {preset.name!r} is for unknown rule {preset.rule!r}."
    )
  _check_settings(preset.settings, f"Preset {preset.name!r}")
  if preset.name in {p.name for p in presets(preset.rule)}:
    raise ValueError(
        f"Rule {preset.rule!r} already has a preset named {preset.name!r}."
    )
  _REGISTERED.setdefault(preset.rule, []).insert(0, preset)


def unregister_preset(rule: str, name: str) -> None:
  """Removes a preset ``register_preset`` added (others: nothing)."""
  _REGISTERED[rule] = [p for p in _REGISTERED.get(rule, []) if p.name != name]


def find(rule: str, env: str, choice: str = AUTO) -> Preset | None:
  """The preset ``choice`` selects for ``rule`` on ``env`` (None: none
  applies; rules that are not registered names, such as rule files, have
  none).

  Raises:
    PresetError: ``choice`` names no preset of ``rule``, or one whose
      ``envs`` do not match ``env``.
  """
  if choice == NONE:
    return None
  known = presets(rule) if rule in registry.rule_names() else ()
  if choice == AUTO:
    return checked(next((p for p in known if p.matches(env)), None))
  for preset in known:
    if preset.name == choice:
      if not preset.matches(env):
        raise PresetError(
            f"Preset {choice!r} of rule {rule!r} is for {list(preset.envs)}, "
            f"not {env!r}: use preset=auto or preset=none."
        )
      return checked(preset)
  names = ", ".join(p.name for p in known) or "none"
  raise PresetError(
      f"Unknown preset {choice!r} for rule {rule!r} (its presets: {names}); "
      f"use one of those, {AUTO!r} or {NONE!r}."
  )


def under(
    preset: Preset | None, overrides: Mapping[str, Any]
) -> dict[str, Any]:
  """``overrides`` (``overrides.merged``'s keywords) with ``preset``'s agent
  settings beneath them: a key the overrides give wins. The network and the
  policy are each one setting (their keys depend on each other, e.g. an
  observation embedding and a convolutional torso): the preset's apply only
  where the overrides set none of their keys."""
  out = dict(overrides)
  if preset is None:
    return out
  for key, value in preset.agent.items():
    if key in WHOLE_KEYS:
      if not overrides.get(key):
        out[key] = value
    elif key in DICT_KEYS:
      out[key] = {**value, **dict(overrides.get(key) or {})}
    elif key not in overrides:
      out[key] = value
  return out


def checked(preset: Preset | None) -> Preset | None:
  """``preset``, its agent settings checked against its rule's.

  Raises:
    PresetError: a setting its rule lacks or a value out of range.
  """
  if preset is not None:
    try:
      overrides_lib.merged(
          registry.default_settings(preset.rule), preset.rule, **preset.agent
      ).check()
    except ValueError as e:
      raise PresetError(
          f"Preset {preset.name!r} of rule {preset.rule!r}: "
          f"{errors.one_line(e)}"
      ) from None
  return preset


def check_all() -> int:
  """Checks every preset of every registered rule (``checked``); returns how
  many there are.

  Raises:
    PresetError: the first bad file or preset.
  """
  return sum(
      checked(p) is not None
      for rule in registry.rule_names()
      for p in presets(rule)
  )
