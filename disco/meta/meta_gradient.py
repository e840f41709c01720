"""The meta-gradient of one agent: the derivative, through ``N`` learner steps
on ``N`` training rollouts (``is_meta_training=True``; the value function
updated alongside), of the outer loss on a validation rollout: policy gradient
with the value function's normalised advantages, minus an entropy bonus, plus
the rule's ``meta_regularizer``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from disco import agent as agent_lib
from disco import ops
from disco import types
from disco.meta import value_function
from disco.value_fns import losses


@dataclasses.dataclass(frozen=True)
class OuterLossConfig:
  """Outer-loss settings.

  Attributes:
    entropy_cost: weight of the validation policy-entropy bonus.
    remat_inner_steps: rematerialise each inner step in the backward pass (less
      memory, more compute).
    max_unrolled_inner_steps: inner loops up to this long compile straight-line
      (compile time grows with the steps); longer ones unroll the first step and
      ``lax.scan`` the rest (0 or 1: always a scan).
  """

  entropy_cost: float = 1e-2
  remat_inner_steps: bool = False
  max_unrolled_inner_steps: int = 2

  def __post_init__(self):
    if self.max_unrolled_inner_steps < 0:
      raise ValueError(
          f"max_unrolled_inner_steps must be >= 0, got "
          f"{self.max_unrolled_inner_steps}."
      )


def inner_updates(
    agent: agent_lib.Agent,
    value_fn: value_function.ValueFunction,
    meta_params: types.MetaParams,
    learner: types.LearnerState,
    value_state: value_function.ValueState,
    train_rollouts: types.ActorRollout,
    rngs: jax.Array,
    remat: bool = False,
    max_unrolled: int = 0,
) -> tuple[
    types.LearnerState, value_function.ValueState, types.Logs, dict[str, Any]
]:
  """``N`` learner (and value-function) updates on ``[N, T+1, B]`` rollouts;
  ``remat`` and ``max_unrolled`` as ``OuterLossConfig``'s. Returns the new
  states, the learner logs and every step's ``meta_out`` (leading ``[N]``)."""

  def step(carry, inputs):
    learner, value_state = carry
    rollout, rng = inputs
    update = agent.learner_update(
        rng, rollout, learner, meta_params, is_meta_training=True
    )
    # The value function learns about the policy that produced the update.
    logits = agent.unroll(learner.params, rollout.observations)["logits"]
    new_value_state, value_logs = value_fn.update(value_state, rollout, logits)
    logs = dict(update.logs, **value_logs)
    return (update.learner_state, new_value_state), (logs, update.meta_out)

  if remat:
    step = jax.checkpoint(step)
  inputs = (train_rollouts, rngs)
  num_steps = jax.tree.leaves(rngs)[0].shape[0]
  if num_steps <= max(max_unrolled, 1):
    (learner, value_state), (logs, meta_out) = jax.lax.scan(
        step, (learner, value_state), inputs, unroll=True
    )
    return learner, value_state, logs, meta_out
  # The first step's parameters do not depend on the meta-parameters: outside
  # the loop, its meta-gradient skips the agent network's derivatives.
  carry, first = step(
      (learner, value_state), jax.tree.map(lambda x: x[0], inputs)
  )
  (learner, value_state), rest = jax.lax.scan(
      step, carry, jax.tree.map(lambda x: x[1:], inputs)
  )
  logs, meta_out = jax.tree.map(
      lambda f, r: jnp.concatenate([f[None], r]), first, rest
  )
  return learner, value_state, logs, meta_out


