"""Per-step ``[T, B]`` value and policy-gradient losses; the caller reduces
and masks them."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from disco import policies
from disco import types
from disco.value_fns import categorical as categorical_lib


def value_loss_from_target(
    net_out: types.Array,
    target: types.Array,
    head: categorical_lib.ValueHead = categorical_lib.ValueHead(),
) -> types.Array:
  """Per-step loss regressing a value head onto scalar targets.

  The target is not stop-gradiented here.

  Args:
    net_out: ``[T, B, 1]``, or ``[T, B, num_bins]`` logits of a categorical
      head.
    target: ``[T, B]`` unsquashed scalar targets.
    head: how ``net_out`` encodes values.

  Returns:
    ``[T, B]``: ``0.5 * (v - target)**2``, or the softmax cross-entropy
    against the 2-hot target of a categorical head.
  """
  target = head.encode_target(target)
  if head.categorical:
    target_probs = categorical_lib.scalar_to_probs(
        target, num_bins=net_out.shape[-1], max_abs_value=head.max_abs_value
    )
    chex.assert_equal_shape([net_out, target_probs])
    return optax.losses.softmax_cross_entropy(net_out, target_probs)
  values = jnp.squeeze(net_out, axis=-1)
  return 0.5 * jnp.square(values - target)


def value_loss_from_td(
    net_out: types.Array,
    td: types.Array,
    head: categorical_lib.ValueHead = categorical_lib.ValueHead(),
    backprop: bool = False,
) -> types.Array:
  """Per-step value loss towards ``stop_gradient(value + td)``.

  The target is formed in unsquashed space from the decoded value (a scalar
  head without transform: ``0.5 * td**2``, gradient ``-td``).

  Args:
    net_out: ``[T, B, 1]``, or ``[T, B, num_bins]`` logits.
    td: ``[T, B]`` (possibly normalised) TD errors.
    head: how ``net_out`` encodes values.
    backprop: let gradients flow into ``td`` (the target is then
      ``stop_gradient(value) + td``, the same value).

  Returns:
    ``[T, B]`` losses.
  """
  values = head.decode(net_out)
  chex.assert_equal_shape([values, td])
  if backprop:
    target = jax.lax.stop_gradient(values) + td
  else:
    target = jax.lax.stop_gradient(values + td)
  return value_loss_from_target(net_out, target, head)


def policy_gradient_loss(
    logits: types.Array,
    actions: types.Array,
    adv: types.Array,
    backprop: bool = False,
    policy: policies.Policy | None = None,
) -> types.Array:
  """Per-step policy-gradient loss ``-log pi(a_t|s_t) * adv_t``.

  Args:
    logits: ``[T, B, P]`` policy parameters (``A`` logits if categorical).
    actions: ``[T, B]`` int (``[T, B, D]`` float for a continuous policy).
    adv: ``[T, B]`` advantages.
    backprop: let gradients flow into ``adv`` (e.g. a meta-network's
      advantages); otherwise it is a constant.
    policy: the distribution of ``logits`` (None: categorical).

  Returns:
    ``[T, B]`` losses.
  """
  chex.assert_type([logits, adv], [float, float])
  if policy is None:
    chex.assert_type(actions, int)
    policy = policies.Categorical(logits.shape[-1])
  log_pi_a = policy.log_prob(logits, actions)
  if not backprop:
    adv = jax.lax.stop_gradient(adv)
  return -log_pi_a * adv
