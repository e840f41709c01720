"""Value targets and advantages: V-trace and Retrace (off-policy), GAE.

Time-major shapes: ``T`` transitions, ``T+1`` states. Per-state arrays
(values, logits, actions) are ``[T+1, B(, A)]``, per-transition arrays
(rewards, discounts, importance weights, targets, advantages) ``[T, B]``.
A rule runs ``decode_values``, ``estimate``, then ``normalize``.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp

from disco import policies
from disco import types
from disco.value_fns import categorical as categorical_lib
from disco.value_fns import ema as ema_lib

DEFAULT_DISCOUNT = 0.995
DEFAULT_TD_LAMBDA = 0.95


def importance_weights(
    pi_logits: types.Array,
    mu_logits: types.Array,
    actions: types.Array,
    policy: policies.Policy | None = None,
) -> types.Array:
  """``[T, B]`` weights ``pi(a|s) / mu(a|s)`` of the taken actions, with no
  gradient.

  Args:
    pi_logits: ``[T, B, P]`` target-policy parameters (``A`` logits).
    mu_logits: ``[T, B, P]`` behaviour-policy parameters.
    actions: ``[T, B]`` int (``[T, B, D]`` for a continuous policy).
    policy: the logits' distribution (None: categorical).
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
    values: types.Array,
    target_values: types.Array,
    rho: types.Array,
    adv: types.Array,
    value_target: types.Array,
    **action_values: types.Array,
) -> types.ValueOuts:
  """``ValueOuts`` with ``td = value_target - values[:-1]``."""
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
    rewards: types.Array,
    env_discounts: types.Array,
    rho: types.Array,
    values: types.Array,
    target_values: types.Array | None = None,
    discount: jax.typing.ArrayLike = DEFAULT_DISCOUNT,
    lambda_: jax.typing.ArrayLike = DEFAULT_TD_LAMBDA,
    hyper_param_gradients: bool = False,
) -> types.ValueOuts:
  """V-trace (Espeholt et al., 2018) state-value targets and advantages.

  ``rlax.vtrace_td_error_and_advantage`` on ``target_values``, with discounts
  ``env_discounts * discount`` and importance weights clipped at 1.

  Args:
    rewards: ``[T, B]``.
    env_discounts: ``[T, B]``, 0 at terminations, else 1.
    rho: ``[T, B]`` importance weights ``pi/mu``.
    values: ``[T+1, B]`` state values being trained.
    target_values: ``[T+1, B]`` to bootstrap from (default ``values``).
    discount: scalar discount factor.
    lambda_: scalar trace parameter.
    hyper_param_gradients: the same values, but ``value_target``, ``td`` and
      ``adv`` are differentiable in ``discount``, ``lambda_`` and ``rewards``
      (not in the values; rlax's targets are stop-gradiented as a whole).

  Returns:
    ``ValueOuts`` with ``[T, B]`` ``value_target``, ``td`` and ``adv`` (the
    clipped-rho policy-gradient advantage); the action-value fields are zeros.
  """
  if target_values is None:
    target_values = values
  chex.assert_rank([values, target_values], 2)
  chex.assert_equal_shape(
      [values[:-1], target_values[:-1], rho, rewards, env_discounts]
  )
  discounts = env_discounts * discount

  import rlax  # pylint: disable=g-import-not-at-top

  per_sequence = functools.partial(
      rlax.vtrace_td_error_and_advantage, lambda_=lambda_
  )
  vt = jax.vmap(per_sequence, in_axes=1, out_axes=1)(
      target_values[:-1], target_values[1:], rewards, discounts, rho
  )
  if hyper_param_gradients:
    # Values as above, gradients from targets never stopped (on constant
    # values): x + (y - y) is x exactly for finite y.
    sg = jax.lax.stop_gradient
    open_vt = jax.vmap(
        functools.partial(per_sequence, stop_target_gradients=False),
        in_axes=1,
        out_axes=1,
    )(sg(target_values[:-1]), sg(target_values[1:]), rewards, discounts, rho)
    vt = jax.tree.map(lambda x, y: sg(x) + (y - sg(y)), vt, open_vt)
  value_target = vt.errors + target_values[:-1]

  # No action values: placeholders of transition shape, as published.
  zeros = jnp.zeros_like(value_target)
  placeholders = dict.fromkeys(_ACTION_VALUE_FIELDS, zeros)
  return _value_outs(
      values, target_values, rho, vt.pg_advantage, value_target, **placeholders
  )


def _prepend_zero_step(x: types.Array) -> types.Array:
  return jnp.concatenate([jnp.zeros_like(x[:1]), x], axis=0)


