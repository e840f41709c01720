"""A rule's settings from the launchers' flags, and their listing.

Every registered rule has two groups of settings (``registry``):

* ``hyper_params``: every coefficient of its losses (and of its
  meta-regularisers), its discounts and other numbers, e.g.
  ``--config.hyper_params.entropy_cost=0.01``;
* ``rule_kwargs``: the other keyword arguments of its factory, its
  structural choices (switches, sizes, numbers of samples, nested settings
  such as LPG's ``net``), e.g. ``--config.rule_kwargs.clip_value=False``.

``disco-eval``, ``disco-meta-train`` and ``disco-compare`` take both, the
same way: ``prepare`` gives the config every setting of the rule the command
line names with its default (so the flags may set any of them and an unknown
key is a one-line error listing the valid ones), ``apply`` puts them into the
rule's agent settings, and ``completed`` fills in a saved config's defaults
for comparing it with the current one. ``describe`` lists every rule's
settings with their defaults and meanings (``disco-eval --list_rules``,
``--describe_rule=NAME``), read from the registry and the rules' factories.

Old spellings: a keyword argument that became a hyper-parameter
(``UpdateRule.moved_rule_kwargs``, e.g. policy gradient's
``rule_kwargs.entropy_cost``, or Disco's and LPG's
``rule_kwargs.meta_regularizer_costs``) is still read from configs, run
folders and rule files, as its hyper-parameter, with the same results;
``new_spelling`` names the hyper-parameter of an old key and
``upgraded_settings`` brings saved agent settings to today's form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import inspect
import re
from typing import Any

from ml_collections import config_dict

from disco.update_rules import registry

KEYS = ("hyper_params", "rule_kwargs")
# The agent optimiser's settings a rule's entry gives (disco-eval:
# --config.KEY, disco-meta-train: --config.agent.KEY), with their meanings.
AGENT_KEYS = {
    "learning_rate": "the agents' Adam learning rate",
    "max_abs_update": "elementwise clip of Adam's update (None: off)",
    "max_grad_norm": "clip of the gradients' global norm (None: off)",
    "adam_eps": "Adam's epsilon",
    "anneal_learning_rate": "anneal the learning rate linearly to 0",
    "loss_mask": "transitions the losses average over: valid or published",
}
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


_as_dict = registry.as_dict


def _merged(own: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
  """``own`` with ``given`` over it, dicts merged one level deep."""
  out = dict(own)
  for key, value in given.items():
    if isinstance(value, dict) and isinstance(out.get(key), dict):
      value = {**out[key], **value}
    out[key] = value
  return out


def _floats(hyper_params: dict[str, Any]) -> dict[str, Any]:
  """Numbers as floats (a flag may then give ``1`` or ``0.5``)."""
  return {
      k: float(v) if isinstance(v, (int, float)) else v
      for k, v in hyper_params.items()
  }


def old_spellings(make: Callable[..., Any]) -> dict[str, str]:
  """``{hyper-parameter: its old spelling}`` of factory ``make``, e.g.
  ``{'entropy_cost': 'rule_kwargs.entropy_cost'}`` for policy gradient
  (``UpdateRule.moved_rule_kwargs``)."""
  out = {}
  for old, new in getattr(make, "moved_rule_kwargs", {}).items():
    if isinstance(new, Mapping):
      out.update({v: f"rule_kwargs.{old}.{k}" for k, v in new.items()})
    else:
      out[new] = f"rule_kwargs.{old}"
  return out


def new_spelling(name: str, key: str) -> str | None:
  """What the setting ``key`` of rule ``name`` is now, for an error message
  about an unknown key: ``hyper_params.entropy_cost`` for policy gradient's
  ``rule_kwargs.entropy_cost``; the hyper-parameters, comma-separated, of an
  old dict of coefficients (``rule_kwargs.meta_regularizer_costs``); else
  ``None`` (not an old spelling, or an unknown rule)."""
  try:
    make = registry.get_entry(name).make
  except ValueError:
    return None
  found = [
      f"hyper_params.{new}"
      for new, old in old_spellings(make).items()
      if key == old or old.startswith(f"{key}.")
  ]
  return ", ".join(found) or None


def completed(name: str, given: Any, key: str) -> dict[str, Any]:
  """The ``key`` settings (``hyper_params`` or ``rule_kwargs``) of rule
  ``name`` with those ``given`` over its defaults (hyper-parameters as
  floats): what a config's overrides amount to, however many of the
  defaults it spells out. (Old spellings in ``rule_kwargs`` stay as given:
  a config that repeats them is the same config.)

  Raises:
    ValueError: an unknown rule.
  """
  value = _merged(
      _as_dict(registry.default_settings(name)[key]), _as_dict(given)
  )
  return _floats(value) if key == "hyper_params" else value


def upgraded_settings(saved: Mapping[str, Any]) -> dict[str, Any]:
  """Agent settings as saved by an earlier version (a run folder's
  ``rule_settings``) in today's form, to compare them with today's: old
  spellings moved to ``hyper_params`` (``registry.moved_to_hyper_params``)
  and hyper-parameters added since at their defaults. Settings of an unknown
  rule, or that do not fit it, come back as saved."""
  out = _as_dict(saved)
  try:
    defaults = registry.default_settings(str(out.get("rule")))
    hyper_params, rule_kwargs = registry.moved_to_hyper_params(
        registry.get_entry(defaults.rule).make,
        out.get("hyper_params"),
        out.get("rule_kwargs"),
    )
  except (ValueError, TypeError):
    return out
  out["hyper_params"] = {**_as_dict(defaults.hyper_params), **hyper_params}
  out["rule_kwargs"] = rule_kwargs
  return out


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
    config: config_dict.ConfigDict, settings: config_dict.ConfigDict | None
) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` every setting
  of the rule whose agent ``settings`` are given, with its default; values
  the config already has stay (so a key the rule lacks is reported later).
  Hyper-parameters become floats (a flag may then give ``1`` or ``0.5``)."""
  if settings is None:
    return
  with config.unlocked():
    for key in KEYS:
      if key not in config:
        continue
      value = _merged(_as_dict(settings[key]), _as_dict(config[key]))
      config[key] = _floats(value) if key == "hyper_params" else value


