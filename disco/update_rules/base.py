"""The update-rule interface consumed by ``disco.agent.Agent``.

A rule
  * declares what the agent network must output: flat per-state outputs
    (``flat_output_spec``, ``[B, *shape]``) and per-action outputs from the
    action-conditional model (``model_output_spec``, ``[B, A, *shape]``);
  * owns its meta-parameters (``init_params``; hand-designed rules have none)
    and its state (``init_meta_state``: EMA statistics, target parameters,
    dual variables, a meta-RNN state, ...);
  * turns a rollout into per-transition losses ``[T, B]`` in two parts:
    ``agent_loss`` may carry meta-gradients (``backprop=True``) and
    ``agent_loss_no_meta`` never does (e.g. value losses);
  * may choose actions itself (``select_action``; the default samples from
    ``logits``). Rules that search over copies of the environment state set
    ``needs_env_copies = True``;
  * names the network outputs that rollouts keep for it
    (``behaviour_outputs``, by default only ``logits``).

The Agent never branches on which rule it holds. A typical learner step:
``meta_out, new_state = unroll_meta_net(...)`` once, then the gradient of
``agent_loss + agent_loss_no_meta`` with respect to the agent parameters.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable

import distrax
import jax
import jax.numpy as jnp
import numpy as np

from disco import types

# (params, observations [T+1, B, ...]) -> agent outputs [T+1, B, ...].
UnrollFn = Callable[[types.Params, types.ArrayTree], types.AgentOuts]


def logits_spec(num_actions: int) -> types.ArraySpec:
  return types.ArraySpec((num_actions,), np.float32)


@dataclasses.dataclass(frozen=True)
class ActingContext:
  """What a rule may use to choose actions beyond the network's outputs.

  Attributes:
    params: the acting network's parameters.
    apply_fn: ``(params, observations [B, ...]) -> agent outputs [B, ...]``.
    rule_state: the rule's state (may be None when acting without a learner).
    env: the batched environment (only given to rules with
      ``needs_env_copies``; it is jittable then).
    env_state: the environment state the observation came from.
  """

  params: types.Params
  apply_fn: Callable[..., types.AgentOuts]
  rule_state: types.RuleState | None = None
  env: Any = None
  env_state: Any = None


class UpdateRule(abc.ABC):
  """Base class of update rules; see the module docstring."""

  # Whether acting needs copies of the (jittable) environment state.
  needs_env_copies: bool = False
  # Network outputs that actors keep in rollouts (``behaviour_agent_out``).
  # Keeping only what the rule reads keeps replays small and lets XLA drop
  # the unused heads from the acting step.
  behaviour_outputs: tuple[str, ...] = ("logits",)
  # Whether ``agent_loss``, ``agent_loss_no_meta`` and ``meta_regularizer``
  # (its validation outputs) read per-action (``model_output_spec``) outputs
  # only at the taken actions; the agent then backpropagates through the
  # action model for those actions alone where it can.
  model_losses_read_taken_actions: bool = False

  @abc.abstractmethod
  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    """Per-state outputs: name -> spec of ``[*shape]`` for one state."""

  def model_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    """Per-action outputs: name -> spec of one action's prediction."""
    del num_actions
    return {}

  def agent_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    """All agent outputs for one state (per-action ones lead with ``A``)."""
    spec = dict(self.flat_output_spec(num_actions))
    for key, s in self.model_output_spec(num_actions).items():
      if key in spec:
        raise ValueError(f"Output {key!r} is declared flat and per-action.")
      spec[key] = types.ArraySpec((num_actions,) + tuple(s.shape), s.dtype)
    return spec

  def init_params(self, rng: jax.Array) -> types.MetaParams:
    """Meta-parameters (empty for hand-designed rules)."""
    del rng
    return {}

  @abc.abstractmethod
  def init_meta_state(
      self, rng: jax.Array, params: types.Params) -> types.RuleState:
    """The rule's state at the start of an agent's lifetime."""

  @abc.abstractmethod
  def unroll_meta_net(
      self,
      meta_params: types.MetaParams,
      params: types.Params,
      meta_state: types.RuleState,
      inputs: types.UpdateRuleInputs,
      hyper_params: types.HyperParams,
      unroll_fn: UnrollFn,
      rng: jax.Array,
      axis_name: str | None = None,
  ) -> tuple[dict[str, Any], types.RuleState]:
    """Computes the loss targets for a rollout and the next rule state.

    Args:
      meta_params: the rule's meta-parameters.
      params: the agent parameters before this update.
      meta_state: the rule's state.
      inputs: the rollout (``[T+1, B]`` states, ``[T, B]`` transitions).
      hyper_params: loss coefficients and discounts.
      unroll_fn: the agent network over ``[T+1, B, ...]`` observations (for
        target networks).
      rng: random key.
      axis_name: named axis to average statistics over, if any.

    Returns:
      ``(meta_out, new_meta_state)``; ``meta_out`` is passed to the losses.
    """

  @abc.abstractmethod
  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: dict[str, Any],
      hyper_params: types.HyperParams,
      backprop: bool,
  ) -> tuple[jax.Array, types.Logs]:
    """Per-transition loss ``[T, B]`` that may carry meta-gradients."""

  def agent_loss_no_meta(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: dict[str, Any],
      hyper_params: types.HyperParams,
  ) -> tuple[jax.Array, types.Logs]:
    """Per-transition loss ``[T, B]`` that never carries meta-gradients."""
    del meta_out, hyper_params
    return jnp.zeros_like(inputs.rewards), {}

  def meta_regularizer(
      self,
      train_meta_out: dict[str, Any],
      valid_agent_out: types.AgentOuts,
      valid_actions: jax.Array,
  ) -> tuple[jax.Array, types.Logs]:
    """Rule-specific regularisers of the outer (meta) loss.

    Args:
      train_meta_out: ``meta_out`` of every inner step, ``[N, T, B, ...]``.
      valid_agent_out: the updated agent's outputs on the validation rollout
        ``[T'+1, B, ...]``.
      valid_actions: ``[T', B]`` actions of the validation transitions.

    Returns:
      A scalar added to the outer loss, and logs.
    """
    del train_meta_out, valid_agent_out, valid_actions
    return jnp.zeros([]), {}

  def select_action(
      self, rng: jax.Array, agent_out: types.AgentOuts, context: ActingContext
  ) -> tuple[jax.Array, types.ArrayTree]:
    """Chooses ``[B]`` actions; returns ``(actions, extras)`` where extras
    are stored in the rollout (``ActorTimestep.extras``)."""
    del context
    return distrax.Softmax(logits=agent_out["logits"]).sample(seed=rng), None

