"""Per-step value and policy-gradient losses.

All losses are returned per step (``[T, B]``); reducing them (mean, sum,
masking) is left to the caller.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from disco import policies
from disco import types
from disco.value_fns import categorical as categorical_lib

Array = types.Array


def value_loss_from_target(
    net_out: Array,
    target: Array,
    head: categorical_lib.ValueHead = categorical_lib.ValueHead(),
) -> Array:
  """Per-step loss regressing a value head onto scalar targets.

  The target is not stop-gradiented here; do so before calling if needed.

  Args:
    net_out: ``[T, B, 1]`` scalar outputs, or ``[T, B, num_bins]`` logits for
      a categorical head.
    target: ``[T, B]`` scalar targets (in untransformed value space; squashed
      here when the head predicts squashed values).
    head: how ``net_out`` encodes values.

  Returns:
    ``[T, B]`` losses: ``0.5 * (v - target)**2`` for scalar heads, the
    softmax cross-entropy against the 2-hot target distribution for
    categorical heads.
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
    net_out: Array,
    td: Array,
    head: categorical_lib.ValueHead = categorical_lib.ValueHead(),
) -> Array:
  """Per-step value loss towards ``stop_gradient(value + td)``.

  The target is formed in untransformed value space from the decoded value,
  so the gradient moves the value in the direction of ``td`` (for a scalar
  head without transform the loss is ``0.5 * td**2`` with gradient
  ``-td`` w.r.t. the value).

  Args:
    net_out: ``[T, B, 1]`` scalar outputs, or ``[T, B, num_bins]`` logits for
      a categorical head.
    td: ``[T, B]`` (possibly normalised) TD errors.
    head: how ``net_out`` encodes values.

  Returns:
    ``[T, B]`` losses.
  """
  values = head.decode(net_out)
  chex.assert_equal_shape([values, td])
  target = jax.lax.stop_gradient(values + td)
  return value_loss_from_target(net_out, target, head)


def policy_gradient_loss(
    logits: Array,
    actions: Array,
    adv: Array,
    backprop: bool = False,
    policy: policies.Policy | None = None,
) -> Array:
  """Per-step policy-gradient loss ``-log pi(a_t|s_t) * adv_t``.

  Args:
    logits: ``[T, B, P]`` policy parameters (``A`` logits of a categorical
      policy).
    actions: ``[T, B]`` int actions taken (``[T, B, D]`` float for a
      continuous policy).
    adv: ``[T, B]`` advantages.
    backprop: whether gradients may flow into ``adv`` (e.g. when advantages
      come from a meta-network being meta-trained); otherwise ``adv`` is
      treated as a constant.
    policy: the distribution ``logits`` parameterise (None: categorical).

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
