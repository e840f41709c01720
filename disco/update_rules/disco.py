"""The Disco update rule: an LSTM meta-network sets the agent's targets.

The agent predicts a policy (``logits``), a per-state ``y`` and a per-action
``z`` (both ``prediction_size``), a one-step policy prediction ``aux_pi`` per
action, and a categorical action value ``q``. The meta-network reads the rollout
(with Retrace values from a Polyak-averaged target network) and outputs targets
``pi``, ``y``, ``z``, which the agent fits by KL; ``q``'s value loss never
carries meta-gradients.

With ``action_model=False`` the agent is flat: no ``z`` or ``aux_pi``, and ``q``
is a linear ``[A, bins]`` head on the torso; its meta-network must read no ``z``
(e.g. ``input_option="flat"``, as a distilled student, ``disco.distillation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from disco import ops
from disco import types
from disco.networks import meta_nets
from disco.update_rules import base
from disco.value_fns import categorical
from disco.value_fns import ema as ema_lib
from disco.value_fns import losses

# The published Disco103 setting (its ``value_fn_td_lambda`` is ``td_lambda``;
# its ``target_params_coeff=0.9`` is ``target_update_tau = 1 - 0.9``).
DISCO103_HYPER_PARAMS = dict(
    base.PUBLISHED_RETURNS,
    pi_cost=1.0,
    y_cost=1.0,
    z_cost=1.0,
    value_cost=0.2,
    aux_policy_cost=1.0,
    target_update_tau=0.1,
)


# Outer-loss regularisers of the published meta-training setup.
META_REGULARIZER_COSTS = dict(
    prediction_entropy_cost=1e-3,  # entropy of y and z on validation data
    target_mean_square_cost=1e-3,  # squared means of the pi, y, z targets
    target_policy_kl_cost=1e-2,  # KL from the target network's policy to pi
)


class Disco(base.LifetimeConditioning, base.MovingAverageRule):
  """Discovered update rule driven by a meta-network (e.g. Disco103).

  Args:
    hyper_params: overrides of ``DISCO103_HYPER_PARAMS`` (the agent's losses)
      and ``META_REGULARIZER_COSTS`` (meta-training's regularisers).
    net: meta-network settings.
    max_abs_value: half-width of the categorical ``q`` support.
    num_bins: number of ``q`` bins.
    moving_average_decay: EMA decay for advantage / TD normalisation.
    moving_average_eps: EMA normalisation epsilon.
    default_lifetime: lifetime (agent updates) assumed when ``start_lifetime``
      was not called (``net.lifetime_conditioning`` only).
    action_model: whether the agent has the action-conditional model (the
      published agent); False: a flat agent (no z or aux_pi, q from a linear
      head) whose meta-network reads no z (e.g. net.input_option='flat').

  Raises:
    ValueError: a flat agent whose meta-network reads ``z``.
  """

  # z, aux_pi and q enter the losses at the taken action only.
  model_losses_read_taken_actions = True
  default_hyper_params = dict(DISCO103_HYPER_PARAMS, **META_REGULARIZER_COSTS)

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      net: meta_nets.MetaNetConfig | dict[str, Any] | None = None,
      max_abs_value: float = 300.0,
      num_bins: int = 601,
      moving_average_decay: float = 0.99,
      moving_average_eps: float = 1e-6,
      default_lifetime: int = base.DEFAULT_LIFETIME,
      action_model: bool = True,
  ):
    super().__init__(hyper_params, moving_average_decay, moving_average_eps)
    if isinstance(net, dict):
      net = meta_nets.MetaNetConfig(**net)
    self.net_config = net or meta_nets.MetaNetConfig()
    self.action_model = bool(action_model)
    needed = meta_nets.z_sources(self.net_config.resolved_input_option())
    if needed and not self.action_model:
      raise ValueError(
          f"action_model=False but the meta-network reads {needed}, which "
          "only the action-conditional model gives: use "
          "net.input_option='flat' or action_model=True."
      )
    self._q_head = categorical.ValueHead(
        categorical=True, max_abs_value=max_abs_value, nonlinear_transform=True
    )
    self._num_bins = num_bins
    self._meta_net = meta_nets.make_meta_net(
        self.net_config, predicts_z=self.action_model
    )
    self._set_default_lifetime(default_lifetime)

  @property
  def target_heads(self) -> tuple[str, ...]:
    """The heads whose targets the agent learns (no z for a flat agent)."""
    return ("pi", "y", "z") if self.action_model else ("pi", "y")

  @property
  def lifetime_conditioning(self) -> bool:
    return self.net_config.lifetime_conditioning

  # ------------------------------------------------------------------ specs
  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    size = self.net_config.prediction_size
    spec = dict(
        logits=base.logits_spec(num_actions),
        y=types.ArraySpec((size,), np.float32),
    )
    if not self.action_model:
      spec["q"] = types.ArraySpec((num_actions, self._num_bins), np.float32)
    return spec

  def model_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    if not self.action_model:
      return {}
    size = self.net_config.prediction_size
    return dict(
        z=types.ArraySpec((size,), np.float32),
        aux_pi=base.logits_spec(num_actions),
        q=types.ArraySpec((self._num_bins,), np.float32),
    )

  # ------------------------------------------------------------------ state
  def _example_inputs(self) -> types.UpdateRuleInputs:
    """Small all-zero inputs (T=2, B=1, A=3) to initialise the meta-net."""
    t, b, num_actions = 2, 1, 3
    agent_out = {
        k: jnp.zeros((t + 1, b) + tuple(s.shape))
        for k, s in self.agent_output_spec(num_actions).items()
    }
    scalar = jnp.zeros((t + 1, b))
    per_action = jnp.zeros((t + 1, b, num_actions))
    return types.UpdateRuleInputs(
        observations=jnp.zeros((t + 1, b)),
        actions=jnp.zeros((t + 1, b), jnp.int32),
        rewards=jnp.zeros((t, b)),
        is_terminal=jnp.zeros((t, b), bool),
        agent_out=agent_out,
        behaviour_agent_out=agent_out,
        extra_from_rule=dict(
            v_scalar=scalar,
            adv=scalar[:-1],
            normalized_adv=scalar[:-1],
            q=per_action,
            qv_adv=per_action,
            normalized_qv_adv=per_action,
            target_out=agent_out,
            **self._lifetime_extra(None, (t, b)),
        ),
    )

  def _lifetime_extra(
      self, rule_state: types.RuleState | None, lead_shape: tuple[int, int]
  ) -> dict[str, jax.Array]:
    """``extra_from_rule``'s lifetime entry ``[T, B, 2]`` (zeros for None); none
    unless conditioning."""
    if not self.lifetime_conditioning:
      return {}
    x = (
        jnp.zeros([2])
        if rule_state is None
        else self.lifetime_inputs(rule_state)
    )
    return {meta_nets.LIFETIME_KEY: jnp.broadcast_to(x, lead_shape + (2,))}

  def init_meta_params(self, rng: jax.Array) -> types.MetaParams:
    params, _ = self._meta_net.init(rng, self._example_inputs())
    return params

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    _, rnn_state = jax.eval_shape(
        self._meta_net.init, rng, self._example_inputs()
    )
    rnn_state = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), rnn_state)
    return dict(
        rnn_state=rnn_state,
        adv_ema_state=ema_lib.ema_init(),
        td_ema_state=ema_lib.ema_init(),
        target_params=params,
        **self.initial_lifetime_state(),
    )

  # ---------------------------------------------------------------- targets
  def meta_net_inputs(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[types.UpdateRuleInputs, Any, types.RuleState]:
    """The meta-network's view of a rollout: ``inputs`` with the target
    network's outputs and the Retrace values in ``extra_from_rule``; also
    those values and the rule state with its EMAs advanced."""
    inputs.check_shapes()
    target_out = context.unroll_fn(
        context.rule_state["target_params"], inputs.observations
    )
    # Retrace on the categorical q head, bootstrapping from the target
    # network's q (its state values weighted by the online policy).
    value_outs, rule_state = self.normalized_returns(
        inputs,
        context,
        self._q_head,
        normalize_q_td=True,
        q_key="q",
        target_out=target_out,
    )
    meta_inputs = inputs.replace(
        extra_from_rule=dict(
            v_scalar=value_outs.value,
            adv=value_outs.adv,
            normalized_adv=value_outs.normalized_adv,
            q=value_outs.target_q_value,
            qv_adv=value_outs.qv_adv,
            normalized_qv_adv=value_outs.normalized_qv_adv,
            target_out=target_out,
            **self._lifetime_extra(rule_state, inputs.rewards.shape),
        )
    )
    return meta_inputs, value_outs, rule_state

  def apply_meta_net(
      self,
      meta_params: types.MetaParams,
      rnn_state: Any,
      meta_inputs: types.UpdateRuleInputs,
      axis_name: str | None = None,
  ) -> tuple[dict[str, jax.Array], Any]:
    """The meta-network alone: ``{pi [T, B, A], y, z [T, B, P],
    meta_input_emb [T, B, 1]}`` and its new per-lifetime state."""
    return self._meta_net.apply(
        meta_params, rnn_state, None, meta_inputs, axis_name
    )

  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    meta_inputs, value_outs, rule_state = self.meta_net_inputs(inputs, context)
    target_out = meta_inputs.extra_from_rule["target_out"]
    meta_out, rnn_state = self.apply_meta_net(
        context.meta_params,
        rule_state["rnn_state"],
        meta_inputs,
        context.axis_name,
    )
    meta_out = dict(
        meta_out,
        q_target=value_outs.q_target,
        q_value=value_outs.q_value,
        q_td=value_outs.q_td,
        normalized_q_td=value_outs.normalized_q_td,
        target_out=target_out,
    )
    new_state = dict(
        rule_state,
        rnn_state=rnn_state,
        target_params=context.moved_target_params(
            self.hyper_params["target_update_tau"]
        ),
    )
    if self.lifetime_conditioning:
      new_state = self.counted(new_state)
    return meta_out, new_state

  # ----------------------------------------------------------------- losses
  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    hyper_params = self.hyper_params
    actions = inputs.actions[:-1]
    out = jax.tree.map(lambda x: x[:-1], inputs.agent_out)
    pi_hat, y_hat = meta_out["pi"], meta_out["y"]
    if not backprop:
      pi_hat, y_hat = jax.lax.stop_gradient((pi_hat, y_hat))
    pi_loss = ops.categorical_kl(pi_hat, out["logits"])
    y_loss = ops.categorical_kl(y_hat, out["y"])
    loss = hyper_params["pi_cost"] * pi_loss + hyper_params["y_cost"] * y_loss
    logs = dict(
        logits=out["logits"],
        y=out["y"],
        entropy=ops.softmax_entropy(out["logits"]),
        y_entropy=ops.softmax_entropy(out["y"]),
        pi_loss=pi_loss,
        pi_hat=pi_hat,
        y_hat=y_hat,
        pi_hat_entropy=ops.softmax_entropy(pi_hat),
    )
    if self.action_model:
      z_a = ops.at_actions(out["z"], actions)
      z_hat = meta_out["z"]
      if not backprop:
        z_hat = jax.lax.stop_gradient(z_hat)
      # One-step policy prediction: aux_pi(s_t, a_t) predicts pi(s_{t+1}).
      aux_pi_a = ops.at_actions(out["aux_pi"], actions)
      next_logits = jax.lax.stop_gradient(inputs.agent_out["logits"][1:])
      aux_loss = ops.categorical_kl(next_logits, aux_pi_a) * (
          1.0 - inputs.is_terminal
      )
      loss += (
          hyper_params["z_cost"] * ops.categorical_kl(z_hat, z_a)
          + hyper_params["aux_policy_cost"] * aux_loss
      )
      logs.update(
          z=out["z"],
          z_entropy=ops.softmax_entropy(z_a),
          aux_kl_loss=aux_loss,
          z_hat=z_hat,
          aux_policy_entropy=ops.softmax_entropy(aux_pi_a),
          aux_target_entropy=ops.softmax_entropy(next_logits),
      )
    return loss, {k: jnp.mean(v) for k, v in logs.items()}

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    q_a = ops.at_actions(inputs.agent_out["q"][:-1], inputs.actions[:-1])
    q_loss = losses.value_loss_from_td(
        q_a, jax.lax.stop_gradient(meta_out["q_td"]), self._q_head
    )
    logs = dict(
        q_target=jnp.mean(meta_out["q_target"]),
        agent_q_mean=jnp.mean(meta_out["q_value"]),
        q_loss=jnp.mean(q_loss),
        td=jnp.mean(meta_out["q_td"]),
        normalized_td=jnp.mean(meta_out["normalized_q_td"]),
    )
    return self.hyper_params["value_cost"] * q_loss, logs

  # ------------------------------------------------------------ meta-train
  def meta_regularizer(
      self,
      train_meta_out: base.MetaOut,
      valid_out: types.AgentOuts,
      actions: jax.Array,
  ) -> tuple[jax.Array, types.Logs]:
    costs = self.hyper_params
    neg_entropy = -jnp.mean(ops.softmax_entropy(valid_out["y"]))
    if self.action_model:
      z_a = ops.at_actions(valid_out["z"][:-1], actions)
      neg_entropy -= jnp.mean(ops.softmax_entropy(z_a))
    # Squared (per inner step) means of each target, averaged over steps.
    mean_square = sum(
        jnp.mean(jnp.square(jnp.mean(train_meta_out[k], axis=(1, 2, 3))))
        for k in ("y", "z", "pi")
        if k in self.target_heads
    )
    target_logits = train_meta_out["target_out"]["logits"][:, :-1]
    target_kl = jnp.mean(
        ops.categorical_kl(
            jax.lax.stop_gradient(target_logits), train_meta_out["pi"]
        )
    )
    reg = (
        costs["prediction_entropy_cost"] * neg_entropy
        + costs["target_mean_square_cost"] * mean_square
        + costs["target_policy_kl_cost"] * target_kl
    )
    return reg, dict(
        prediction_neg_entropy=neg_entropy,
        target_mean_square=mean_square,
        target_policy_kl=target_kl,
    )
