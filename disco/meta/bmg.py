"""Meta-training by bootstrapped meta-gradients (``--config.estimator=bmg``).

BMG (Flennerhag et al., "Bootstrapped Meta-Learning", ICLR 2022) matches the
learner after the ``K = inner_steps`` inner updates, ``x_K(w)``, to a target
``x~`` taken ``L = target_steps`` updates further and held constant: the
meta-loss is ``mu(x~, x_K(w))`` and its gradient backpropagates through the
``K`` inner updates only, while the target looks ``K + L`` updates ahead.

The target starts from ``x_K`` (and the meta value function after the inner
updates) and learns from the agent's validation rollout ``[2T+1, B]``, the
backprop estimator's, which ``x_K`` has not learned from: ``L - 1`` updates of
the rule then one step down the outer loss's gradient (the validation
policy-gradient loss with the value function's advantages, minus the entropy
bonus) through the agent's own optimiser (``target_final_step="outer"``), or
``L`` updates of the rule (``"rule"``). Each update of the target reads the
whole validation rollout. ``mu`` is ``KL(pi~ || pi_K)`` averaged over the
validation rollout's ``[2T, B]`` states (``distance="kl"``) or the squared
distance of the agent network's parameters (``"squared"``); the rule's
``meta_regularizer`` on ``x_K`` may be added (``rule_regularizer_cost``).
Agents, their rollouts and lifetimes are the backprop estimator's
(``disco.meta.population``; not its replay or level samplers); each agent goes
on from ``x_K``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from ml_collections import config_dict
import optax

from disco import agent as agent_lib
from disco import ops
from disco import types
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import meta_step
from disco.meta import population
from disco.meta import value_function

DISTANCES = ("kl", "squared")
FINAL_STEPS = ("outer", "rule")


@dataclasses.dataclass(frozen=True)
class BMGConfig:
  """BMG settings.

  Attributes:
    target_steps: ``L``, the updates from ``x_K`` to the target (0: the target
      is ``x_K`` itself, and only the rule's regulariser has a gradient).
    target_final_step: the target's last update: ``"outer"``, a step down the
      outer loss's gradient through the agent's optimiser (the paper's
      default), or ``"rule"``, the rule's update.
    distance: ``"kl"``: ``KL(pi~ || pi_K)`` over the validation states;
      ``"squared"``: the squared distance of the agent network's parameters.
    rule_regularizer_cost: the weight of the rule's ``meta_regularizer`` (on
      ``x_K``) in the meta-loss (0: the matching loss alone). The matching
      loss's gradient is of the order of the agent's step size, the
      regulariser's not: weights that suit the backprop estimator drown it.
  """

  target_steps: int = 1
  target_final_step: str = "outer"
  distance: str = "kl"
  rule_regularizer_cost: float = 0.0

  def __post_init__(self):
    steps = self.target_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
      raise ValueError(
          f"target_steps must be an integer >= 0 (updates from the inner "
          f"updates' learner to the target), got {steps!r}."
      )
    if self.target_final_step not in FINAL_STEPS:
      raise ValueError(
          f"Unknown target_final_step {self.target_final_step!r}; use one of "
          f"{', '.join(FINAL_STEPS)}."
      )
    if self.distance not in DISTANCES:
      raise ValueError(
          f"Unknown distance {self.distance!r}; use one of "
          f"{', '.join(DISTANCES)}."
      )
    cost = self.rule_regularizer_cost
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
      raise ValueError(
          f"rule_regularizer_cost must be a number >= 0, got {cost!r}."
      )

  @classmethod
  def from_config(
      cls, values: Mapping[str, Any], agent: config_dict.ConfigDict | None
  ) -> BMGConfig:
    """The settings ``config.bmg`` holds (missing keys: defaults; ``agent`` is
    not read).

    Raises:
      ValueError, TypeError: bad or unknown settings.
    """
    del agent
    return cls(**values)


def bootstrap_target(
    agent: agent_lib.Agent,
    value_fn: value_function.ValueFunction,
    meta_params: types.MetaParams,
    learner: types.LearnerState,
    value_state: value_function.ValueState,
    valid_rollout: types.ActorRollout,
    rng: jax.Array,
    outer: meta_gradient_lib.OuterLossConfig,
    config: BMGConfig,
) -> types.LearnerState:
  """The learner ``config.target_steps`` updates on from ``learner``, each on
  the validation rollout ``[T'+1, B, ...]``: the rule's (``inner_updates``,
  the value function learning alongside), the last one the outer loss's
  gradient step where ``target_final_step`` is ``"outer"``. Not
  differentiated: callers pass constants."""
  rule_steps = config.target_steps
  if config.target_final_step == "outer":
    rule_steps = max(rule_steps - 1, 0)
  if rule_steps:
    rollouts = jax.tree.map(
        lambda x: jnp.broadcast_to(x, (rule_steps,) + x.shape), valid_rollout
    )
    learner, value_state, _, _ = meta_gradient_lib.inner_updates(
        agent,
        value_fn,
        meta_params,
        learner,
        value_state,
        rollouts,
        jax.random.split(rng, rule_steps),
        max_unrolled=outer.max_unrolled_inner_steps,
    )
  if config.target_steps and config.target_final_step == "outer":

    def outer_loss(params):
      logits = agent.unroll(params, valid_rollout.observations)["logits"]
      pg_loss, entropy, _ = meta_gradient_lib.policy_loss(
          value_fn, value_state, valid_rollout, logits
      )
      return pg_loss - outer.entropy_cost * entropy

    grads = jax.grad(outer_loss)(learner.params)
    learner, _ = agent.apply_gradients(learner, grads, learner.rule_state)
  return learner


def matching_loss(
    distance: str,
    target_params: types.Params,
    params: types.Params,
    target_logits: jax.Array,
    logits: jax.Array,
) -> jax.Array:
  """``mu(x~, x)``: for ``"kl"``, ``KL(softmax(target_logits) ||
  softmax(logits))`` averaged over the ``[T', B]`` states of the logits
  ``[T'+1, B, A]`` (the last, which has no action, left out); for
  ``"squared"``, ``sum (params - target_params)^2`` over the network's
  parameters."""
  if distance == "kl":
    return ops.categorical_kl(target_logits[:-1], logits[:-1]).mean()
  if distance == "squared":
    return optax.tree.norm(optax.tree.sub(params, target_params), squared=True)
  raise ValueError(f"Unknown distance {distance!r}.")


def bmg_loss(
    meta_params: types.MetaParams,
    agent: agent_lib.Agent,
    value_fn: value_function.ValueFunction,
    learner: types.LearnerState,
    value_state: value_function.ValueState,
    train_rollouts: types.ActorRollout,
    valid_rollout: types.ActorRollout,
    rng: jax.Array,
    outer: meta_gradient_lib.OuterLossConfig,
    config: BMGConfig,
) -> tuple[
    jax.Array,
    tuple[
        types.LearnerState, value_function.ValueState, types.Logs, types.Logs
    ],
]:
  """The BMG meta-loss ``mu(stop_gradient(x~), x_K(w))`` (plus the rule's
  regulariser) and what the inner updates produced; arguments as
  ``meta_gradient.outer_loss``'s (``train_rollouts`` ``[K, T+1, B, ...]``,
  ``valid_rollout`` ``[T'+1, B, ...]``), the inner updates' keys the same.

  Returns:
    ``(meta_loss, (x_K, value state, train_logs, meta_logs))``.
  """
  train_rng, target_rng = jax.random.split(rng)
  num_steps = jax.tree.leaves(train_rollouts)[0].shape[0]
  learner, value_state, train_logs, meta_out = meta_gradient_lib.inner_updates(
      agent,
      value_fn,
      meta_params,
      learner,
      value_state,
      train_rollouts,
      jax.random.split(train_rng, num_steps),
      outer.remat_inner_steps,
      outer.max_unrolled_inner_steps,
  )
  target = bootstrap_target(
      agent,
      value_fn,
      *jax.lax.stop_gradient((meta_params, learner, value_state)),
      valid_rollout,
      target_rng,
      outer,
      config,
  )
  target = jax.lax.stop_gradient(target)
  matching, valid_out, target_logits = _matching(
      agent, config, target, learner, valid_rollout
  )
  actions = valid_rollout.actions[:-1]
  reg_loss, rule_logs = jnp.zeros([]), {}
  if config.rule_regularizer_cost:
    rule_reg, rule_logs = agent.rule.meta_regularizer(
        meta_out, valid_out, actions
    )
    reg_loss = config.rule_regularizer_cost * rule_reg
  meta_loss = matching + reg_loss
  meta_logs = dict(
      meta_loss=meta_loss,
      matching_loss=matching,
      reg_loss=reg_loss,
      **_comparison_logs(
          value_fn,
          value_state,
          valid_rollout,
          valid_out["logits"],
          target_logits,
          target.params,
          learner.params,
      ),
      **rule_logs,
  )
  train_logs = jax.tree.map(jnp.mean, train_logs)
  return meta_loss, (learner, value_state, train_logs, meta_logs)


def _matching(agent, config, target, learner, valid_rollout):
  """``(matching loss, x_K's outputs, the target's logits)`` on the
  validation rollout (``[T'+1, B, ...]``)."""
  grad_actions = (
      valid_rollout.actions
      if agent.rule.model_losses_read_taken_actions
      else None
  )
  valid_out = agent.unroll(
      learner.params, valid_rollout.observations, grad_actions
  )
  target_logits = agent.unroll(target.params, valid_rollout.observations)[
      "logits"
  ]
  matching = matching_loss(
      config.distance,
      target.params,
      learner.params,
      target_logits,
      valid_out["logits"],
  )
  return matching, valid_out, target_logits


def _comparison_logs(
    value_fn, value_state, valid_rollout, logits, target_logits, target, params
) -> types.Logs:
  """What the backprop estimator's outer loss would read at ``x_K``
  (``params``; its policy ``logits`` ``[T'+1, B, A]``), and how far the
  target (``target``, ``target_logits``) is from it."""
  pg_loss, entropy, policy_logs = jax.lax.stop_gradient(
      meta_gradient_lib.policy_loss(
          value_fn, value_state, valid_rollout, logits
      )
  )
  return dict(
      pg_loss=pg_loss,
      entropy=entropy,
      target_kl=ops.categorical_kl(
          target_logits[:-1], jax.lax.stop_gradient(logits[:-1])
      ).mean(),
      target_distance=optax.tree.norm(
          jax.tree.map(jnp.subtract, target, params)
      ),
      **policy_logs,
  )


def meta_gradient(
    meta_params: types.MetaParams, *args: Any, **kwargs: Any
) -> tuple[types.MetaParams, tuple[Any, ...]]:
  """``d bmg_loss / d meta_params`` (other arguments: ``bmg_loss``'s) and
  ``bmg_loss``'s auxiliary output."""
  return jax.grad(bmg_loss, has_aux=True)(meta_params, *args, **kwargs)


class BMGPopulation(population.BackpropPopulation):
  """The backprop estimator's population with BMG's meta-gradient.

  Args:
    groups: agent groups, each ``num_agents`` divisible by the number of
      devices.
    config: population settings.
    bmg_config: BMG settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard over (default: ``jax.devices()``).
  """

  def __init__(
      self,
      groups: Sequence[meta_step.AgentGroup],
      config: meta_step.PopulationConfig,
      bmg_config: BMGConfig,
      meta_optimizer: optax.GradientTransformation,
      devices: Sequence[jax.Device] | None = None,
  ):
    self.bmg_config = bmg_config
    super().__init__(groups, config, meta_optimizer, devices)

  def _meta_gradient(self, group, meta_params, state, train, valid, rng):
    return meta_gradient(
        meta_params,
        group.agent,
        group.value_fn,
        state.learner,
        state.value,
        train,
        valid,
        rng,
        self.config.outer,
        self.bmg_config,
    )
