"""Overriding a rule's agent settings, and listing them.

A rule has ``hyper_params`` (its numbers, e.g.
``--config.hyper_params.entropy_cost=0.01``) and ``rule_kwargs`` (its factory's
other arguments, e.g. ``--config.rule_kwargs.clip_value=False``). ``prepare``
gives a config every setting of the rule with its default (an unknown key is
then a one-line error); ``merged`` applies overrides (pure); ``completed`` fills
a saved config's defaults; ``describe`` lists every rule's settings, their
meanings taken from the factories' ``Args:``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import inspect
import re
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import migrations
from disco.update_rules import registry

KEYS = ("hyper_params", "rule_kwargs")
# What the hyper-parameters the rules share mean (rule-specific ones are
# described by their rule's module).
HYPER_PARAM_MEANINGS = {
    "discount_factor": "discount gamma of the returns",
    "td_lambda": "lambda of the TD(lambda) / V-trace returns",
    "gae_lambda": "lambda of GAE",
    "entropy_cost": "weight of the policy-entropy bonus",
    "value_cost": "weight of the value loss",
    "pg_cost": "weight of the policy-gradient loss",
    "clip_epsilon": "PPO's ratio (and value) clip",
    "reward_scale": "factor on the rewards (Brax PPO's reward_scaling)",
    "dpo_alpha": "DPO drift's scale for positive advantages",
    "dpo_beta": "DPO drift's scale for negative advantages (rollback)",
    "target_update_tau": "Polyak step of the target network",
    "epsilon": "KL bound of the E-step (temperature dual)",
    "epsilon_policy": "KL bound of the policy update (alpha dual; discrete)",
    "epsilon_mean": (
        "continuous actions: KL bound of the policy mean's update (alpha_mean)"
    ),
    "epsilon_stddev": (
        "continuous actions: KL bound of the policy std's update (alpha_stddev)"
    ),
    "q_cost": "weight of the Q loss",
    "vf_coef": "weight of the value loss",
    "pi_cost": "weight of the policy loss towards the meta-network's target",
    "y_cost": "weight of the y-prediction loss",
    "z_cost": "weight of the z-prediction loss",
    "aux_policy_cost": "weight of the auxiliary policy-prediction loss",
    "agent_target_coeff": "weight of the y-prediction loss (LPG's kappa)",
    "prediction_entropy_cost": (
        "meta-regulariser: weight of minus the entropies of y and z"
    ),
    "target_mean_square_cost": (
        "meta-regulariser: weight of the squared means of the pi, y, z targets"
    ),
    "target_policy_kl_cost": (
        "meta-regulariser: weight of the KL from the target network's policy"
    ),
    "policy_entropy_coeff": (
        "meta-regulariser beta_0: weight of minus the policy's entropy"
    ),
    "target_entropy_coeff": (
        "meta-regulariser beta_1: weight of minus the entropy of y"
    ),
    "policy_l2_coeff": "meta-regulariser beta_2: weight of the mean square of pi_hat",
    "target_l2_coeff": (
        "meta-regulariser beta_3: weight of the mean squared norm of y_hat"
    ),
}


def as_dict(value: Any) -> dict[str, Any]:
  """A (possibly ``None``) mapping or ``ConfigDict`` as a new dict."""
  if isinstance(value, config_dict.ConfigDict):
    return value.to_dict()
  return agent_settings_lib.thawed(dict(value or {}))


def _merged(own: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
  """``own`` with ``given`` over it, dicts merged one level deep."""
  out = dict(own)
  for key, value in given.items():
    if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
      value = {**out[key], **value}
    out[key] = value
  return out


def _floats(hyper_params: dict[str, Any]) -> dict[str, Any]:
  """Numbers as floats (a flag may then give ``1`` or ``0.5``)."""
  return {
      k: float(v) if isinstance(v, (int, float)) else v
      for k, v in hyper_params.items()
  }


def completed(name: str, given: Any, key: str) -> dict[str, Any]:
  """The ``key`` settings (``hyper_params`` or ``rule_kwargs``) of rule
  ``name``: ``given`` over its defaults (hyper-parameters as floats).

  Raises:
    ValueError: an unknown rule.
  """
  defaults = getattr(registry.default_settings(name), key)
  value = _merged(as_dict(defaults), as_dict(given))
  return _floats(value) if key == "hyper_params" else value


def factory_parameters(make: Callable[..., Any]) -> list[str]:
  """The keyword arguments of a rule's factory other than ``hyper_params``
  (the valid ``rule_kwargs``)."""
  return [
      name
      for name, p in inspect.signature(make).parameters.items()
      if name != "hyper_params"
      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
  ]


def prepare(
    config: config_dict.ConfigDict,
    settings: agent_settings_lib.AgentSettings | None,
) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` every setting of
  the rule of ``settings`` with its default; the config's own values stay (an
  unknown key is reported later). Hyper-parameters become floats."""
  if settings is None:
    return
  with config.unlocked():
    for key in KEYS:
      if key not in config:
        continue
      value = _merged(as_dict(getattr(settings, key)), as_dict(config[key]))
      config[key] = _floats(value) if key == "hyper_params" else value


class SettingsError(ValueError):
  """An unknown or bad rule setting (one line)."""


def _check_numbers(hyper_params: Mapping[str, Any]) -> None:
  for key, value in hyper_params.items():
    if not checks.is_finite_number(value):
      raise SettingsError(
          f"config.hyper_params.{key} must be a finite number, got {value!r}."
      )


