"""An agent's settings (``AgentSettings``, frozen): its rule and the rule's
settings, optimiser and network. Made by ``registry.default_settings`` (or a
rule file), merged once with overrides (``overrides.merged``), then used to
build the rule and agent; ``to_dict`` / ``from_dict`` give their JSON form."""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import math
from typing import Any

import immutabledict

from disco import checks
from disco import optimizers

# What ``loss_mask`` may be: the losses average over the valid transitions,
# or over those the published implementation counts (``disco.agent.Agent``).
LOSS_MASKS = ("valid", "published")
# Hyper-parameters whose meaning bounds them.
HYPER_PARAM_RANGES = {
    "discount_factor": (0.0, 1.0),
    "td_lambda": (0.0, 1.0),
    "gae_lambda": (0.0, 1.0),
    "target_update_tau": (0.0, 1.0),
    "step_size": (0.0, math.inf),
}
# The optimiser settings, with what they mean (listings).
OPTIMIZER_KEYS = {
    "learning_rate": "the agents' Adam learning rate",
    "max_abs_update": "elementwise clip of Adam's update (None: off)",
    "max_grad_norm": "clip of the gradients' global norm (None: off)",
    "adam_eps": "Adam's epsilon",
    "anneal_learning_rate": "anneal the learning rate linearly to 0",
    "loss_mask": "transitions the losses average over: valid or published",
}


def frozen(value: Any) -> Any:
  """``value`` with every mapping read-only and every list a tuple."""
  if isinstance(value, Mapping):
    return immutabledict.immutabledict({k: frozen(v) for k, v in value.items()})
  if isinstance(value, (list, tuple)):
    return tuple(frozen(v) for v in value)
  return value


def thawed(value: Any) -> Any:
  """``value`` with every mapping a new ``dict`` (tuples stay tuples)."""
  if isinstance(value, Mapping):
    return {k: thawed(v) for k, v in value.items()}
  if isinstance(value, tuple):
    return tuple(thawed(v) for v in value)
  return value


@dataclasses.dataclass(frozen=True)
class AgentSettings:
  """Everything that makes an agent, given its environment's specs.

  Attributes:
    rule: the rule's registry name.
    learning_rate: Adam's learning rate.
    network: ``disco.networks.agent_nets.NetConfig`` fields.
    hyper_params: the rule's numbers (loss coefficients, discounts).
    rule_kwargs: the other keyword arguments of the rule's factory.
    max_abs_update: elementwise clip of Adam's update (None: none).
    max_grad_norm: global-norm clip of the gradients (None: none).
    adam_eps: Adam's epsilon.
    anneal_learning_rate: decay the learning rate linearly to 0 over the run.
    loss_mask: transitions the losses average over (``LOSS_MASKS``).
    policy: the continuous-action policy's settings (empty: defaults).
  """

  rule: str
  rule_kwargs: Mapping[str, Any]
  hyper_params: Mapping[str, float]
  learning_rate: float
  max_abs_update: float | None = 1.0
  max_grad_norm: float | None = None
  adam_eps: float = optimizers.DEFAULT_ADAM_EPS
  anneal_learning_rate: bool = False
  loss_mask: str = "valid"
  network: Mapping[str, Any] = immutabledict.immutabledict()
  policy: Mapping[str, Any] = immutabledict.immutabledict()

  def __post_init__(self):
    for field in ("rule_kwargs", "hyper_params", "network", "policy"):
      object.__setattr__(self, field, frozen(getattr(self, field) or {}))

  def replace(self, **changes: Any) -> AgentSettings:
    """A copy with ``changes`` (whole fields) made."""
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict[str, Any]:
    """The JSON form: plain dicts, ``policy`` only when it is set."""
    out = {f.name: thawed(getattr(self, f.name)) for f in _FIELDS}
    if not out["policy"]:
      del out["policy"]
    return out

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> AgentSettings:
    """Settings from their JSON form (absent optional keys: defaults).

    Raises:
      ValueError: an unknown or missing key.
    """
    names = [f.name for f in _FIELDS]
    unknown = sorted(set(values) - set(names))
    if unknown:
      raise ValueError(
          f"Unknown agent setting(s) {unknown}; valid: {', '.join(names)}."
      )
    try:
      return cls(**values)
    except TypeError as e:
      raise ValueError(f"Incomplete agent settings: {e}") from None

  def check(self) -> None:
    """Checks the values, wherever they came from: ``learning_rate`` and
    ``adam_eps`` finite and > 0, clips None or finite and > 0,
    ``anneal_learning_rate`` a bool, ``loss_mask`` in ``LOSS_MASKS``,
    hyper-parameters finite (within ``HYPER_PARAM_RANGES``).

    Raises:
      ValueError: naming every value out of range.
    """
    problems = []
    for key in ("learning_rate", "adam_eps"):
      value = getattr(self, key)
      if not checks.is_finite_number(value) or value <= 0:
        problems.append(f"{key}={value!r} must be a finite number > 0")
    for key in ("max_abs_update", "max_grad_norm"):
      value = getattr(self, key)
      if value is not None and (
          not checks.is_finite_number(value) or value <= 0
      ):
        problems.append(
            f"{key}={value!r} must be None (no clip) or a finite number > 0"
        )
    for key, value in self.hyper_params.items():
      low, high = HYPER_PARAM_RANGES.get(key, (-math.inf, math.inf))
      if not checks.is_finite_number(value) or not low <= value <= high:
        bounds = "" if math.isinf(high) else f" in [{low}, {high}]"
        problems.append(
            f"hyper_params.{key}={value!r} must be a finite number{bounds}"
        )
    if self.loss_mask not in LOSS_MASKS:
      problems.append(
          f"loss_mask={self.loss_mask!r} must be one of {', '.join(LOSS_MASKS)}"
      )
    if not isinstance(self.anneal_learning_rate, bool):
      problems.append(
          f"anneal_learning_rate={self.anneal_learning_rate!r} must be True "
          "or False"
      )
    if problems:
      raise ValueError("; ".join(problems) + ".")


_FIELDS = dataclasses.fields(AgentSettings)
