"""Discrete Maximum a-posteriori Policy Optimisation (MPO).

The agent predicts a policy (``logits``) and one action value per action
(``q``, a flat output of shape ``[A]``). A Polyak-averaged copy of the agent
(the *target* network) supplies the prior policy ``pi_target`` and the action
values used by both steps of MPO:

* E-step (exact over all actions, weighted by the prior):
  ``q(a|s) ∝ pi_target(a|s) exp(Q_target(s, a) / eta)``. The temperature
  ``eta`` is a dual variable trained on
  ``eta * (epsilon + mean_s log sum_a pi_target(a|s) exp(Q(s, a) / eta))``,
  whose gradient is ``epsilon - KL(q || pi_target)``: ``eta`` grows when the
  realised KL exceeds ``epsilon``.
* M-step (categorical): the online policy minimises ``CE(q, pi_online)`` plus
  ``sg(alpha) * KL(pi_target || pi_online)``; the trust-region dual ``alpha``
  is trained on ``alpha * (epsilon_policy - sg(KL))``.

Both duals use a softplus parameterisation (``softplus(raw) + 1e-8``; raw
values are clamped at -18 after every step) and have their own optimiser
(global-norm clipping then Adam). The duals, their optimiser state and the
target parameters are the rule's state; the duals are updated inside
``unroll_meta_net`` from the rollout, with the pre-update values used in the
agent's loss, so the agent needs no knowledge of them. The target
parameters move (Polyak, ``target_update_tau``) towards the parameters the
learner step starts from, i.e. they lag the online ones by one step.

``q`` is regressed on lambda-returns or Retrace targets computed from the
target network, bootstrapping with ``V(s) = sum_a pi_target(a|s) Q_target(s,
a)`` (the exact expectation).

The loss building blocks live in ``disco.update_rules.mpo_common``, shared
with SPO (``disco.update_rules.spo``), which uses the sample-based E-step.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import rlax

from disco import ops
from disco import types
from disco.update_rules import base
from disco.update_rules import mpo_common as ml
from disco.value_fns import returns

# Discrete MPO's published defaults, adapted to a single shared network.
MPO_HYPER_PARAMS = dict(
    discount_factor=0.99,
    td_lambda=0.95,
    epsilon=0.01,
    epsilon_policy=1e-3,
    target_update_tau=0.005,
    q_cost=1.0,
)

Q_TARGETS = ("lambda", "retrace")


# ------------------------------------------------------------------ rule
class MPO(ml.DualRule):
  """Discrete MPO with an exact, prior-weighted E-step.

  Args:
    hyper_params: overrides of ``MPO_HYPER_PARAMS``.
    q_target: ``"lambda"`` (lambda-returns bootstrapping on the target
      network's ``V``) or ``"retrace"`` (Retrace with importance weights
      ``pi_target / mu`` clipped at 1).
    init_log_temperature, init_log_alpha, dual_lr, dual_max_grad_norm: the
      duals (see ``mpo_common.DualRule``).
  """

  default_hyper_params = MPO_HYPER_PARAMS

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      q_target: str = "lambda",
      init_log_temperature: float = 3.0,
      init_log_alpha: float = 3.0,
      dual_lr: float = 1e-2,
      dual_max_grad_norm: float = 40.0,
  ):
    if q_target not in Q_TARGETS:
      raise ValueError(
          f"Unknown q_target {q_target!r}; use one of {', '.join(Q_TARGETS)}."
      )
    super().__init__(
        hyper_params,
        init_log_temperature,
        init_log_alpha,
        ml.dual_optimizer(dual_lr, dual_max_grad_norm),
    )
    self._q_target = q_target

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return dict(
        logits=base.logits_spec(num_actions),
        q=types.ArraySpec((num_actions,), np.float32),
    )

  # ---------------------------------------------------------------- targets
  def _q_targets(self, inputs: base.Inputs, target_out: types.AgentOuts):
    """``[T, B]`` targets for ``Q(s_t, a_t)`` from the target network."""
    target_q = target_out["q"]
    target_v = jnp.sum(jax.nn.softmax(target_out["logits"]) * target_q, -1)
    env_discounts = 1.0 - inputs.is_terminal.astype(jnp.float32)
    gamma = self.hyper_params["discount_factor"]
    lambda_ = self.hyper_params["td_lambda"]
    truncated = inputs.truncated
    if self._q_target == "lambda":
      # No return crosses a truncated transition: the one before it
      # bootstraps fully (lambda 0) from the last state of its episode.
      next_truncated = jnp.concatenate(
          [truncated[1:], jnp.zeros_like(truncated[:1])]
      )
      lambdas = jnp.where(next_truncated, 0.0, lambda_)
      per_sequence = jax.vmap(rlax.lambda_returns, in_axes=1, out_axes=1)
      return per_sequence(
          inputs.rewards, gamma * env_discounts, target_v[1:], lambdas
      )
    actions = inputs.actions[:-1]
    rho = returns.importance_weights(
        target_out["logits"][:-1],
        inputs.behaviour_agent_out["logits"][:-1],
        actions,
    )
    rho = jnp.where(truncated, 0.0, rho)
    return returns.retrace(
        inputs.rewards,
        env_discounts,
        actions,
        rho,
        target_v,
        target_q,
        discount=gamma,
        lambda_=lambda_,
    ).q_target

  def dual_loss(self, duals, target_q, target_logits, online_logits, mask):
    """The part of the MPO loss that depends on the duals (mean over the
    transitions of ``mask``: the agent's loss states).

    Args:
      duals: raw duals (``init_duals``).
      target_q: ``[T, B, A]`` action values of the E-step.
      target_logits: ``[T, B, A]`` prior (target) policy logits.
      online_logits: ``[T, B, A]`` online policy logits (constants here).
      mask: ``[T, B]`` the transitions to average over (None: all).

    Returns:
      ``(loss, (log_q, kl, loss_temperature, loss_alpha))``; per-state
      entries are ``[...]``. The E-step weights depend on ``eta``, so the
      policy cross-entropy contributes to the temperature's gradient as well.
    """
    eta = ml.dual_value(duals["log_temperature"])
    alpha = ml.dual_value(duals["log_alpha"])
    log_q, log_z = ml.exact_e_step(target_q, target_logits, eta)
    loss_policy = ml.categorical_cross_entropy(log_q, online_logits)
    kl = ops.categorical_kl(target_logits, online_logits)
    loss_eta = ml.temperature_loss(eta, log_z, self.hyper_params["epsilon"])
    loss_alpha = ml.alpha_loss(alpha, kl, self.hyper_params["epsilon_policy"])
    total = ops.masked_mean(loss_policy + loss_eta + loss_alpha, mask)
    return total, (log_q, kl, loss_eta, loss_alpha)

  def unroll_meta_net(
      self, inputs: base.Inputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    inputs.check_shapes()
    target_out = self.target_out(inputs, context)
    target_logits = target_out["logits"][:-1]
    target_q = target_out["q"][:-1]
    online_logits = jax.lax.stop_gradient(inputs.agent_out["logits"][:-1])
    (log_q, kl, loss_eta, loss_alpha), new_duals, dual_opt_state = (
        self.update_duals(
            self.dual_loss,
            context,
            target_q,
            target_logits,
            online_logits,
            inputs.mask,
        )
    )
    kl_q = jnp.sum(
        jnp.exp(log_q) * (log_q - jax.nn.log_softmax(target_logits)), axis=-1
    )
    mean = lambda x: ops.masked_mean(x, inputs.mask, context.axis_name)
    meta_out = dict(
        e_step_log_probs=log_q,
        target_logits=target_logits,
        alpha=ml.dual_value(context.rule_state["duals"]["log_alpha"]),
        q_target=jax.lax.stop_gradient(self._q_targets(inputs, target_out)),
        stats=dict(
            self.dual_stats(context, inputs, loss_eta, loss_alpha, kl_q, kl),
            entropy_target=mean(ops.softmax_entropy(target_logits)),
            q_min=mean(jnp.min(target_q, -1)),
            q_max=mean(jnp.max(target_q, -1)),
        ),
    )
    return meta_out, self.next_rule_state(context, new_duals, dual_opt_state)

  # ----------------------------------------------------------------- losses
  def policy_loss(
      self, inputs: base.Inputs, meta_out: base.MetaOut, logits: jax.Array
  ) -> jax.Array:
    del inputs
    return ml.categorical_cross_entropy(
        jax.lax.stop_gradient(meta_out["e_step_log_probs"]), logits
    )

  def agent_loss_no_meta(
      self, inputs: base.Inputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    q_a = ops.at_actions(inputs.agent_out["q"][:-1], inputs.actions[:-1])
    td = meta_out["q_target"] - q_a
    q_loss = 0.5 * jnp.square(td)
    logs = dict(q_loss=q_loss, q_target=meta_out["q_target"], q_td=td)
    return self.hyper_params["q_cost"] * q_loss, logs
