"""The estimators' mathematics on problems with known gradients.

* A quadratic over a pytree: ES's and PES's estimates point along the true
  gradient, and antithetic pairs have lower variance than independent
  perturbations.
* A small unrolled system where truncated backpropagation is biased: the
  state ``s`` follows ``s <- a * s + theta`` (``0 < a < 1``) from ``s = 0``
  and every step costs ``|s - c|^2 / 2``. The whole lifetime's loss depends
  on ``theta`` through every earlier step; a truncated unroll that takes the
  state at its start as given sees only ``theta``'s last ``K`` steps of
  influence, so its gradient is too small (here 3.5x to 5x).
  PES's sum over the truncations of a lifetime matches the full-unroll
  gradient within its standard error; truncated backprop's does not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco.meta import es
from disco.meta import estimators

# ------------------------------------------------------------- quadratic

A = jnp.asarray([1.0, 2.0, 0.5, 3.0, 1.5])
B = jnp.asarray([0.3, -1.0, 0.8, 0.1, -0.4])
THETA = {"w": jnp.asarray([[0.5, -0.2], [0.1, 0.7]]), "b": jnp.asarray([0.2])}


def _flat(tree) -> jax.Array:
  return jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(tree)])


def quadratic(theta) -> jax.Array:
  x = _flat(theta)
  return 0.5 * jnp.sum(A * x**2) + jnp.sum(B * x) + 3.0


def cosine(a, b) -> float:
  a, b = _flat(a), _flat(b)
  return float(a @ b / (jnp.linalg.norm(a) * jnp.linalg.norm(b)))


def _es_estimate_impl(key, antithetic: bool, shaping: bool, members_index):
  members = members_index.shape[0]
  z = jax.vmap(lambda i: estimators.member_noise(key, THETA, i, antithetic))(
      members_index
  )
  sigma = 0.1
  losses = jax.vmap(lambda n: quadratic(estimators.perturb(THETA, n, sigma)))(z)
  weights = estimators.centered_ranks(losses) if shaping else losses
  return estimators.es_gradient(z, weights, sigma, members)


_es_estimate = jax.jit(
    _es_estimate_impl, static_argnames=("antithetic", "shaping")
)


@pytest.mark.parametrize("shaping", [False, True])
def test_es_points_along_the_gradient(shaping):
  true = jax.grad(quadratic)(THETA)
  estimate = _es_estimate(
      jax.random.PRNGKey(0), True, shaping, jnp.arange(4096)
  )
  assert cosine(estimate, true) >= 0.9
  if not shaping:  # raw losses: an unbiased estimate of the gradient
    np.testing.assert_allclose(_flat(estimate), _flat(true), atol=0.1)


def test_antithetic_pairs_have_lower_variance():
  true = _flat(jax.grad(quadratic)(THETA))
  errors = {}
  for antithetic in (True, False):
    estimates = jnp.stack(
        [
            _flat(
                _es_estimate(
                    jax.random.PRNGKey(k), antithetic, False, jnp.arange(16)
                )
            )
            for k in range(40)
        ]
    )
    errors[antithetic] = float(jnp.mean(jnp.sum((estimates - true) ** 2, -1)))
  # The constant and even terms of the loss cancel within a pair.
  assert errors[True] < 0.5 * errors[False], errors


def test_antithetic_noise_pairs_members():
  z = jax.vmap(
      lambda i: estimators.member_noise(jax.random.PRNGKey(3), THETA, i)
  )(jnp.arange(4))
  flat = jax.vmap(_flat)(z)
  np.testing.assert_array_equal(flat[0], -flat[1])
  np.testing.assert_array_equal(flat[2], -flat[3])
  assert not np.allclose(flat[0], flat[2])


def test_centered_ranks_put_nan_last():
  ranks = estimators.centered_ranks(jnp.asarray([3.0, 1.0, jnp.nan, 2.0]))
  assert float(ranks[2]) == 0.5 and float(ranks[1]) == -0.5
  assert np.all(np.isfinite(np.asarray(ranks)))


def test_pes_on_a_quadratic_points_along_the_gradient():
  """One truncation per lifetime: PES is ES on the raw losses."""

  def unroll(theta, state):
    return state, quadratic(theta), None

  n = 512
  _, acc, losses, _ = estimators.pes_truncation(
      unroll,
      THETA,
      jnp.zeros([n]),
      jax.tree.map(lambda x: jnp.zeros((n, *x.shape)), THETA),
      jax.random.PRNGKey(1),
      jnp.arange(n),
      0.1,
  )
  estimate = estimators.pes_gradient(acc, losses, 0.1, n)
  assert cosine(estimate, jax.grad(quadratic)(THETA)) >= 0.9


# ----------------------------------------- the biased unrolled system

DECAY, TARGET = 0.9, jnp.asarray([1.0, -0.5])
STEPS, TRUNCATION = 12, 2
THETA0 = jnp.asarray([0.3, 0.2])


def _unroll(theta, state, steps=TRUNCATION):
  """``steps`` steps from ``state``: (state, summed loss)."""

  def step(s, _):
    s = DECAY * s + theta
    return s, 0.5 * jnp.sum((s - TARGET) ** 2)

  state, losses = jax.lax.scan(step, state, None, length=steps)
  return state, losses.sum()


def _full_gradient() -> jax.Array:
  return jax.grad(lambda t: _unroll(t, jnp.zeros(2), STEPS)[1])(THETA0)


def _truncated_backprop() -> jax.Array:
  """The sum over a lifetime's truncations of the truncated gradients."""
  state, total = jnp.zeros(2), jnp.zeros(2)
  for _ in range(STEPS // TRUNCATION):
    grad, state = jax.grad(lambda t, s: _unroll(t, s)[::-1], has_aux=True)(
        THETA0, jax.lax.stop_gradient(state)
    )
    total += grad
  return total


@jax.jit
def _pes_pairs(key) -> jax.Array:
  """Per antithetic pair, its share of the PES estimate summed over a
  lifetime's truncations: ``[pairs, 2]`` (their mean is the estimate)."""
  pairs, sigma = 2000, 0.05
  n = 2 * pairs
  states = jnp.zeros([n, 2])
  acc = jnp.zeros([n, 2])
  total = jnp.zeros([n, 2])
  for t in range(STEPS // TRUNCATION):
    states, acc, losses, _ = estimators.pes_truncation(
        lambda theta, s: (*_unroll(theta, s), None),
        THETA0,
        states,
        acc,
        jax.random.fold_in(key, t),
        jnp.arange(n),
        sigma,
    )
    # Each particle's term of pes_gradient(acc, losses, sigma, n), times n.
    total += jax.vmap(
        lambda a, loss: estimators.pes_gradient(a[None], loss[None], sigma, 1)
    )(acc, losses)
  return total.reshape(pairs, 2, 2).mean(1)


def test_pes_is_unbiased_where_truncated_backprop_is_not():
  full = np.asarray(_full_gradient())
  truncated = np.asarray(_truncated_backprop())
  per_pair = np.asarray(_pes_pairs(jax.random.PRNGKey(0)))
  mean = per_pair.mean(0)
  stderr = per_pair.std(0, ddof=1) / np.sqrt(len(per_pair))
  # PES: within 3 standard errors of the full-unroll gradient ...
  assert np.all(np.abs(mean - full) <= 3 * stderr), (mean, full, stderr)
  # ... which truncated backprop misses by far more (it is deterministic).
  assert np.all(np.abs(truncated - full) > 10 * stderr), (truncated, full)
  assert np.all(np.abs(truncated - full) > 0.3 * np.abs(full))
  # The estimate is informative: its error is small next to the gradient.
  assert np.all(stderr < 0.1 * np.abs(full))


# ------------------------------------------------------- ES fitness


def test_member_fitness_final_return_auc_and_divergence():
  metrics = dict(
      # [agents, iterations]: returns summed over the episodes that ended.
      return_sum=jnp.asarray([[0.0, -1.0, 2.0, 4.0], [1.0, 1.0, 0.0, 2.0]]),
      episodes=jnp.asarray([[1, 1, 2, 2], [1, 1, 1, 1]]),
      diverged=jnp.zeros([2, 4], jnp.int32),
  )
  final = es.ESConfig(lifetime_iterations=4, final_iterations=2)
  auc = es.ESConfig(lifetime_iterations=4, final_iterations=2, fitness="auc")
  # Agent means (6/4 and 2/2 over the last two; 5/6 and 4/4 over all),
  # normalised with random return -1 and span 2.
  np.testing.assert_allclose(
      es.member_fitness(metrics, final, -1.0, 2.0),
      ((1.5 + 1) / 2 + (1 + 1) / 2) / 2,
  )
  np.testing.assert_allclose(
      es.member_fitness(metrics, auc, -1.0, 2.0),
      ((5 / 6 + 1) / 2 + (1 + 1) / 2) / 2,
      rtol=1e-6,
  )
  diverged = dict(metrics, diverged=metrics["diverged"].at[1, 2].set(1))
  assert np.isnan(es.member_fitness(diverged, final))
