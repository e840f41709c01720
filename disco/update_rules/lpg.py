"""The Learned Policy Gradient rule (LPG; Oh et al. 2020, arXiv 2007.08794) and
its temporally-aware variant (TA-LPG; Jackson et al. 2024).

The agent predicts ``logits [A]`` and a categorical ``y [P]``; the meta-network
(``disco.networks.lpg_net``) reads the rollout backwards and outputs per
transition a scalar ``pi_hat`` and a distribution ``y_hat``; the agent minimises
``-pi_hat * log pi(a_t|s_t) + agent_target_coeff * KL(y_hat || y(s_t))`` (the
paper's ``alpha_y``; GROOVE's KL direction). Meta-training adds the paper's
regularisers with GROOVE's defaults: beta_0 ``policy_entropy_coeff`` and beta_1
``target_entropy_coeff`` (minus the entropies of ``pi`` and ``y`` on the
validation rollout), beta_2 ``policy_l2_coeff`` and beta_3 ``target_l2_coeff``
(mean squares of ``pi_hat`` and ``y_hat`` over the inner steps). TA-LPG
(``net.lifetime_conditioning``) also reads ``n / N`` and ``log N``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from disco import ops
from disco import types
from disco.networks import lpg_net
from disco.update_rules import base

# alpha_y of the paper (and GROOVE's lpg_agent_target_coeff).
LPG_HYPER_PARAMS = dict(agent_target_coeff=0.5)

# GROOVE's meta-regularisers beta_0 .. beta_3 (experiments/parse_args.py).
META_REGULARIZER_COSTS = dict(
    policy_entropy_coeff=5e-2,  # beta_0
    target_entropy_coeff=1e-3,  # beta_1
    policy_l2_coeff=5e-3,  # beta_2
    target_l2_coeff=1e-3,  # beta_3
)


class LPG(base.LifetimeConditioning, base.UpdateRule):
  """The LPG rule (TA-LPG with ``net.lifetime_conditioning``).

  Args:
    hyper_params: overrides of ``LPG_HYPER_PARAMS`` (the agent's loss) and
      ``META_REGULARIZER_COSTS`` (meta-training's regularisers).
    net: meta-network settings (``lpg_net.LPGNetConfig`` or its fields).
    default_lifetime: the lifetime (agent updates) of an agent that
      ``start_lifetime`` was not called for (TA-LPG only).
  """

  default_hyper_params = dict(LPG_HYPER_PARAMS, **META_REGULARIZER_COSTS)

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      net: lpg_net.LPGNetConfig | dict[str, Any] | None = None,
      default_lifetime: int = base.DEFAULT_LIFETIME,
  ):
    super().__init__(hyper_params)
    if isinstance(net, Mapping):
      net = dict(net)
      if "embedding_sizes" in net:
        net["embedding_sizes"] = tuple(net["embedding_sizes"])
      net = lpg_net.LPGNetConfig(**net)
    self.net_config = net or lpg_net.LPGNetConfig()
    self._set_default_lifetime(default_lifetime)
    self._net = lpg_net.make_lpg_net(self.net_config)

  @property
  def lifetime_conditioning(self) -> bool:
    return self.net_config.lifetime_conditioning

  # ------------------------------------------------------------------ specs
  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return dict(
        logits=base.logits_spec(num_actions),
        y=types.ArraySpec((self.net_config.prediction_size,), np.float32),
    )

  # ------------------------------------------------------------------ state
  def _example_args(self) -> tuple[jax.Array, ...]:
    t, b, p = 2, 1, self.net_config.prediction_size
    scalar = jnp.zeros((t, b))
    args = (scalar, scalar, scalar.astype(bool), scalar)
    args += (jnp.zeros((t, b, p)), jnp.zeros((t, b, p)))
    if self.lifetime_conditioning:
      args += (jnp.zeros([2]),)
    return args

  def init_meta_params(self, rng: jax.Array) -> types.MetaParams:
    return self._net.init(rng, *self._example_args())

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    del rng, params
    return self.initial_lifetime_state()

  # ---------------------------------------------------------------- targets
  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    inputs.check_shapes()
    actions = inputs.actions[:-1]
    # The meta-network reads the agent's outputs as data: its targets do not
    # move them (meta-gradients flow through the agent's parameters).
    out = jax.lax.stop_gradient(inputs.agent_out)
    pi_a = ops.at_actions(jax.nn.softmax(out["logits"][:-1]), actions)
    y = jax.nn.softmax(out["y"])
    args = (
        inputs.rewards,
        inputs.is_terminal,
        inputs.episode_ends,
        pi_a,
        y[:-1],
        y[1:],
    )
    rule_state = context.rule_state
    if self.lifetime_conditioning:
      args += (self.lifetime_inputs(rule_state),)
      rule_state = self.counted(rule_state)
    meta_out = self._net.apply(context.meta_params, None, *args)
    del meta_out["core"]
    return meta_out, rule_state

  # ----------------------------------------------------------------- losses
  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    logits = inputs.agent_out["logits"][:-1]
    y_logits = inputs.agent_out["y"][:-1]
    pi_hat, y_hat_logits = meta_out["pi_hat"], meta_out["y_hat_logits"]
    if not backprop:
      pi_hat, y_hat_logits = jax.lax.stop_gradient((pi_hat, y_hat_logits))
    log_pi_a = ops.at_actions(jax.nn.log_softmax(logits), inputs.actions[:-1])
    pi_loss = -pi_hat * log_pi_a
    y_loss = ops.categorical_kl(y_hat_logits, y_logits)
    loss = pi_loss + self.hyper_params["agent_target_coeff"] * y_loss
    logs = dict(
        pi_loss=pi_loss,
        y_loss=y_loss,
        pi_hat=pi_hat,
        pi_hat_abs=jnp.abs(pi_hat),
        entropy=ops.softmax_entropy(logits),
        y_entropy=ops.softmax_entropy(y_logits),
        y_hat_entropy=ops.softmax_entropy(y_hat_logits),
    )
    return loss, {k: jnp.mean(v) for k, v in logs.items()}

  # ------------------------------------------------------------ meta-train
  def meta_regularizer(
      self,
      train_meta_out: base.MetaOut,
      valid_out: types.AgentOuts,
      actions: jax.Array,
  ) -> tuple[jax.Array, types.Logs]:
    del actions
    costs = self.hyper_params
    policy_entropy = jnp.mean(ops.softmax_entropy(valid_out["logits"][:-1]))
    target_entropy = jnp.mean(ops.softmax_entropy(valid_out["y"][:-1]))
    policy_l2 = jnp.mean(jnp.square(train_meta_out["pi_hat"]))
    target_l2 = jnp.mean(jnp.sum(jnp.square(train_meta_out["y_hat"]), -1))
    reg = (
        -costs["policy_entropy_coeff"] * policy_entropy
        - costs["target_entropy_coeff"] * target_entropy
        + costs["policy_l2_coeff"] * policy_l2
        + costs["target_l2_coeff"] * target_l2
    )
    return reg, dict(
        lpg_policy_entropy=policy_entropy,
        lpg_target_entropy=target_entropy,
        lpg_policy_l2=policy_l2,
        lpg_target_l2=target_l2,
    )