class SettingsError(ValueError):
  """An unknown or bad rule setting (one line)."""


def _given(
    make: Callable[..., Any],
    hyper_params: Any,
    rule_kwargs: Any,
    own: dict[str, Any],
    label: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
  """The ``hyper_params`` and ``rule_kwargs`` given, old spellings moved to
  ``hyper_params``: they replace its value where that is the rule's own
  (``own``; filled in by ``prepare``), and a different value there too is
  an error naming both."""
  hyper_params = _as_dict(hyper_params)
  try:
    moved, rule_kwargs = registry.moved_to_hyper_params(make, {}, rule_kwargs)
  except ValueError as e:
    raise SettingsError(f"{e} (rule {label!r})") from None
  old = old_spellings(make)
  for key, value in moved.items():
    if hyper_params.get(key, value) not in (value, own.get(key)):
      raise SettingsError(
          f"config.{old[key]} (the old spelling of "
          f"config.hyper_params.{key}) is {value!r} but "
          f"config.hyper_params.{key} is {hyper_params[key]!r} for rule "
          f"{label!r}: give only config.hyper_params.{key}."
      )
  return {**hyper_params, **moved}, rule_kwargs


def _check_numbers(hyper_params: dict[str, Any]) -> None:
  for key, value in hyper_params.items():
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or abs(value) == float("inf")
    ):
      raise SettingsError(
          f"config.hyper_params.{key} must be a finite number, got {value!r}."
      )


def apply(
    settings: config_dict.ConfigDict,
    hyper_params: Any,
    rule_kwargs: Any,
    label: str,
) -> bool:
  """Updates the agent ``settings`` (in today's spelling: from
  ``registry.default_settings`` or ``resolve.resolve_rule``) with the
  ``hyper_params`` and ``rule_kwargs`` given (dicts of ``rule_kwargs``
  merged one level deep); returns whether anything changed. Old spellings
  given (a config written before) become their hyper-parameters
  (``registry.moved_to_hyper_params``).

  Raises:
    SettingsError: for a key the rule (``label`` in the message) does not
      have, naming the valid ones, a hyper-parameter that is not a finite
      number, or an old spelling that disagrees with its hyper-parameter.
  """
  before = settings.to_dict()
  make = registry.get_entry(settings.rule).make
  own = _as_dict(settings.hyper_params)
  given, given_kwargs = _given(make, hyper_params, rule_kwargs, own, label)
  unknown = sorted(set(given) - set(own))
  if unknown:
    raise SettingsError(
        f"Unknown hyper_params {unknown} for rule {label!r}: valid keys are "
        f"{', '.join(sorted(own)) or 'none'}."
    )
  _check_numbers(given)
  settings.hyper_params = {**own, **{k: float(v) for k, v in given.items()}}
  valid = factory_parameters(make)
  unknown = sorted(set(given_kwargs) - set(valid))
  if unknown:
    raise SettingsError(
        f"Unknown rule_kwargs {unknown} for rule {label!r}: valid keys are "
        f"{', '.join(valid) or 'none'}."
    )
  settings.rule_kwargs = _merged(_as_dict(settings.rule_kwargs), given_kwargs)
  return settings.to_dict() != before


# ------------------------------------------------------------- listing ----


def _docstring_args(make: Callable[..., Any]) -> dict[str, str]:
  """``{argument: meaning}`` from the ``Args:`` section of the docstring of
  ``make`` (or of its ``__init__``); ``a, b: text`` gives both names."""
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
  for key, value in sorted(_as_dict(settings.hyper_params).items()):
    out.append(
        (
            f"hyper_params.{key}",
            _text(value),
            HYPER_PARAM_MEANINGS.get(key, "a coefficient of the rule's loss"),
        )
    )
  meanings = _docstring_args(entry.make)
  kwargs = _as_dict(settings.rule_kwargs)
  for key in factory_parameters(entry.make):
    meaning = meanings.get(key, "")
    if key not in kwargs:  # None by default: no flag can set it
      continue
    value = kwargs[key]
    if isinstance(value, dict):
      for sub, sub_value in value.items():
        out.append((f"rule_kwargs.{key}.{sub}", _text(sub_value), meaning))
    else:
      out.append((f"rule_kwargs.{key}", _text(value), meaning))
  for key, meaning in AGENT_KEYS.items():
    out.append((key, _text(settings[key]), meaning))
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
