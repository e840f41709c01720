"""The agent optimiser: Adam with a gradient-free denominator, clipped updates.

Meta-gradients flow through the agent's parameter updates. Letting them flow
through Adam's second-moment estimate too makes them noisy and unstable, so the
denominator is treated as a constant (``stop_gradient``), as in the published
DiscoRL setup.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def scale_by_adam_constant_denominator(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> optax.GradientTransformation:
  """Adam's update direction ``m_hat / (sqrt(v_hat) + eps)``, with ``v_hat``
  excluded from differentiation. The state is ``optax.ScaleByAdamState``."""

  def init_fn(params):
    return optax.ScaleByAdamState(
        count=jnp.zeros([], jnp.int32),
        mu=jax.tree.map(jnp.zeros_like, params),
        nu=jax.tree.map(jnp.zeros_like, params),
    )

  def update_fn(updates, state, params=None):
    del params
    mu = optax.tree.update_moment(updates, state.mu, b1, 1)
    nu = optax.tree.update_moment(updates, state.nu, b2, 2)
    count = optax.safe_increment(state.count)
    mu_hat = optax.tree.bias_correction(mu, b1, count)
    nu_hat = jax.lax.stop_gradient(optax.tree.bias_correction(nu, b2, count))
    direction = jax.tree.map(
        lambda m, v: m / (jnp.sqrt(v) + eps), mu_hat, nu_hat
    )
    return direction, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

  return optax.GradientTransformation(init_fn, update_fn)


def agent_optimizer(
    learning_rate: float, max_abs_update: float
) -> optax.GradientTransformation:
  """Adam (constant denominator) -> elementwise clip -> scale by ``-lr``."""
  return optax.chain(
      scale_by_adam_constant_denominator(),
      optax.clip(max_abs_update),
      optax.scale(-learning_rate),
  )