def _retrace_targets(rewards, discounts, target_q_a, target_values, c_t):
  """Retrace's ``[T, B]`` ``G_t``; ``target_values`` is ``[T+1, B]``, the
  other inputs ``[T, B]``."""
  import rlax  # pylint: disable=g-import-not-at-top

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
    rewards: types.Array,
    env_discounts: types.Array,
    actions: types.Array,
    rho: types.Array,
    values: types.Array,
    q_values: types.Array,
    target_values: types.Array | None = None,
    target_q_values: types.Array | None = None,
    discount: jax.typing.ArrayLike = DEFAULT_DISCOUNT,
    lambda_: jax.typing.ArrayLike = DEFAULT_TD_LAMBDA,
) -> types.ValueOuts:
  """Retrace (Munos et al., 2016) action-value and state-value targets.

      G_t = r_t + g_t * (V(s_{t+1}) - c_{t+1} Q(s_{t+1}, a_{t+1})
                         + c_{t+1} G_{t+1}),   G_{T-1} = r + g * V(s_T),

  with ``g_t = env_discounts[t] * discount``, ``c_t = lambda_ * min(1,
  rho_t)`` and ``V``, ``Q`` the target estimates (no gradient).

  Args:
    rewards: ``[T, B]``.
    env_discounts: ``[T, B]``, 0 at terminations, else 1.
    actions: ``[T, B]`` int actions taken.
    rho: ``[T, B]`` importance weights ``pi/mu``.
    values: ``[T+1, B]`` state values being trained.
    q_values: ``[T+1, B, A]`` action values being trained.
    target_values: ``[T+1, B]`` (default ``values``).
    target_q_values: ``[T+1, B, A]`` (default ``q_values``).
    discount: scalar discount factor.
    lambda_: scalar trace parameter.

  Returns:
    ``ValueOuts`` with ``[T, B]`` ``q_target`` (``G_t``), ``q_td = q_target -
    Q(s_t, a_t)``, ``adv = q_target - target_values[:-1]``, ``value_target =
    target_values[:-1] + min(1, rho) * adv`` and ``td``, and ``[T+1, B, A]``
    ``qv_adv = target_q_values - target_values[..., None]``.
  """
  target_values = values if target_values is None else target_values
  target_q_values = q_values if target_q_values is None else target_q_values
  chex.assert_rank(
      [values, target_values, q_values, target_q_values], [2, 2, 3, 3]
  )
  chex.assert_equal_shape([values[:-1], rho, rewards, env_discounts, actions])
  chex.assert_equal_shape_prefix([values, q_values], 2)

  import rlax  # pylint: disable=g-import-not-at-top

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
    rewards: types.Array,
    discounts: types.Array,
    values: types.Array,
    lambda_: jax.typing.ArrayLike,
    truncated: types.Array | None = None,
) -> types.Array:
  """Generalised advantage estimates (Schulman et al., 2016).

      delta_t = r_t + g_t V(s_{t+1}) - V(s_t),
      A_t = delta_t + g_t lambda_ A_{t+1},   A_T = 0,

  with ``g_t = discounts[t]`` (0 at a termination). A truncated transition
  gets advantage 0 and cuts the trace, so the one before it bootstraps from
  ``V(s_t)``.

  Args:
    rewards: ``[T, B]``.
    discounts: ``[T, B]`` per-step discounts (``discount * (1 - terminal)``).
    values: ``[T+1, B]``.
    lambda_: scalar trace parameter.
    truncated: ``[T, B]`` bool, transitions cut by a time limit (or None).

  Returns:
    ``[T, B]`` advantages, no gradient; value targets are ``A + values[:-1]``.
  """
  chex.assert_rank([rewards, discounts, values], 2)
  chex.assert_equal_shape([rewards, discounts, values[:-1]])
  values = jax.lax.stop_gradient(values)
  if truncated is not None:
    # delta_t = V(s_t) + 0 * V(s_{t+1}) - V(s_t) = 0, and no trace from t+1.
    rewards = jnp.where(truncated, values[:-1], rewards)
    discounts = jnp.where(truncated, 0.0, discounts)
  import rlax  # pylint: disable=g-import-not-at-top

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
    pi_logits: types.Array,
    value_net_out: types.Array | None = None,
    q_net_out: types.Array | None = None,
) -> tuple[types.Array, types.Array | None]:
  """Scalar state values (and action values) from raw head outputs.

  Args:
    head: how the heads encode values.
    pi_logits: ``[T+1, B, A]``; without ``value_net_out``, values are
      ``sum_a pi(a|s) Q(s, a)``.
    value_net_out: ``[T+1, B, 1 or num_bins]``, or None.
    q_net_out: ``[T+1, B, A, 1 or num_bins]``, or None.

  Returns:
    ``(values [T+1, B], q_values [T+1, B, A] or None)``.

  Raises:
    ValueError: if both outputs are None.
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


def _check_shapes(values, actions, logits, rewards, policy) -> None:
  """``estimate``'s shapes: ``values`` ``[T+1, B]``, ``actions``
  ``[T+1, B, *action_shape]``, each of ``logits`` ``[T+1, B, A]``,
  ``rewards`` ``[T, B]``."""
  num_states, batch_size = values.shape
  action_shape = () if policy is None else policy.action_shape
  chex.assert_shape(actions, (num_states, batch_size) + tuple(action_shape))
  chex.assert_shape(logits, (num_states, batch_size, None))
  chex.assert_shape(rewards, (num_states - 1, batch_size))


def _weights(pi_logits, mu_logits, actions, truncated, policy) -> types.Array:
  """``estimate``'s importance weights ``[T, B]`` (``actions`` ``[T, B]``,
  logits ``[T+1, B, A]``), 0 at truncated transitions."""
  rho = importance_weights(pi_logits[:-1], mu_logits[:-1], actions, policy)
  if truncated is None:
    return rho
  return jnp.where(truncated, 0.0, rho)


def estimate(
    *,
    rewards: types.Array,
    env_discounts: types.Array,
    actions: types.Array,
    pi_logits: types.Array,
    mu_logits: types.Array,
    values: types.Array,
    q_values: types.Array | None = None,
    target_values: types.Array | None = None,
    target_q_values: types.Array | None = None,
    discount: jax.typing.ArrayLike = DEFAULT_DISCOUNT,
    lambda_: jax.typing.ArrayLike = DEFAULT_TD_LAMBDA,
    truncated: types.Array | None = None,
    policy: policies.Policy | None = None,
    hyper_param_gradients: bool = False,
) -> types.ValueOuts:
  """Targets and advantages: Retrace with action values, else V-trace.

  A truncated transition gets importance weight 0: no return or trace
  crosses it and the one before it bootstraps from its episode's last state.
  Its own targets are meaningless: mask it out of the losses.

  Args:
    rewards: ``[T, B]``.
    env_discounts: ``[T, B]``, 0 at terminations, else 1.
    actions: ``[T+1, B]`` int (the last is unused).
    pi_logits: ``[T+1, B, A]`` online policy.
    mu_logits: ``[T+1, B, A]`` behaviour policy.
    values: ``[T+1, B]`` state values being trained.
    q_values: ``[T+1, B, A]`` action values being trained, or None.
    target_values: ``[T+1, B]`` to bootstrap from (default ``values``).
    target_q_values: ``[T+1, B, A]`` to bootstrap from (default ``q_values``).
    discount: scalar discount factor.
    lambda_: scalar trace parameter.
    truncated: ``[T, B]`` bool, transitions cut by a time limit (or None).
    policy: the logits' distribution (None: categorical; a continuous one
      takes ``[T+1, B, D]`` actions, ``[T+1, B, 2 D]`` logits and no action
      values).
    hyper_param_gradients: V-trace's targets differentiable in ``discount``
      and ``lambda_`` (``vtrace``); not with action values.

  Returns:
    ``ValueOuts`` without the normalised fields (``normalize``).

  Raises:
    ValueError: ``hyper_param_gradients`` with action values.
  """
  _check_shapes(values, actions, [pi_logits, mu_logits], rewards, policy)
  chex.assert_equal_shape([rewards, env_discounts])
  actions = actions[:-1]
  rho = _weights(pi_logits, mu_logits, actions, truncated, policy)
  if q_values is None:
    return vtrace(
        rewards,
        env_discounts,
        rho,
        values,
        target_values,
        discount,
        lambda_,
        hyper_param_gradients,
    )
  if hyper_param_gradients:
    raise ValueError(
        "Retrace's targets cannot carry gradients to the hyper-parameters: "
        "tune a rule with state values only."
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
    hyper_param_gradients: bool = False,
) -> types.ValueOuts:
  """``estimate`` on a rule's inputs: ``agent_out[value_key]`` and/or
  ``agent_out[q_key]`` decoded, the trained network's logits as target and
  ``behaviour_agent_out``'s as behaviour policy.

  Args:
    inputs: the rule's inputs.
    head: how the value heads encode values.
    discount: scalar discount factor.
    lambda_: scalar trace parameter.
    value_key: the state-value output, if any.
    q_key: the action-value output, if any.
    target_out: a target network's outputs (same heads) to bootstrap from,
      if any.
    hyper_param_gradients: see ``estimate``.
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
      hyper_param_gradients=hyper_param_gradients,
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

  ``adv_ema_state`` tracks ``adv`` and normalises ``adv`` and ``qv_adv``;
  ``td_ema_state`` tracks and scales (without centring) ``q_td`` if
  ``normalize_q_td``, else ``td``. Fields without a state are zeros; a None
  state is returned as None.

  Args:
    outs: the output of ``estimate``.
    adv_ema_state: EMA state of the advantages, or None.
    td_ema_state: EMA state of the TD errors, or None.
    normalize_q_td: track ``q_td`` rather than ``td``.
    ema_decay: decay of both EMAs.
    ema_eps: added to the EMA standard deviation.
    axis_name: mapped axis the EMA statistics are averaged over, if any.

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
