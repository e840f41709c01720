"""Proximal policy optimisation (Schulman et al., 2017), clipped surrogate.

From the behaviour network's logits ``mu`` and values ``V_old`` (kept in the
rollout) and the trained ``pi`` and ``V``, all ``[T+1, B, ...]``: advantages
``A`` ``[T, B]`` are GAE(gamma, lambda) of ``reward_scale * rewards`` on
``V_old`` (no bootstrap at terminations, cut at truncations), normalised over
each learner step's loss mask; value targets are ``R = A_raw + V_old[:-1]``. The
loss per transition is ``policy + value_cost * value - entropy_cost * H(pi)``,
with policy loss ``-min(rho A, clip(rho, 1 - eps, 1 + eps) A)``
(``rho = pi(a|s) / mu(a|s)``) and value loss
``0.5 max((V - R)^2, (V_clip - R)^2)``, ``V_clip = V_old + clip(V - V_old, -eps,
eps)`` (``clip_value``; else ``0.5 (V - R)^2``). Targets stay fixed over the
loop's epochs of minibatches.

The registry's ``ppo`` follows purejaxrl's CartPole PPO, except that minibatches
split environments, not transitions, and a time limit is a truncation, not a
termination.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from disco import ops
from disco import types
from disco.update_rules import base
from disco.value_fns import returns

PPO_HYPER_PARAMS = dict(
    discount_factor=0.99,
    gae_lambda=0.95,
    clip_epsilon=0.2,
    entropy_cost=0.01,
    value_cost=0.5,
    reward_scale=1.0,
)


class PPO(base.UpdateRule):
  """PPO with a clipped surrogate, GAE and an optionally clipped value loss.

  Args:
    hyper_params: overrides of ``PPO_HYPER_PARAMS``.
    normalize_advantages: normalise the advantages over each learner step's
      batch.
    clip_value: clip the value loss around the behaviour values (by
      ``clip_epsilon``).
  """

  default_hyper_params = PPO_HYPER_PARAMS
  behaviour_outputs = ("logits", "v")
  supports_continuous_actions = True

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      normalize_advantages: bool = True,
      clip_value: bool = True,
  ):
    super().__init__(hyper_params)
    self._normalize_advantages = normalize_advantages
    self._clip_value = clip_value

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return base.policy_value_spec(num_actions)

  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    """GAE advantages and value targets from the behaviour values."""
    inputs.check_shapes()
    old_values = inputs.behaviour_agent_out["v"][..., 0]  # [T+1, B]
    discounts = self.hyper_params["discount_factor"] * (
        1.0 - inputs.is_terminal.astype(old_values.dtype)
    )
    advs = returns.gae(
        self.hyper_params["reward_scale"] * inputs.rewards,
        discounts,
        old_values,
        self.hyper_params["gae_lambda"],
        inputs.truncated,
    )
    pg_advs = advs
    if self._normalize_advantages:
      mean = ops.masked_mean(advs, inputs.mask, context.axis_name)
      var = ops.masked_mean(
          jnp.square(advs - mean), inputs.mask, context.axis_name
      )
      pg_advs = (advs - mean) / (jnp.sqrt(var) + 1e-8)
    meta_out = dict(
        pg_advs=pg_advs,
        raw_advs=advs,
        value_targets=advs + old_values[:-1],
    )
    return meta_out, context.rule_state

  def surrogate(
      self, log_r: jax.Array, advs: jax.Array, meta_out: base.MetaOut
  ) -> tuple[jax.Array, types.Logs]:
    """The objective maximised per transition ``[T, B]``, from the log-ratios
    ``log pi(a|s) - log mu(a|s)`` and advantages ``[T, B]``, and its logs:
    ``min(r A, clip(r, 1 - eps, 1 + eps) A)`` (``mirror_learning`` rules:
    ``r A - f(r, A)``)."""
    del meta_out
    eps = self.hyper_params["clip_epsilon"]
    ratio = jnp.exp(log_r)
    clipped = jnp.minimum(
        ratio * advs, jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * advs
    )
    return clipped, {}

  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    """``-surrogate`` minus the entropy bonus, ``[T, B]``; without ``backprop``
    (or ``hyper_param_gradients``) no gradient reaches ``meta_out``."""
    inputs.check_shapes()
    if not (backprop or self.hyper_param_gradients):
      meta_out = jax.lax.stop_gradient(meta_out)
    eps = self.hyper_params["clip_epsilon"]
    logits = inputs.agent_out["logits"][:-1]
    actions = inputs.actions[:-1]
    policy = inputs.action_policy
    log_pi = policy.log_prob(logits, actions)
    log_mu = policy.log_prob(inputs.behaviour_agent_out["logits"][:-1], actions)
    log_r = log_pi - log_mu
    ratio = jnp.exp(log_r)
    advs = self.loss_target(meta_out["pg_advs"])
    objective, surrogate_logs = self.surrogate(log_r, advs, meta_out)
    entropy = policy.entropy(logits)
    loss = -objective - self.hyper_params["entropy_cost"] * entropy
    logs = dict(
        surrogate_logs,
        entropy=jnp.mean(entropy),
        ratio=jnp.mean(ratio),
        clip_fraction=jnp.mean(jnp.abs(ratio - 1.0) > eps),
        approx_kl=jnp.mean(log_mu - log_pi),
        raw_advs=jnp.mean(meta_out["raw_advs"]),
    )
    return loss, logs

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    """The value loss times ``value_cost``, ``[T, B]``."""
    values = inputs.agent_out["v"][:-1, ..., 0]
    old_values = inputs.behaviour_agent_out["v"][:-1, ..., 0]
    targets = self.loss_target(meta_out["value_targets"])
    value_loss = jnp.square(values - targets)
    if self._clip_value:
      eps = self.hyper_params["clip_epsilon"]
      clipped = old_values + jnp.clip(values - old_values, -eps, eps)
      value_loss = jnp.maximum(value_loss, jnp.square(clipped - targets))
    value_loss = 0.5 * value_loss
    return self.hyper_params["value_cost"] * value_loss, dict(
        value_loss=jnp.mean(value_loss),
        avg_value=jnp.mean(values),
    )
