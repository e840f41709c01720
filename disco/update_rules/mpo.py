"""Maximum a-posteriori Policy Optimisation (MPO), for discrete and continuous
actions.

Discrete: the agent predicts ``logits`` and ``q`` ``[A]``; a Polyak-averaged
target network gives the prior ``pi_target`` and ``Q_target``. E-step (exact):
``q(a|s) ∝ pi_target(a|s) exp(Q_target(s, a) / eta)``, the dual ``eta`` trained
on ``eta * (epsilon + mean_s log sum_a pi_target exp(Q / eta))``. M-step:
minimise ``CE(q, pi_online) + sg(alpha) * KL(pi_target || pi_online)``, the dual
``alpha`` trained on ``alpha * (epsilon_policy - sg(KL))``. The duals are
updated in ``unroll_meta_net``; the agent's loss uses their pre-update values.
``q`` regresses on lambda-return or Retrace targets bootstrapping on ``V(s) =
sum_a pi_target(a|s) Q_target(s, a)``.

Continuous (a Gaussian, as Acme's and Stoix's MPO): ``Q(s, a)`` is a per-action
output computed at given actions; the E-step weighs ``num_samples`` actions
``a_n ~ pi_target`` by ``softmax_n(Q_target(s, a_n) / eta)``; the M-step is
decoupled (``mpo_common``); ``V(s) = mean_n Q_target(s, a_n)``.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from disco import ops
from disco import types
from disco.update_rules import base
from disco.update_rules import mpo_common as ml
from disco.value_fns import returns

# Discrete MPO's published defaults, adapted to a single shared network;
# epsilon_mean and epsilon_stddev bound continuous MPO's decoupled M-step.
MPO_HYPER_PARAMS = dict(
    discount_factor=0.99,
    td_lambda=0.95,
    epsilon=0.01,
    epsilon_policy=1e-3,
    epsilon_mean=1e-3,
    epsilon_stddev=1e-5,
    target_update_tau=0.005,
    q_cost=1.0,
)

Q_TARGETS = ("lambda", "retrace")


# ------------------------------------------------------------------ rule
class MPO(ml.DualRule):
  """MPO: exact, prior-weighted E-step for discrete actions; sampled E-step and
  decoupled Gaussian M-step for continuous ones.

  Args:
    hyper_params: overrides of ``MPO_HYPER_PARAMS``.
    q_target: ``"lambda"`` (lambda-returns bootstrapping on the target network's
      ``V``) or ``"retrace"`` (Retrace with importance weights
      ``pi_target / mu`` clipped at 1).
    init_log_temperature, init_log_alpha, dual_lr, dual_max_grad_norm: the duals
      (see ``mpo_common.DualRule``).
    num_samples: continuous actions: actions sampled from the target policy per
      state for the E-step and ``V``.
    per_dim_constraining: continuous actions: one KL bound per action dimension
      (else one on their sum).
    init_log_alpha_stddev: continuous actions: initial raw dual of the standard
      deviation's bound (``init_log_alpha`` is the mean's).
  """

  default_hyper_params = MPO_HYPER_PARAMS
  # The critic's loss reads q at the taken actions only.
  model_losses_read_taken_actions = True

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      q_target: str = "lambda",
      init_log_temperature: float = 3.0,
      init_log_alpha: float = 3.0,
      dual_lr: float = 1e-2,
      dual_max_grad_norm: float = 40.0,
      num_samples: int = 20,
      per_dim_constraining: bool = True,
      init_log_alpha_stddev: float = 3.0,
  ):
    if q_target not in Q_TARGETS:
      raise ValueError(
          f"Unknown q_target {q_target!r}; use one of {', '.join(Q_TARGETS)}."
      )
    if int(num_samples) < 1:
      raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    super().__init__(
        hyper_params,
        init_log_temperature,
        init_log_alpha,
        ml.dual_optimizer(dual_lr, dual_max_grad_norm),
        init_log_alpha_stddev=init_log_alpha_stddev,
        per_dim_constraining=per_dim_constraining,
    )
    self._q_target = q_target
    self.num_samples = int(num_samples)

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    if self.gaussian is not None:
      return dict(logits=base.logits_spec(num_actions))
    return dict(
        logits=base.logits_spec(num_actions),
        q=types.ArraySpec((num_actions,), np.float32),
    )

  def model_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    """Continuous actions: ``q``, the critic ``Q(s, a)`` at given actions."""
    del num_actions
    if self.gaussian is None:
      return {}
    return dict(q=types.ArraySpec((), np.float32))

  # ---------------------------------------------------------------- targets
  def _q_targets(
      self,
      inputs: types.UpdateRuleInputs,
      target_logits: jax.Array,
      target_v: jax.Array,
      target_q: jax.Array,
      table_actions: jax.Array,
  ) -> jax.Array:
    """``[T, B]`` targets for ``Q(s_t, a_t)`` from the target network's
    ``[T+1, B, P]`` parameters, ``[T+1, B]`` values and ``[T+1, B, A']`` action
    values (Retrace reads column ``table_actions`` ``[T, B]``)."""
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
      import rlax  # pylint: disable=g-import-not-at-top

      per_sequence = jax.vmap(rlax.lambda_returns, in_axes=1, out_axes=1)
      return per_sequence(
          inputs.rewards, gamma * env_discounts, target_v[1:], lambdas
      )
    rho = returns.importance_weights(
        target_logits[:-1],
        inputs.behaviour_agent_out["logits"][:-1],
        inputs.actions[:-1],
        inputs.policy,
    )
    rho = jnp.where(truncated, 0.0, rho)
    return returns.retrace(
        inputs.rewards,
        env_discounts,
        table_actions,
        rho,
        target_v,
        target_q,
        discount=gamma,
        lambda_=lambda_,
    ).q_target

  def dual_loss(self, duals, target_q, target_logits, online_logits, mask):
    """The duals' part of the discrete MPO loss, averaged over ``mask``; the
    policy cross-entropy counts too (the E-step weights depend on ``eta``).

    Args:
      duals: raw duals (``init_duals``).
      target_q: ``[T, B, A]`` action values of the E-step.
      target_logits: ``[T, B, A]`` prior (target) policy logits.
      online_logits: ``[T, B, A]`` online policy logits (constants here).
      mask: ``[T, B]`` transitions to average over (None: all).

    Returns:
      ``(loss, (log_q, kl, loss_temperature, loss_alpha))``.
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
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    inputs.check_shapes()
    if self.checked_gaussian(inputs) is not None:
      return self._gaussian_unroll(inputs, context)
    target_out = self.target_out(inputs, context)
    target_q_all = target_out["q"]
    target_v = jnp.sum(
        jax.nn.softmax(target_out["logits"]) * target_q_all, axis=-1
    )
    q_target = self._q_targets(
        inputs,
        target_out["logits"],
        target_v,
        target_q_all,
        inputs.actions[:-1],
    )
    target_logits = target_out["logits"][:-1]
    target_q = target_q_all[:-1]
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
        q_target=jax.lax.stop_gradient(q_target),
        stats=dict(
            self.dual_stats(context, inputs, loss_eta, loss_alpha, kl_q, kl),
            entropy_target=mean(ops.softmax_entropy(target_logits)),
            q_min=mean(jnp.min(target_q, -1)),
            q_max=mean(jnp.max(target_q, -1)),
        ),
    )
    return meta_out, self.next_rule_state(context, new_duals, dual_opt_state)

  def _gaussian_unroll(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    """``unroll_meta_net`` for continuous actions (``num_samples`` target-policy
    actions per state)."""
    target_logits = self.target_out(inputs, context)["logits"]
    t1, b, size = target_logits.shape
    prior = jnp.broadcast_to(
        target_logits[:, :, None], (t1, b, self.num_samples, size)
    )
    sampled = jax.lax.stop_gradient(self.gaussian.sample(context.rng, prior))
    # Column 0: the taken action; then the N samples.
    query = jnp.concatenate([inputs.actions[:, :, None], sampled], axis=2)
    target_params = context.rule_state["target_params"]
    q_all = jax.lax.stop_gradient(
        context.unroll_fn(target_params, inputs.observations, query)["q"]
    )
    q_sampled = q_all[..., 1:]  # [T+1, B, N]
    q_target = self._q_targets(
        inputs,
        target_logits,
        jnp.mean(q_sampled, axis=-1),
        q_all[..., :1],
        jnp.zeros(inputs.rewards.shape, jnp.int32),
    )
    meta_out, rule_state = self.gaussian_e_step(
        inputs, context, q_sampled[:-1], target_logits[:-1]
    )
    mean = lambda x: ops.masked_mean(x, inputs.mask, context.axis_name)
    meta_out["stats"].update(
        q_min=mean(jnp.min(q_sampled[:-1], -1)),
        q_max=mean(jnp.max(q_sampled[:-1], -1)),
    )
    meta_out.update(
        sampled_actions=sampled[:-1], q_target=jax.lax.stop_gradient(q_target)
    )
    return meta_out, rule_state

  # ----------------------------------------------------------------- losses
  def policy_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      logits: jax.Array,
  ) -> jax.Array:
    del inputs
    return ml.categorical_cross_entropy(
        jax.lax.stop_gradient(meta_out["e_step_log_probs"]), logits
    )

  def sampled_targets(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> tuple[jax.Array, jax.Array]:
    del inputs
    return meta_out["sampled_actions"], meta_out["e_step_weights"]

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    if "q" not in inputs.agent_out:
      raise ValueError(
          "MPO's critic loss reads the network's q at the taken actions: "
          "unroll the network with them (Agent.unroll(params, observations, "
          "actions), as Agent.learner_update does for this rule)."
      )
    q = inputs.agent_out["q"][:-1]
    if self.checked_gaussian(inputs) is None:
      q = ops.at_actions(q, inputs.actions[:-1])
    td = meta_out["q_target"] - q
    q_loss = 0.5 * jnp.square(td)
    logs = dict(q_loss=q_loss, q_target=meta_out["q_target"], q_td=td)
    return self.hyper_params["q_cost"] * q_loss, logs
