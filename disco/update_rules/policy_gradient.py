"""Policy gradient (REINFORCE with a learned baseline).

Advantages come from ``inputs.value_out`` when the caller supplies value
estimates (e.g. the meta-training value function); otherwise the rule learns
its own scalar baseline head ``v`` and uses lambda-return (V-trace) advantages,
EMA-normalised by default.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from disco import types
from disco.update_rules import base
from disco.value_fns import categorical
from disco.value_fns import ema as ema_lib
from disco.value_fns import losses

POLICY_GRADIENT_HYPER_PARAMS = dict(
    discount_factor=0.997,
    td_lambda=1.0,
    value_cost=0.5,
    entropy_cost=0.01,
    pg_cost=1.0,
)


class PolicyGradient(base.MovingAverageRule):
  """Per transition ``pg_cost * (-log pi(a|s) A) - entropy_cost * H(pi) +
  value_cost * value loss``.

  Args:
    hyper_params: overrides of ``POLICY_GRADIENT_HYPER_PARAMS``.
    normalize_adv: use EMA-normalised advantages.
    moving_average_decay: EMA decay of the advantage statistics.
    moving_average_eps: EMA normalisation epsilon.
  """

  default_hyper_params = POLICY_GRADIENT_HYPER_PARAMS
  supports_continuous_actions = True

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      normalize_adv: bool = True,
      moving_average_decay: float = 0.99,
      moving_average_eps: float = 1e-6,
  ):
    super().__init__(hyper_params, moving_average_decay, moving_average_eps)
    self._normalize_adv = normalize_adv

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return base.policy_value_spec(num_actions)

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    del rng, params
    return dict(adv_ema_state=ema_lib.ema_init())

  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    inputs.check_shapes()
    if inputs.value_out is not None:
      outs, rule_state = inputs.value_out, context.rule_state
    else:
      outs, rule_state = self.normalized_returns(
          inputs, context, categorical.ValueHead(), value_key="v"
      )
    advs = outs.normalized_adv if self._normalize_adv else outs.adv
    meta_out = dict(pi=advs, tds=outs.td, raw_advs=outs.adv)
    return meta_out, rule_state

  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    logits = inputs.agent_out["logits"][:-1]
    policy = inputs.action_policy
    pg_loss = losses.policy_gradient_loss(
        logits,
        inputs.actions[:-1],
        meta_out["pi"],
        backprop=backprop,
        policy=policy,
    )
    entropy = policy.entropy(logits)
    hyper_params = self.hyper_params
    loss = (
        hyper_params["pg_cost"] * pg_loss
        - hyper_params["entropy_cost"] * entropy
    )
    return loss, dict(
        entropy=jnp.mean(entropy),
        pg_advs=jnp.mean(meta_out["pi"]),
        raw_advs=jnp.mean(meta_out["raw_advs"]),
    )

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    value_loss = losses.value_loss_from_td(
        inputs.agent_out["v"][:-1], jax.lax.stop_gradient(meta_out["tds"])
    )
    return self.hyper_params["value_cost"] * value_loss, dict(
        value_loss=jnp.mean(value_loss)
    )
