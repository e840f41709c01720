"""Actor-critic: V-trace advantages for the policy, TD for the value head."""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.update_rules import base
from disco.value_fns import ema as ema_lib
from disco.value_fns import losses
from disco.value_fns import returns

# Hyper-parameters of the published actor-critic setting.
ACTOR_CRITIC_HYPER_PARAMS = dict(
    discount_factor=0.997,
    vtrace_lambda=0.95,
    entropy_cost=0.2,
    pg_cost=1.0,
    value_cost=0.5,
)


class ActorCritic(base.UpdateRule):
  """Policy gradient with a learned (scalar or categorical) state value.

  Args:
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

  def __init__(
      self,
      categorical_value: bool = False,
      num_bins: int = 601,
      max_abs_value: float = 300.0,
      nonlinear_value_transform: bool = False,
      normalize_adv: bool = False,
      normalize_td: bool = False,
      moving_average_decay: float = 0.99,
      moving_average_eps: float = 1e-6,
  ):
    if normalize_td and categorical_value:
      raise ValueError(
          "normalize_td needs a scalar value head: set categorical_value=False "
          "or normalize_td=False.")
    self._categorical = categorical_value
    self._num_bins = num_bins
    self._max_abs_value = max_abs_value
    self._nonlinear = nonlinear_value_transform
    self._normalize_adv = normalize_adv
    self._normalize_td = normalize_td
    self._ema_decay = moving_average_decay
    self._ema_eps = moving_average_eps

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    bins = self._num_bins if self._categorical else 1
    return dict(logits=base.logits_spec(num_actions),
                v=types.ArraySpec((bins,), np.float32))

  def init_meta_state(self, rng, params):
    del rng, params
    return dict(adv_ema_state=ema_lib.ema_init(),
                td_ema_state=ema_lib.ema_init())

  def _value_kwargs(self):
    return dict(nonlinear_transform=self._nonlinear,
                categorical=self._categorical,
                max_abs_value=self._max_abs_value)

  def unroll_meta_net(self, meta_params, params, meta_state, inputs,
                      hyper_params, unroll_fn, rng, axis_name=None):
    del meta_params, params, unroll_fn, rng
    value_outs, adv_ema, td_ema = returns.value_outs(
        rewards=inputs.rewards,
        env_discounts=1.0 - inputs.is_terminal,
        actions=inputs.actions,
        pi_logits=inputs.agent_out["logits"],
        mu_logits=inputs.behaviour_agent_out["logits"],
        value_net_out=inputs.agent_out["v"],
        discount=hyper_params["discount_factor"],
        lambda_=hyper_params["vtrace_lambda"],
        drop_last=False,
        adv_ema_state=meta_state["adv_ema_state"],
        td_ema_state=meta_state["td_ema_state"],
        ema_decay=self._ema_decay,
        ema_eps=self._ema_eps,
        axis_name=axis_name,
        **self._value_kwargs())
    meta_out = dict(
        raw_advs=value_outs.adv,
        normalized_advs=value_outs.normalized_adv,
        values=value_outs.value,
        tds=value_outs.td,
        normalized_tds=value_outs.normalized_td)
    new_state = dict(meta_state, adv_ema_state=adv_ema, td_ema_state=td_ema)
    return meta_out, new_state

  def agent_loss(self, inputs, meta_out, hyper_params, backprop):
    del backprop  # Nothing here depends on meta-parameters.
    logits = inputs.agent_out["logits"][:-1]
    advs = meta_out["normalized_advs" if self._normalize_adv else "raw_advs"]
    tds = meta_out["normalized_tds" if self._normalize_td else "tds"]
    value_loss = losses.value_loss_from_td(
        inputs.agent_out["v"][:-1], jax.lax.stop_gradient(tds),
        **self._value_kwargs())
    entropy = distrax.Softmax(logits).entropy()
    pg_loss = losses.policy_gradient_loss(
        logits, inputs.actions[:-1], advs, backprop=False)
    loss = (hyper_params["pg_cost"] * pg_loss
            + hyper_params["value_cost"] * value_loss
            - hyper_params["entropy_cost"] * entropy)
    logs = dict(
        logits=jnp.mean(logits),
        entropy=jnp.mean(entropy),
        pg_advs=jnp.mean(advs),
        raw_advs=jnp.mean(meta_out["raw_advs"]),
        avg_value=jnp.mean(meta_out["values"]))
    return loss, logs
