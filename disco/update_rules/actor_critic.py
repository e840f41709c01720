"""Actor-critic: V-trace advantages for the policy, TD for the value head."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from disco import types
from disco.update_rules import base
from disco.value_fns import categorical
from disco.value_fns import ema as ema_lib
from disco.value_fns import losses

# Hyper-parameters of the published actor-critic setting.
ACTOR_CRITIC_HYPER_PARAMS = dict(
    base.PUBLISHED_RETURNS, entropy_cost=0.2, pg_cost=1.0, value_cost=0.5
)


class ActorCritic(base.MovingAverageRule):
  """Policy gradient with a learned (scalar or categorical) state value.

  The defaults are the published actor-critic baseline's: a categorical value
  over 601 bins in signed-hyperbolic space, raw advantages and TD errors.

  Args:
    hyper_params: overrides of ``ACTOR_CRITIC_HYPER_PARAMS``.
    categorical_value: value head outputs logits over ``num_bins`` bins.
    num_bins: bins of the categorical value.
    max_abs_value: half-width of the categorical support.
    nonlinear_value_transform: predict signed-hyperbolically squashed values.
    normalize_adv: use EMA-normalised advantages in the policy gradient.
    normalize_td: regress the value onto EMA-scaled TD errors (scalar values
      only).
    moving_average_decay: EMA decay.
    moving_average_eps: EMA normalisation epsilon.
  """

  default_hyper_params = ACTOR_CRITIC_HYPER_PARAMS
  supports_continuous_actions = True

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      categorical_value: bool = True,
      num_bins: int = 601,
      max_abs_value: float = 300.0,
      nonlinear_value_transform: bool = True,
      normalize_adv: bool = False,
      normalize_td: bool = False,
      moving_average_decay: float = 0.99,
      moving_average_eps: float = 1e-6,
  ):
    super().__init__(hyper_params, moving_average_decay, moving_average_eps)
    if normalize_td and categorical_value:
      raise ValueError(
          "normalize_td needs a scalar value head: set categorical_value=False "
          "or normalize_td=False."
      )
    self._num_bins = num_bins if categorical_value else 1
    self._head = categorical.ValueHead(
        categorical=categorical_value,
        max_abs_value=max_abs_value,
        nonlinear_transform=nonlinear_value_transform,
    )
    self._normalize_adv = normalize_adv
    self._normalize_td = normalize_td

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return base.policy_value_spec(num_actions, self._num_bins)

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    del rng, params
    return dict(
        adv_ema_state=ema_lib.ema_init(), td_ema_state=ema_lib.ema_init()
    )

  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    inputs.check_shapes()
    outs, rule_state = self.normalized_returns(
        inputs, context, self._head, value_key="v"
    )
    meta_out = dict(
        advs=outs.normalized_adv if self._normalize_adv else outs.adv,
        tds=outs.normalized_td if self._normalize_td else outs.td,
        raw_advs=outs.adv,
        values=outs.value,
    )
    return meta_out, rule_state

  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    del backprop  # No meta-parameters; targets: ``loss_target``.
    inputs.check_shapes()
    hyper_params = self.hyper_params
    logits = inputs.agent_out["logits"][:-1]
    advs, tds = meta_out["advs"], meta_out["tds"]
    value_loss = losses.value_loss_from_td(
        inputs.agent_out["v"][:-1],
        self.loss_target(tds),
        self._head,
        backprop=self.hyper_param_gradients,
    )
    policy = inputs.action_policy
    entropy = policy.entropy(logits)
    pg_loss = losses.policy_gradient_loss(
        logits,
        inputs.actions[:-1],
        advs,
        backprop=self.hyper_param_gradients,
        policy=policy,
    )
    loss = (
        hyper_params["pg_cost"] * pg_loss
        + hyper_params["value_cost"] * value_loss
        - hyper_params["entropy_cost"] * entropy
    )
    logs = dict(
        logits=jnp.mean(logits),
        entropy=jnp.mean(entropy),
        pg_advs=jnp.mean(advs),
        raw_advs=jnp.mean(meta_out["raw_advs"]),
        avg_value=jnp.mean(meta_out["values"]),
    )
    return loss, logs
