"""The meta-training value function: a state-value network (an agent network
named ``value_fn``, values in signed-hyperbolic space), trained beside the
agent, whose normalised advantages drive the outer policy-gradient loss. As the
published meta-training code (for parity), it pairs transition ``t`` with the
reward and discount stored at step ``t``, one step earlier than the update
rules."""

from __future__ import annotations

import dataclasses

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import optimizers
from disco import types
from disco.networks import agent_nets
from disco.value_fns import categorical
from disco.value_fns import ema as ema_lib
from disco.value_fns import losses
from disco.value_fns import returns

# Scalar values predicted in signed-hyperbolic space.
_HEAD = categorical.ValueHead(nonlinear_transform=True)


@dataclasses.dataclass(frozen=True)
class ValueFnConfig:
  """Settings of the meta-training value function (published defaults);
  ``obs_embedding`` as ``agent_nets.NetConfig``'s (``"none"`` or ``"one_hot"``).
  """

  dense: tuple[int, ...] = (256, 256)
  head_w_init_std: float | None = 1e-2
  obs_embedding: str = "none"
  learning_rate: float = 1e-3
  max_abs_update: float = 1.0
  discount_factor: float = 0.99
  td_lambda: float = 0.96
  outer_value_cost: float = 1.0
  ema_decay: float = 0.99
  ema_eps: float = 1e-6


@chex.dataclass(frozen=True)
class ValueState:
  params: types.Params
  opt_state: types.ArrayTree
  adv_ema_state: types.EmaState
  td_ema_state: types.EmaState


class ValueFunction:
  """Value network, optimiser and EMA statistics (pure methods).

  Args:
    config: its settings.
    axis_name: named axis to average gradients and statistics over, if any.
    observation_spec: checks the network against it and lets it take state
      indices (``obs_embedding="one_hot"``); None: not checked.

  Raises:
    ValueError: bad network settings, or observations the network cannot take.
  """

  def __init__(
      self,
      config: ValueFnConfig = ValueFnConfig(),
      axis_name: str | None = None,
      observation_spec: specs.Array | None = None,
  ):
    self.config = config
    self.axis_name = axis_name
    net_config = agent_nets.NetConfig(
        dense=tuple(config.dense),
        head_w_init_std=config.head_w_init_std,
        obs_embedding=config.obs_embedding,
    )
    if observation_spec is not None:
      net_config = net_config.with_observation(observation_spec, "value_fn")
    self.net_config = net_config
    self._net = agent_nets.make_network(
        net_config,
        num_actions=1,
        flat_spec={"value": types.ArraySpec((1,), np.float32)},
        name="value_fn",
    )
    self._optimizer = optimizers.agent_optimizer(
        config.learning_rate, config.max_abs_update
    )

  def with_observation(self, observation_spec: specs.Array) -> ValueFunction:
    """This value function for one environment's observations (each group gets
    its own)."""
    return ValueFunction(self.config, self.axis_name, observation_spec)

  def initial_state(
      self, rng: jax.Array, observation: types.ArrayTree
  ) -> ValueState:
    """``observation`` is one unbatched example."""
    params = self._net.init(
        rng, jax.tree.map(lambda x: jnp.asarray(x)[None], observation)
    )
    return ValueState(
        params=params,
        opt_state=self._optimizer.init(params),
        adv_ema_state=ema_lib.ema_init(),
        td_ema_state=ema_lib.ema_init(),
    )

  def values(
      self, params: types.Params, observations: types.ArrayTree
  ) -> jax.Array:
    """``[T+1, B, ...]`` observations -> raw outputs ``[T+1, B, 1]``."""
    return agent_nets.unroll(self._net.apply, params, observations)["value"]

  def value_outs(
      self,
      state: ValueState,
      rollout: types.ActorRollout,
      pi_logits: jax.Array,
      params: types.Params | None = None,
  ) -> tuple[types.ValueOuts, jax.Array, types.EmaState, types.EmaState]:
    """V-trace estimates on an actor rollout for the policy ``pi_logits``
    ``[T+1, B, A]``; returns ``(value_outs, raw outputs, adv EMA, td EMA)``."""
    c = self.config
    net_out = self.values(
        state.params if params is None else params, rollout.observations
    )
    values, _ = returns.decode_values(_HEAD, pi_logits, value_net_out=net_out)
    # Transition t with the reward and discount stored at step t (see the
    # module docstring): the last ones are dropped, not the first.
    outs = returns.estimate(
        rewards=rollout.rewards[:-1],
        env_discounts=rollout.discounts[:-1],
        actions=rollout.actions,
        pi_logits=pi_logits,
        mu_logits=rollout.logits,
        values=values,
        discount=c.discount_factor,
        lambda_=c.td_lambda,
        truncated=jnp.logical_and(
            rollout.is_last[:-1], rollout.discounts[:-1] > 0
        ),
    )
    outs, adv_ema, td_ema = returns.normalize(
        outs,
        state.adv_ema_state,
        state.td_ema_state,
        ema_decay=c.ema_decay,
        ema_eps=c.ema_eps,
        axis_name=self.axis_name,
    )
    return outs, net_out, adv_ema, td_ema

  def update(
      self, state: ValueState, rollout: types.ActorRollout, pi_logits: jax.Array
  ) -> tuple[ValueState, types.Logs]:
    """One optimiser step on the (normalised) TD loss of a rollout."""

    def loss_fn(params):
      outs, net_out, adv_ema, td_ema = self.value_outs(
          state, rollout, pi_logits, params
      )
      # As published, the loss moves the raw (squashed) output by the
      # normalised TD error.
      per_step = losses.value_loss_from_td(
          net_out[:-1], jax.lax.stop_gradient(outs.normalized_td)
      )
      loss = (self.config.outer_value_cost * per_step).mean()
      return loss, (outs, adv_ema, td_ema)

    (loss, (outs, adv_ema, td_ema)), grads = jax.value_and_grad(
        loss_fn, has_aux=True
    )(state.params)
    if self.axis_name is not None:
      grads = jax.lax.pmean(grads, self.axis_name)
    updates, opt_state = self._optimizer.update(
        grads, state.opt_state, state.params
    )
    new_state = ValueState(
        params=optax.apply_updates(state.params, updates),
        opt_state=opt_state,
        adv_ema_state=adv_ema,
        td_ema_state=td_ema,
    )
    return new_state, dict(
        value_loss=loss,
        value_td=outs.td.mean(),
        value_normalized_td=outs.normalized_td.mean(),
    )
