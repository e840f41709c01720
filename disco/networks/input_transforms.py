"""Transforms that turn update-rule inputs into meta-network features.

Signature ``fn(x, actions, policy, axis_name) -> x``: ``actions`` ``[T, B]``,
``policy`` the ``[T+1, B, A]`` gradient-free softmax policy; ``x`` is
``[T+1, B, ...]`` per state or ``[T, B, ...]`` per transition, per-action
inputs ``[T+1, B, A, ...]``. ``TRANSFORMS`` maps ``MetaNetInputOption``
names to functions; add an entry to make a transform available.
"""

from __future__ import annotations

from collections.abc import Callable

import haiku as hk
import immutabledict
import jax
import jax.numpy as jnp

from disco import ops

Transform = Callable[[jax.Array, jax.Array, jax.Array, "str | None"], jax.Array]


def policy_weighted_average(x: jax.Array, policy: jax.Array) -> jax.Array:
  """``sum_a pi(a) x[..., a, :]``: ``[T+1, B, A, K]`` -> ``[T+1, B, K]``."""
  if x.ndim != 4 or x.shape[:3] != policy.shape:
    raise ValueError(
        f"pi_weighted_avg needs [T+1, B, A, K] inputs matching the policy "
        f"{policy.shape}; got {x.shape}."
    )
  return jnp.sum(x * policy[..., None], axis=2)


def td_pair(x: jax.Array) -> jax.Array:
  """Features of consecutive states side by side: ``[T+1, B, K]`` -> ``[T, B, 2K]``."""
  return jnp.concatenate([x[:-1], x[1:]], axis=-1)


class EmaNormalize(hk.Module):
  """Normalises by EMAs (decay 0.99, haiku state) of the mean and variance over
  the time and batch axes."""

  def __call__(self, x: jax.Array, axis_name: str | None) -> jax.Array:
    mean = jnp.mean(x, axis=(0, 1), keepdims=True)
    mean_sq = jnp.mean(jnp.square(x), axis=(0, 1), keepdims=True)
    if axis_name is not None:
      mean, mean_sq = jax.lax.pmean((mean, mean_sq), axis_name)
    m1 = hk.ExponentialMovingAverage(0.99, name="m1_ema")
    m2 = hk.ExponentialMovingAverage(0.99, name="m2_ema")
    m1(mean)
    m2(mean_sq)
    var = jnp.maximum(m2.average - jnp.square(m1.average), 0.0)
    return (x - m1.average) / (jnp.sqrt(var + 1e-12) + 1e-6)


def _elementwise(fn: Callable[[jax.Array], jax.Array]) -> Transform:
  return lambda x, actions, policy, axis_name: fn(x)


TRANSFORMS: immutabledict.immutabledict[str, Transform] = (
    immutabledict.immutabledict(
        {
            "identity": _elementwise(lambda x: x),
            "softmax": _elementwise(jax.nn.softmax),
            "max_a": _elementwise(lambda x: jnp.max(x, axis=2)),
            "stop_grad": _elementwise(jax.lax.stop_gradient),
            "clip": _elementwise(lambda x: jnp.clip(x, -2.0, 2.0)),
            "sign": _elementwise(jnp.sign),
            "drop_last": _elementwise(lambda x: x[:-1]),
            "td_pair": _elementwise(td_pair),
            "sign_log": _elementwise(ops.signed_logp1),
            "sign_hyp": _elementwise(ops.signed_hyperbolic),
            "masks_to_discounts": _elementwise(lambda x: 1.0 - x),
            "select_a": lambda x, actions, policy, axis_name: ops.at_actions(
                x, actions
            ),
            "pi_weighted_avg": (
                lambda x, actions, policy, axis_name: policy_weighted_average(
                    x, policy
                )
            ),
            "normalize": (
                lambda x, actions, policy, axis_name: EmaNormalize()(
                    x, axis_name
                )
            ),
        }
    )
)

# Transforms implemented by the meta-network's own embedding modules.
EMBEDDINGS = ("y_net", "z_net")
