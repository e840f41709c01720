"""Value targets and advantages: V-trace and Retrace (off-policy), GAE.

Shapes are time-major. A rollout of ``T`` transitions has ``T+1`` states:

  * per-state arrays (values, logits, actions): ``[T+1, B]`` / ``[T+1, B, A]``;
  * per-transition arrays (rewards, env discounts, importance weights,
    targets, advantages): ``[T, B]``.

A rule computes its value targets in three steps: ``decode_values`` turns raw
head outputs into scalars, ``estimate`` runs Retrace (with action values) or
V-trace (without), and ``normalize`` fills in advantages and TD errors
normalised by moving averages (see ``disco.value_fns.ema``).
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import rlax

from disco import policies
from disco import types
from disco.value_fns import categorical as categorical_lib
from disco.value_fns import ema as ema_lib

Array = types.Array

DEFAULT_DISCOUNT = 0.995
DEFAULT_TD_LAMBDA = 0.95


def importance_weights(
    pi_logits: Array,
    mu_logits: Array,
    actions: Array,
    policy: policies.Policy | None = None,
) -> Array:
  """Importance weights ``pi(a|s) / mu(a|s)`` of the taken actions.

  Args:
    pi_logits: ``[T, B, A]`` logits of the target (online) policy (``[T, B,
      P]`` parameters of ``policy``).
    mu_logits: ``[T, B, A]`` logits of the behaviour policy.
    actions: ``[T, B]`` int actions taken by the behaviour policy (``[T, B,
      D]`` for a continuous policy).
    policy: the distribution the logits parameterise (None: categorical).

  Returns:
    ``[T, B]`` weights ``exp(log pi(a) - log mu(a))``; no gradient flows
    through them.
  """
  actions = jnp.asarray(actions)
  if policy is None:
    policy = policies.Categorical(pi_logits.shape[-1])
  log_pi_a = policy.log_prob(pi_logits, actions)
  log_mu_a = policy.log_prob(mu_logits, actions)
  return jax.lax.stop_gradient(jnp.exp(log_pi_a - log_mu_a))


_ACTION_VALUE_FIELDS = (
    "qv_adv",
    "q_value",
    "target_q_value",
    "q_target",
    "q_td",
)


def _value_outs(
    values: Array,
    target_values: Array,
    rho: Array,
    adv: Array,
    value_target: Array,
    **action_values: Array,
) -> types.ValueOuts:
  """``ValueOuts`` of the given fields, with ``td = value_target -
  values[:-1]``; ``action_values`` are ``_ACTION_VALUE_FIELDS``."""
  return types.ValueOuts(
      value=values,
      target_value=target_values,
      rho=rho,
      adv=adv,
      value_target=value_target,
      td=value_target - values[:-1],
      **action_values,
  )


def vtrace(
    rewards: Array,
    env_discounts: Array,
    rho: Array,
    values: Array,
    target_values: Array | None = None,
    discount: jax.typing.ArrayLike = DEFAULT_DISCOUNT,
    lambda_: jax.typing.ArrayLike = DEFAULT_TD_LAMBDA,
) -> types.ValueOuts:
  """State-value targets and policy-gradient advantages with V-trace.

  V-trace (Espeholt et al., 2018) is run on ``target_values`` with
  per-step discounts ``env_discounts * discount`` and importance weights
  clipped at 1 (``rlax.vtrace_td_error_and_advantage``).

  Args:
    rewards: ``[T, B]`` reward of each transition.
    env_discounts: ``[T, B]`` environment discounts (0 where the transition
      terminated the episode, else 1).
    rho: ``[T, B]`` importance weights ``pi/mu`` of the taken actions.
    values: ``[T+1, B]`` state values being trained.
    target_values: ``[T+1, B]`` state values used to build targets (e.g. from
      a target network); defaults to ``values``.
    discount: scalar discount factor.
    lambda_: scalar trace parameter.

  Returns:
    A `types.ValueOuts` with ``value_target`` (``[T, B]``, the V-trace
    target), ``td = value_target - values[:-1]``, ``adv`` (the clipped-rho
    policy-gradient advantage), and zero ``[T, B]`` placeholders for the
    action-value fields (``q_value``, ``target_q_value``, ``qv_adv``,
    ``q_target``, ``q_td``).
  """
  if target_values is None:
    target_values = values
  chex.assert_rank([values, target_values], 2)
  chex.assert_equal_shape(
      [values[:-1], target_values[:-1], rho, rewards, env_discounts]
  )
  discounts = env_discounts * discount

  per_sequence = functools.partial(
      rlax.vtrace_td_error_and_advantage, lambda_=lambda_
  )
  vt = jax.vmap(per_sequence, in_axes=1, out_axes=1)(
      target_values[:-1], target_values[1:], rewards, discounts, rho
  )
  value_target = vt.errors + target_values[:-1]

  # No action values: placeholders of transition shape, as published.
  zeros = jnp.zeros_like(value_target)
  placeholders = dict.fromkeys(_ACTION_VALUE_FIELDS, zeros)
  return _value_outs(
      values, target_values, rho, vt.pg_advantage, value_target, **placeholders
  )


def _prepend_zero_step(x: Array) -> Array:
  return jnp.concatenate([jnp.zeros_like(x[:1]), x], axis=0)


def _retrace_targets(rewards, discounts, target_q_a, target_values, c_t):
  """Retrace's ``G_t`` ``[T, B]`` from ``[T, B]`` rewards, discounts, target
  ``Q(s_t, a_t)`` and traces ``c_t``, and ``[T+1, B]`` target values."""
  # rlax's estimator yields a return for the state *before* the first reward
  # it is given; a zero dummy step aligns its output with Q(s_t, a_t).
  per_sequence = functools.partial(
      rlax.general_off_policy_returns_from_q_and_v,
      stop_target_gradients=True,
  )
  q_target = jax.vmap(per_sequence, in_axes=1, out_axes=1)(
      target_q_a,
      target_values,
      _prepend_zero_step(rewards),
      _prepend_zero_step(discounts),
      c_t,
  )
  return q_target[1:]


def retrace(
    rewards: Array,
    env_discounts: Array,
    actions: Array,
    rho: Array,
    values: Array,
    q_values: Array,
    target_values: Array | None = None,
    target_q_values: Array | None = None,
    discount: jax.typing.ArrayLike = DEFAULT_DISCOUNT,
    lambda_: jax.typing.ArrayLike = DEFAULT_TD_LAMBDA,
) -> types.ValueOuts:
  """Action-value targets with Retrace, and derived state-value targets.

  Retrace (Munos et al., 2016) targets for ``Q(s_t, a_t)`` are

    G_t = r_t + g_t * (V(s_{t+1}) - c_{t+1} Q(s_{t+1}, a_{t+1})
                       + c_{t+1} G_{t+1}),   G_{T-1} = r + g * V(s_T),

  with ``g_t = env_discounts[t] * discount``, ``c_t = lambda_ * min(1,
  rho_t)``, and ``V``/``Q`` the target estimates (no gradient flows through
  the targets).

  Args:
    rewards: ``[T, B]`` reward of each transition.
    env_discounts: ``[T, B]`` environment discounts (0 at terminations).
    actions: ``[T, B]`` int actions taken.
    rho: ``[T, B]`` importance weights ``pi/mu`` of the taken actions.
    values: ``[T+1, B]`` state values being trained.
    q_values: ``[T+1, B, A]`` action values being trained.
    target_values: ``[T+1, B]`` state values for targets (``values``).
    target_q_values: ``[T+1, B, A]`` ... for targets (``q_values``).
    discount, lambda_: scalar discount factor and trace parameter.

  Returns:
    A `types.ValueOuts` with
      ``q_target`` ``[T, B]``: Retrace targets ``G_t``;
      ``q_td`` ``[T, B]``: ``q_target - q_values[t, a_t]``;
      ``adv`` ``[T, B]``: ``q_target - target_values[:-1]``;
      ``value_target`` ``[T, B]``: ``target_values[:-1] + min(1, rho) * adv``;
      ``td`` ``[T, B]``: ``value_target - values[:-1]``;
      ``qv_adv`` ``[T+1, B, A]``: ``target_q_values - target_values[..., None]``.
  """
  target_values = values if target_values is None else target_values
  target_q_values = q_values if target_q_values is None else target_q_values
  chex.assert_rank(
      [values, target_values, q_values, target_q_values], [2, 2, 3, 3]
  )
  chex.assert_equal_shape([values[:-1], rho, rewards, env_discounts, actions])
  chex.assert_equal_shape_prefix([values, q_values], 2)

  actions = jnp.asarray(actions)
  q_a = rlax.batched_index(q_values[:-1], actions)
  target_q_a = rlax.batched_index(target_q_values[:-1], actions)

  clipped_rho = jnp.minimum(rho, 1.0)
  q_target = _retrace_targets(
      rewards,
      env_discounts * discount,
      target_q_a,
      target_values,
      lambda_ * clipped_rho,
  )

  qv_adv = target_q_values - jnp.expand_dims(target_values, axis=2)
  adv = q_target - target_values[:-1]
  v_target = target_values[:-1] + clipped_rho * adv

  return _value_outs(
      values,
      target_values,
      rho,
      adv,
      v_target,
      qv_adv=qv_adv,
      q_value=q_values,
      target_q_value=target_q_values,
      q_target=q_target,
      q_td=q_target - q_a,
  )


def gae(
    rewards: Array,
    discounts: Array,
    values: Array,
    lambda_: jax.typing.ArrayLike,
    truncated: Array | None = None,
) -> Array:
  """Generalised advantage estimates (Schulman et al., 2016) of a rollout.

    delta_t = r_t + g_t V(s_{t+1}) - V(s_t),
    A_t = delta_t + g_t lambda_ A_{t+1},   A_T = 0,

  with ``g_t = discounts[t]`` (0 at a termination: the next value is not
  used). A truncated transition (cut by a time limit: its next state belongs
  to the next episode) has no valid target: its advantage is 0 and no trace
  crosses it, so the transition before it bootstraps from ``V(s_t)``, the
  last state of its episode. Computed with
  ``rlax.truncated_generalized_advantage_estimation`` per sequence.

  Args:
    rewards: ``[T, B]`` reward of each transition.
    discounts: ``[T, B]`` per-step discounts (``discount * (1 - terminal)``).
    values: ``[T+1, B]`` state values.
    lambda_: scalar trace parameter.
    truncated: ``[T, B]`` bool, transitions cut by a time limit (or None).

  Returns:
    ``[T, B]`` advantages; the value targets are ``A + values[:-1]``. No
    gradient flows through them.
  """
  chex.assert_rank([rewards, discounts, values], 2)
  chex.assert_equal_shape([rewards, discounts, values[:-1]])
  values = jax.lax.stop_gradient(values)
  if truncated is not None:
    # delta_t = V(s_t) + 0 * V(s_{t+1}) - V(s_t) = 0, and no trace from t+1.
    rewards = jnp.where(truncated, values[:-1], rewards)
    discounts = jnp.where(truncated, 0.0, discounts)
  per_sequence = (
      lambda r, d, v: rlax.truncated_generalized_advantage_estimation(
          r, d, lambda_, v
      )
  )
  return jax.vmap(per_sequence, in_axes=1, out_axes=1)(
      rewards, discounts, values
  )


def decode_values(
    head: categorical_lib.ValueHead,
    pi_logits: Array,
    value_net_out: Array | None = None,
    q_net_out: Array | None = None,
) -> tuple[Array, Array | None]:
  """Scalar state values (and action values) from raw head outputs.

  Args:
    head: how the heads encode values.
    pi_logits: ``[T+1, B, A]`` policy logits; state values are
      ``sum_a pi(a|s) Q(s, a)`` when ``value_net_out`` is None.
    value_net_out: ``[T+1, B, 1 or num_bins]`` value-head outputs, or None.
    q_net_out: ``[T+1, B, A, 1 or num_bins]`` action-value outputs, or None.

  Returns:
    ``(values [T+1, B], q_values [T+1, B, A] or None)``.
  """
  if value_net_out is None and q_net_out is None:
    raise ValueError("Need at least one of `value_net_out` and `q_net_out`.")
  q_values = None
  if q_net_out is not None:
    q_values = head.decode_actions(q_net_out)
  if value_net_out is not None:
    values = head.decode(value_net_out)
  else:
    values = jnp.sum(jax.nn.softmax(pi_logits) * q_values, axis=2)
  return values, q_values


def estimate(
    *,
    rewards: Array,
    env_discounts: Array,
    actions: Array,
    pi_logits: Array,
    mu_logits: Array,
    values: Array,
    q_values: Array | None = None,
    target_values: Array | None = None,
    target_q_values: Array | None = None,
    discount: jax.typing.ArrayLike = DEFAULT_DISCOUNT,
    lambda_: jax.typing.ArrayLike = DEFAULT_TD_LAMBDA,
    truncated: Array | None = None,
    policy: policies.Policy | None = None,
) -> types.ValueOuts:
  """Targets and advantages of a rollout: Retrace with action values, else
  V-trace, with importance weights ``pi/mu`` of the taken actions.

  A truncated transition (cut by a time limit: its next state belongs to
  the next episode) has no valid target: its importance weight is set to 0,
  so it adds nothing to any return and no trace crosses it, and the
  transition before it bootstraps from the last state of its episode. Its
  own targets are meaningless and must be masked out of the losses.

  Args:
    rewards: ``[T, B]`` reward of each transition.
    env_discounts: ``[T, B]`` environment discounts (0 at terminations).
    actions: ``[T+1, B]`` int actions (the last one is not used).
    pi_logits: ``[T+1, B, A]`` logits of the online policy.
    mu_logits: ``[T+1, B, A]`` logits of the behaviour policy.
    values: ``[T+1, B]`` state values being trained.
    q_values: ``[T+1, B, A]`` action values being trained, or None.
    target_values: ``[T+1, B]`` state values to bootstrap from (e.g. a target
      network's); defaults to ``values``.
    target_q_values: ``[T+1, B, A]`` action values to bootstrap from;
      defaults to ``q_values``.
    discount: scalar discount factor.
    lambda_: scalar trace parameter.
    truncated: ``[T, B]`` bool, transitions cut by a time limit (or None).
    policy: the distribution the logits parameterise (None: categorical
      over ``A``; a continuous one takes ``[T+1, B, D]`` actions and
      ``[T+1, B, 2 D]`` parameters, and no action values).

  Returns:
    ``ValueOuts`` without the normalised fields (see ``normalize``).
  """
  num_states, batch_size = values.shape
  action_shape = () if policy is None else policy.action_shape
  chex.assert_shape(actions, (num_states, batch_size) + tuple(action_shape))
  chex.assert_shape([pi_logits, mu_logits], (num_states, batch_size, None))
  chex.assert_shape([rewards, env_discounts], (num_states - 1, batch_size))
  actions = actions[:-1]
  rho = importance_weights(pi_logits[:-1], mu_logits[:-1], actions, policy)
  if truncated is not None:
    rho = jnp.where(truncated, 0.0, rho)
  if q_values is None:
    return vtrace(
        rewards, env_discounts, rho, values, target_values, discount, lambda_
    )
  return retrace(
      rewards,
      env_discounts,
      actions,
      rho,
      values,
      q_values,
      target_values,
      target_q_values,
      discount,
      lambda_,
  )


def estimate_on(
    inputs: types.UpdateRuleInputs,
    head: categorical_lib.ValueHead,
    *,
    discount: jax.typing.ArrayLike,
    lambda_: jax.typing.ArrayLike,
    value_key: str | None = None,
    q_key: str | None = None,
    target_out: types.AgentOuts | None = None,
) -> types.ValueOuts:
  """``estimate`` on an update rule's inputs.

  Decodes the trained network's value head ``agent_out[value_key]`` and/or
  action-value head ``agent_out[q_key]`` (see ``decode_values``), and takes
  the rewards, terminations and actions of the inputs, the trained network's
  logits as the target policy and the acting network's as the behaviour
  policy.

  Args:
    inputs: the rule's inputs (``[T+1, B]`` states, ``[T, B]`` transitions).
    head: how the value heads encode values.
    discount: scalar discount factor.
    lambda_: scalar trace parameter.
    value_key: the state-value output, if any.
    q_key: the action-value output, if any.
    target_out: outputs of a target network with the same heads to bootstrap
      from (decoded with the trained network's policy), if any.
  """
  pi_logits = inputs.agent_out["logits"]

  def decode(out):
    return decode_values(head, pi_logits, out.get(value_key), out.get(q_key))

  values, q_values = decode(inputs.agent_out)
  target_values, target_q_values = (
      (None, None) if target_out is None else decode(target_out)
  )
  return estimate(
      rewards=inputs.rewards,
      env_discounts=1.0 - inputs.is_terminal,
      truncated=inputs.truncated,
      discount=discount,
      lambda_=lambda_,
      actions=inputs.actions,
      pi_logits=pi_logits,
      mu_logits=inputs.behaviour_agent_out["logits"],
      values=values,
      q_values=q_values,
      target_values=target_values,
      policy=inputs.policy,
      target_q_values=target_q_values,
  )


def normalize(
    outs: types.ValueOuts,
    adv_ema_state: types.EmaState | None = None,
    td_ema_state: types.EmaState | None = None,
    *,
    normalize_q_td: bool = False,
    ema_decay: float = ema_lib.DEFAULT_DECAY,
    ema_eps: float = ema_lib.DEFAULT_EPS,
    axis_name: str | None = None,
) -> tuple[types.ValueOuts, types.EmaState | None, types.EmaState | None]:
  """Fills the normalised fields of ``outs`` from moving averages.

  With ``adv_ema_state`` it is updated with ``adv`` and used to normalise
  ``adv`` and ``qv_adv``. With ``td_ema_state`` it is updated with ``q_td``
  (``normalize_q_td``) or ``td`` and used to scale, without centring, that
  same quantity; the other normalised TD field is zeros. Without a state the
  corresponding normalised fields are zeros and the returned state is None.

  Args:
    outs: the output of ``estimate``.
    adv_ema_state: EMA state of the advantages, or None.
    td_ema_state: EMA state of the TD errors, or None.
    normalize_q_td: track ``q_td`` rather than ``td``.
    ema_decay: decay of both EMA updates.
    ema_eps: epsilon added to the EMA standard deviation.
    axis_name: optional mapped axis the EMA statistics are averaged over.

  Returns:
    ``(outs, new_adv_ema_state, new_td_ema_state)``.
  """
  normalized_adv = jnp.zeros_like(outs.td)
  normalized_qv_adv = jnp.zeros_like(outs.qv_adv)
  if adv_ema_state is not None:
    adv_ema_state = ema_lib.ema_update(
        adv_ema_state, outs.adv, decay=ema_decay, axis_name=axis_name
    )
    normalized_adv = ema_lib.ema_normalize(outs.adv, adv_ema_state, eps=ema_eps)
    normalized_qv_adv = ema_lib.ema_normalize(
        outs.qv_adv, adv_ema_state, eps=ema_eps
    )

  normalized_td = jnp.zeros_like(outs.td)
  normalized_q_td = jnp.zeros_like(outs.q_td)
  if td_ema_state is not None:
    tracked = outs.q_td if normalize_q_td else outs.td
    td_ema_state = ema_lib.ema_update(
        td_ema_state, tracked, decay=ema_decay, axis_name=axis_name
    )
    normalized = ema_lib.ema_normalize(
        tracked, td_ema_state, eps=ema_eps, subtract_mean=False
    )
    if normalize_q_td:
      normalized_q_td = normalized
    else:
      normalized_td = normalized

  outs = outs.replace(
      normalized_adv=normalized_adv,
      normalized_qv_adv=normalized_qv_adv,
      normalized_td=normalized_td,
      normalized_q_td=normalized_q_td,
  )
  return outs, adv_ema_state, td_ema_state