def merged(
    settings: agent_settings_lib.AgentSettings,
    label: str,
    hyper_params: Mapping[str, Any] | None = None,
    rule_kwargs: Mapping[str, Any] | None = None,
    network: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
    **optimizer: Any,
) -> agent_settings_lib.AgentSettings:
  """``settings`` with the overrides: ``hyper_params`` replacing the rule's own,
  ``rule_kwargs`` (one level of dicts deep), ``network`` and ``policy`` merged
  over theirs, optimiser settings (``agent_settings.OPTIMIZER_KEYS``) replacing
  theirs. Old spellings are upgraded with a warning (``migrations.upgraded``).
  Pure.

  Raises:
    SettingsError: a key the rule (``label``) does not have, naming the valid
      ones, or a hyper-parameter that is not a finite number.
    ValueError: an old dict of coefficients with a key it never had.
  """
  bad = sorted(set(optimizer) - set(agent_settings_lib.OPTIMIZER_KEYS))
  if bad:
    raise SettingsError(
        f"Unknown agent setting(s) {bad}; valid: "
        f"{', '.join(agent_settings_lib.OPTIMIZER_KEYS)}."
    )
  hyper_params, rule_kwargs = migrations.upgraded(
      settings.rule, as_dict(hyper_params), as_dict(rule_kwargs), "config"
  )
  own = dict(settings.hyper_params)
  unknown = sorted(set(hyper_params) - set(own))
  if unknown:
    raise SettingsError(
        f"Unknown hyper_params {unknown} for rule {label!r}: valid keys are "
        f"{', '.join(sorted(own)) or 'none'}."
    )
  _check_numbers(hyper_params)
  valid = factory_parameters(registry.get_entry(settings.rule).make)
  unknown = sorted(set(rule_kwargs) - set(valid))
  if unknown:
    raise SettingsError(
        f"Unknown rule_kwargs {unknown} for rule {label!r}: valid keys are "
        f"{', '.join(valid) or 'none'}."
    )
  return settings.replace(
      hyper_params={**own, **{k: float(v) for k, v in hyper_params.items()}},
      rule_kwargs=_merged(settings.rule_kwargs, rule_kwargs),
      network={**settings.network, **as_dict(network)},
      policy={**settings.policy, **as_dict(policy)},
      **optimizer,
  )


# ------------------------------------------------------------- listing ----


def _docstring_args(make: Callable[..., Any]) -> dict[str, str]:
  """``{argument: meaning}`` from the ``Args:`` section of the docstring of
  ``make`` (or its ``__init__``); ``a, b: text`` gives both names."""
  meanings: dict[str, str] = {}
  for doc in (inspect.getdoc(make), inspect.getdoc(make.__init__)):
    lines = (doc or "").splitlines()
    try:
      start = next(i for i, ln in enumerate(lines) if ln.strip() == "Args:")
    except StopIteration:
      continue
    names: list[str] = []
    indent = None
    for line in lines[start + 1 :]:
      if not line.strip() or not line.startswith(" "):
        break
      depth = len(line) - len(line.lstrip())
      indent = depth if indent is None else indent
      if depth <= indent:  # a new argument: "name: text" or "a, b: text"
        m = re.match(r"^\s*([\w, ]+):\s*(.*)$", line)
        names = []
        if m:
          names = [n.strip() for n in m.group(1).split(",") if n.strip()]
          for n in names:
            meanings.setdefault(n, m.group(2).strip())
      else:  # its text continues
        for n in names:
          meanings[n] = f"{meanings[n]} {line.strip()}"
    if meanings:
      break
  return {k: v.replace("``", "").rstrip(".") for k, v in meanings.items()}


def _text(value: Any) -> str:
  if isinstance(value, float):
    return f"{value:g}"
  if isinstance(value, str):
    return value
  return repr(value)


def rows(name: str) -> list[tuple[str, str, str]]:
  """``(setting, default, meaning)`` of every setting of rule ``name``.

  Raises:
    ValueError: an unknown rule.
  """
  entry = registry.get_entry(name)
  settings = registry.default_settings(name)
  out = []
  for key, value in sorted(settings.hyper_params.items()):
    out.append(
        (
            f"hyper_params.{key}",
            _text(value),
            HYPER_PARAM_MEANINGS.get(key, "a coefficient of the rule's loss"),
        )
    )
  meanings = _docstring_args(entry.make)
  kwargs = as_dict(settings.rule_kwargs)
  for key in factory_parameters(entry.make):
    meaning = meanings.get(key, "")
    if key not in kwargs:  # None by default: no flag can set it
      continue
    value = kwargs[key]
    if isinstance(value, dict):
      for sub, sub_value in sorted(value.items()):
        out.append((f"rule_kwargs.{key}.{sub}", _text(sub_value), meaning))
    else:
      out.append((f"rule_kwargs.{key}", _text(value), meaning))
  for key, meaning in agent_settings_lib.OPTIMIZER_KEYS.items():
    out.append((key, _text(getattr(settings, key)), meaning))
  return out


def describe(names: Iterable[str] | None = None) -> str:
  """A table (rule, setting, default, meaning) of the settings of the rules
  ``names`` (default: every registered rule).

  Raises:
    ValueError: an unknown rule.
  """
  names = list(registry.rule_names() if names is None else names)
  table = [("rule", "setting", "default", "meaning")]
  for name in names:
    table.extend((name, *row) for row in rows(name))
  widths = [max(len(r[i]) for r in table) for i in range(3)]
  lines = [
      "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True))
      + f"  {r[3]}"
      for r in table
  ]
  return "\n".join(ln.rstrip() for ln in lines) + (
      "\n\nSet them with --config.hyper_params.KEY=VALUE and "
      "--config.rule_kwargs.KEY=VALUE (disco-eval, disco-meta-train); the "
      "agent optimiser's with --config.KEY=VALUE (disco-eval) or "
      "--config.agent.KEY=VALUE (disco-meta-train)."
  )
