"""The agent optimiser: Adam with a gradient-free denominator, clipped updates.

Meta-gradients flow through the agent's updates; Adam's second moment is a
constant for them (``stop_gradient``), as in the published DiscoRL setup.
Gradient-norm clipping and a linear learning-rate decay are optional and
off by default (the published optimiser, state included).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULT_ADAM_EPS = 1e-8


def scale_by_adam_constant_denominator(
    b1: float = 0.9, b2: float = 0.999, eps: float = DEFAULT_ADAM_EPS
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
    learning_rate: float,
    max_abs_update: float | None,
    max_grad_norm: float | None = None,
    adam_eps: float = DEFAULT_ADAM_EPS,
    decay_steps: int | None = None,
) -> optax.GradientTransformation:
  """[global-norm clip] -> Adam (constant denominator) -> [elementwise clip]
  -> scale by ``-lr`` (or a decaying ``-lr``).

  Args:
    learning_rate: Adam's (initial) learning rate.
    max_abs_update: elementwise clip of Adam's direction (None: none).
    max_grad_norm: global-norm clip of the gradients (None: none).
    adam_eps: epsilon of Adam's denominator.
    decay_steps: if given, the learning rate falls linearly to 0 over this
      many updates, then stays 0.
  """
  stages = []
  if max_grad_norm is not None:
    stages.append(optax.clip_by_global_norm(max_grad_norm))
  stages.append(scale_by_adam_constant_denominator(eps=adam_eps))
  if max_abs_update is not None:
    stages.append(optax.clip(max_abs_update))
  if decay_steps is None:
    stages.append(optax.scale(-learning_rate))
  else:
    stages.append(
        optax.scale_by_learning_rate(
            optax.linear_schedule(learning_rate, 0.0, decay_steps)
        )
    )
  return optax.chain(*stages)
