"""Settings written by earlier versions, read as today's.

The one place that knows old spellings: a rule file, a run folder's
``config.json`` or a config giving a setting under an old key is upgraded where
it is read, with an ``OldSettingWarning`` naming both keys; everything after
sees today's keys.

Deprecation table (``MOVED`` and the meta-training keys):

| since | rules | old key | new key |
|---|---|---|---|
| 2026-11-27 | policy_gradient | ``rule_kwargs.entropy_cost``, ``.pg_cost`` | ``hyper_params.entropy_cost``, ``.pg_cost`` |
| 2026-11-27 | disco, disco103 | ``rule_kwargs.meta_regularizer_costs.K`` | ``hyper_params.K_cost`` |
| 2026-11-27 | lpg, ta_lpg | ``rule_kwargs.meta_regularizer_costs.K`` | ``hyper_params.K`` |
| 2026-11-27 | (meta-training) | ``debug`` | (removed) |
| 2026-12-06 | (meta-training) | ``entropy_cost`` | ``meta_entropy_cost`` |

Evaluation keys added since (``ADDED_EVAL_KEYS``): an evaluation's
``config.json`` written before them ran with the value given here.

| since | key | value an older run had |
|---|---|---|
| 2026-12-06 | ``normalize_observations``, ``normalize_rewards`` | ``False`` |
| 2026-12-06 | ``normalize_rewards_discount`` | ``0.99`` (unused while off) |
| 2026-12-06 | ``reward_clip`` | ``0.0`` (no clip) |
| 2026-12-07 | ``anneal_learning_rate`` | ``None`` (the rule's setting) |

Defaults whose meaning changed (``upgraded_settings`` with the version that
wrote the settings):

| since | rules | key | what an older run had |
|---|---|---|---|
| 0.3.0 | stac, self_tuning_ppo | ``rule_kwargs.tuned="auto"`` | the same list without ``step_size`` |
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from typing import Any
import warnings

from disco.update_rules import disco
from disco.update_rules import lpg
from disco.update_rules import policy_gradient
from disco.update_rules import registry
from disco.update_rules import self_tuning


class OldSettingWarning(UserWarning):
  """A setting was read under the key an earlier version wrote it with."""


@dataclasses.dataclass(frozen=True)
class Moved:
  """A rule setting that moved from ``old`` (``rule_kwargs.NAME[.KEY]``) to
  ``new`` (``hyper_params.NAME``), for rules built by ``factory`` (or a
  subclass)."""

  since: str
  factory: type
  old: str
  new: str


MOVED = (
    *(
        Moved(
            "2026-11-27",
            policy_gradient.PolicyGradient,
            f"rule_kwargs.{k}",
            f"hyper_params.{k}",
        )
        for k in ("entropy_cost", "pg_cost")
    ),
    *(
        Moved(
            "2026-11-27",
            disco.Disco,
            f"rule_kwargs.meta_regularizer_costs.{k.removesuffix('_cost')}",
            f"hyper_params.{k}",
        )
        for k in disco.META_REGULARIZER_COSTS
    ),
    *(
        Moved(
            "2026-11-27",
            lpg.LPG,
            f"rule_kwargs.meta_regularizer_costs.{k}",
            f"hyper_params.{k}",
        )
        for k in lpg.META_REGULARIZER_COSTS
    ),
)
# Top-level keys of a meta-training config that were removed, and renamed
# (old: (new, since)).
REMOVED_META_TRAIN_KEYS = ("debug",)
RENAMED_META_TRAIN_KEYS = {"entropy_cost": ("meta_entropy_cost", "2026-12-06")}
# The last version whose ``tuned="auto"`` left the step size out.
AUTO_TUNED_WITHOUT_STEP_SIZE = (0, 2, 0)
ADDED_EVAL_KEYS = {
    "normalize_observations": False,
    "normalize_rewards": False,
    "normalize_rewards_discount": 0.99,
    "reward_clip": 0.0,
    "anneal_learning_rate": None,
}


def moved(rule: str) -> tuple[Moved, ...]:
  """The settings of registered rule ``rule`` that moved (none for an
  unknown rule)."""
  try:
    make = registry.get_entry(rule).make
  except ValueError:
    return ()
  return tuple(
      m for m in MOVED if isinstance(make, type) and issubclass(make, m.factory)
  )


def new_key(rule: str, key: str) -> str | None:
  """Today's key(s) of ``key`` (e.g. ``rule_kwargs.entropy_cost``) of rule
  ``rule``, comma-separated; None if it did not move."""
  found = [
      m.new for m in moved(rule) if key == m.old or m.old.startswith(key + ".")
  ]
  return ", ".join(found) or None


def upgraded(
    rule: str,
    hyper_params: Mapping[str, Any] | None,
    rule_kwargs: Mapping[str, Any] | None,
    where: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
  """``(hyper_params, rule_kwargs)`` of ``rule`` (new dicts) with every old key
  moved to its new one (its value wins), warning once per old key; ``where``
  names the source (e.g. ``"rule file x.npz"``).

  Raises:
    ValueError: an old dict of coefficients with a key it never had.
  """
  hyper_params = dict(hyper_params or {})
  rule_kwargs = {
      k: dict(v) if isinstance(v, Mapping) else v
      for k, v in (rule_kwargs or {}).items()
  }
  for m in moved(rule):
    path = m.old.split(".")[1:]
    holder, name = rule_kwargs, path[-1]
    if len(path) == 2:
      holder = rule_kwargs.get(path[0])
      if not isinstance(holder, dict):
        continue
    if name not in holder:
      continue
    hyper_params[m.new.split(".", 1)[1]] = holder.pop(name)
    warnings.warn(
        f"{where}: {m.old} is read as {m.new} (moved on {m.since}); write "
        f"{m.new} instead.",
        OldSettingWarning,
        stacklevel=2,
    )
  for old in {
      m.old.split(".")[1] for m in moved(rule) if m.old.count(".") == 2
  }:
    left = rule_kwargs.get(old)
    if isinstance(left, dict) and left:
      raise ValueError(
          f"Unknown rule_kwargs.{old} {sorted(left)} in {where}: its keys "
          "were "
          + ", ".join(
              m.old.rsplit(".", 1)[1]
              for m in moved(rule)
              if m.old.startswith(f"rule_kwargs.{old}.")
          )
          + "."
      )
    if isinstance(left, dict):
      del rule_kwargs[old]
  return hyper_params, rule_kwargs


def upgraded_settings(
    saved: Mapping[str, Any], where: str, version: str | None = None
) -> dict[str, Any]:
  """Agent settings in JSON form (``AgentSettings.to_dict``) with old keys moved
  (``upgraded``), newer hyper-parameters at their defaults and, where
  ``version`` (the disco that wrote them; None: today's) is older, a self-tuning
  rule's ``tuned="auto"`` as the list it then meant; an unknown rule's come
  back as saved.

  Raises:
    ValueError: see ``upgraded``.
  """
  out = dict(saved)
  rule = out.get("rule")
  if not isinstance(rule, str) or rule not in registry.rule_names():
    return out
  hyper_params, out["rule_kwargs"] = upgraded(
      rule, out.get("hyper_params"), out.get("rule_kwargs"), where
  )
  defaults = registry.default_settings(rule).hyper_params
  out["hyper_params"] = {**defaults, **hyper_params}
  make = registry.get_entry(rule).make
  if (
      isinstance(make, type)
      and issubclass(make, self_tuning.SelfTuning)
      and out["rule_kwargs"].get("tuned") == self_tuning.AUTO
      and _release(version) <= AUTO_TUNED_WITHOUT_STEP_SIZE
  ):
    tuned = make.auto_tuned(
        out["hyper_params"], out["rule_kwargs"].get("bounds")
    )
    out["rule_kwargs"]["tuned"] = [
        n for n in tuned if n != self_tuning.STEP_SIZE
    ]
  return out


def _release(version: str | None) -> tuple[int, ...]:
  """``"0.2.0"`` as ``(0, 2, 0)`` (a pre-release counts as its release); None
  or unreadable: today's, newer than every entry of the tables."""
  try:
    parts = tuple(int(p) for p in str(version).split(".")[:3])
  except ValueError:
    parts = ()
  return parts if len(parts) == 3 else (10**9,)


def upgraded_meta_train_config(
    saved: Mapping[str, Any], where: str
) -> dict[str, Any]:
  """A saved (or given) meta-training config in today's form: removed keys
  dropped, renamed ones moved, the rule's settings upgraded.

  Raises:
    ValueError: see ``upgraded``.
  """
  out = {k: v for k, v in saved.items() if k not in REMOVED_META_TRAIN_KEYS}
  for old, (new, since) in RENAMED_META_TRAIN_KEYS.items():
    if old in out:
      out[new] = out.pop(old)
      warnings.warn(
          f"{where}: {old} is read as {new} (renamed on {since}); write "
          f"{new} instead.",
          OldSettingWarning,
          stacklevel=2,
      )
  rule = out.get("rule")
  if isinstance(rule, str):
    out["hyper_params"], out["rule_kwargs"] = upgraded(
        rule, out.get("hyper_params"), out.get("rule_kwargs"), where
    )
  return out


def upgraded_eval_config(saved: Mapping[str, Any]) -> dict[str, Any]:
  """An evaluation's saved resolved config (``config.json``'s ``config``) with
  the keys added since it was written, at the values it ran with."""
  return {**ADDED_EVAL_KEYS, **saved}