def _validation_loss(
    agent: agent_lib.Agent,
    value_fn: value_function.ValueFunction,
    learner: types.LearnerState,
    value_state: value_function.ValueState,
    valid_rollout: types.ActorRollout,
    meta_out: Any,
    config: OuterLossConfig,
) -> tuple[jax.Array, types.Logs]:
  """The meta-loss on the validation rollout ``[T'+1, B, ...]`` after the inner
  updates, and its logs."""
  # Per-action outputs only at the taken actions, where the rule allows.
  grad_actions = (
      valid_rollout.actions
      if agent.rule.model_losses_read_taken_actions
      else None
  )
  valid_out = agent.unroll(
      learner.params, valid_rollout.observations, grad_actions
  )
  pg_loss, entropy, policy_logs = policy_loss(
      value_fn, value_state, valid_rollout, valid_out["logits"]
  )
  rule_reg, rule_logs = agent.rule.meta_regularizer(
      meta_out, valid_out, valid_rollout.actions[:-1]
  )
  reg_loss = -config.entropy_cost * entropy + rule_reg
  meta_loss = pg_loss + reg_loss
  meta_logs = dict(
      meta_loss=meta_loss,
      pg_loss=pg_loss,
      reg_loss=reg_loss,
      entropy=entropy,
      **policy_logs,
      **rule_logs,
  )
  return meta_loss, meta_logs


def policy_loss(
    value_fn: value_function.ValueFunction,
    value_state: value_function.ValueState,
    valid_rollout: types.ActorRollout,
    logits: jax.Array,
) -> tuple[jax.Array, jax.Array, types.Logs]:
  """The outer loss's policy terms for the policy ``logits`` ``[T'+1, B, A]``
  on the validation rollout ``[T'+1, B, ...]``: ``(policy-gradient loss with
  the value function's normalised advantages, policy entropy, logs)``, both
  means over the ``[T', B]`` transitions."""
  value_outs, _, _, _ = value_fn.value_outs(value_state, valid_rollout, logits)
  logits = logits[:-1]
  pg_loss = losses.policy_gradient_loss(
      logits,
      valid_rollout.actions[:-1],
      jax.lax.stop_gradient(value_outs.normalized_adv),
  )
  entropy = ops.softmax_entropy(logits).mean()
  logs = dict(
      adv=value_outs.adv.mean(),
      normalized_adv=value_outs.normalized_adv.mean(),
      value=value_outs.value.mean(),
      val_importance_weight=jnp.mean(jnp.minimum(value_outs.rho, 1.0)),
  )
  return pg_loss.mean(), entropy, logs


def outer_loss(
    meta_params: types.MetaParams,
    agent: agent_lib.Agent,
    value_fn: value_function.ValueFunction,
    learner: types.LearnerState,
    value_state: value_function.ValueState,
    train_rollouts: types.ActorRollout,
    valid_rollout: types.ActorRollout,
    rng: jax.Array,
    config: OuterLossConfig = OuterLossConfig(),
) -> tuple[
    jax.Array,
    tuple[
        types.LearnerState, value_function.ValueState, types.Logs, types.Logs
    ],
]:
  """The meta-loss after the inner updates, and what they produced.

  Args:
    meta_params: the rule's meta-parameters (differentiated).
    agent: the agent (its rule holds the meta-network).
    value_fn: the meta-training value function.
    learner: the agent's learner state before the inner updates.
    value_state: the value function's state before the inner updates.
    train_rollouts: ``[N, T+1, B, ...]`` rollouts, one per inner step.
    valid_rollout: ``[T'+1, B, ...]`` validation rollout.
    rng: random key.
    config: outer-loss settings.

  Returns:
    ``(meta_loss, (learner, value_state, train_logs, meta_logs))``.
  """
  train_rng, _ = jax.random.split(rng)
  num_steps = jax.tree.leaves(train_rollouts)[0].shape[0]
  learner, value_state, train_logs, meta_out = inner_updates(
      agent,
      value_fn,
      meta_params,
      learner,
      value_state,
      train_rollouts,
      jax.random.split(train_rng, num_steps),
      config.remat_inner_steps,
      config.max_unrolled_inner_steps,
  )

  meta_loss, meta_logs = _validation_loss(
      agent, value_fn, learner, value_state, valid_rollout, meta_out, config
  )
  train_logs = jax.tree.map(jnp.mean, train_logs)
  return meta_loss, (learner, value_state, train_logs, meta_logs)


def meta_gradient(
    meta_params: types.MetaParams, *args: Any, **kwargs: Any
) -> tuple[types.MetaParams, tuple[Any, ...]]:
  """``d outer_loss / d meta_params`` (other arguments: ``outer_loss``'s) and
  ``outer_loss``'s auxiliary output."""
  return jax.grad(outer_loss, has_aux=True)(meta_params, *args, **kwargs)
