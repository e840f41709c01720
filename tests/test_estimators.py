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
* The outline every estimator fills in (``disco.meta.meta_step``), with a
  toy estimator whose meta-step is known exactly.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from disco.meta import es
from disco.meta import estimators
from disco.meta import meta_step

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


# ------------------------------------------------------------ the outline


class _Pull(meta_step.MetaStepProgram):
  """A toy estimator put in the outline that backprop, ES and PES share:
  a group's agents are targets ``[2]``, its estimate is the weighted mean
  gradient of ``|theta - target|^2 / 2`` over them, and every target moves
  by 1 per meta-step."""

  def _check(self):
    assert all(g.num_agents % len(self.devices) == 0 for g in self.groups)

  def _initial(self, rng, meta_params):
    agents = tuple(
        jnp.outer(
            jnp.arange(g.num_agents, dtype=jnp.float32),
            jnp.asarray([i + 1.0, 1.0]),
        )
        for i, g in enumerate(self.groups)
    )
    return dict(rng=rng, agents=agents)

  def _step_keys(self, rng):
    return rng, None

  def _group_step(self, index, group, ctx):
    targets = ctx.state["agents"][index]
    diff = ctx.state["meta_params"] - targets
    grad = jax.lax.psum(diff.sum(0), meta_step.AXIS) / group.num_agents
    loss = jax.lax.psum((diff**2).sum() / 2, meta_step.AXIS) / group.num_agents
    logs = {"meta_loss": loss, "rewards": -loss, "diverged_agents": 0}
    return meta_step.GroupStep(
        grad * self.weights[group.name], logs, agents=targets + 1
    )


def _pull_expected(theta, targets, weights):
  grad = sum(
      w * (theta - t.mean(0)) for w, t in zip(weights, targets, strict=True)
  )
  losses = [((theta - t) ** 2).sum(1).mean() / 2 for t in targets]
  return theta - grad, losses


def test_an_estimator_is_its_pieces_in_the_outline():
  """The outline shards the agents over the devices, weights the groups
  (3:1), applies the meta-optimiser (SGD, rate 1) to the summed estimates,
  names the logs, carries the agents to the next step and skips a
  non-finite update."""
  assert len(jax.devices()) >= 2, "conftest.py forces two host devices"
  stand_in = types.SimpleNamespace(is_jittable=True, axis_name=None)
  groups = [
      meta_step.AgentGroup("a", stand_in, stand_in, stand_in, 2, weight=3.0),
      meta_step.AgentGroup("b", stand_in, stand_in, stand_in, 2, weight=1.0),
  ]
  program = _Pull(
      groups, meta_step.PopulationConfig(), optax.sgd(1.0), jax.devices()[:2]
  )
  state = program.init(jax.random.PRNGKey(0), jnp.zeros(2))
  theta = np.zeros(2)
  targets = [np.asarray(a) for a in state.agents]
  for step in (1, 2):
    state, logs = program.step(state)
    theta, losses = _pull_expected(theta, targets, (0.75, 0.25))
    targets = [t + 1 for t in targets]
    assert int(state.step) == step
    np.testing.assert_allclose(state.meta_params, theta, rtol=1e-6)
    np.testing.assert_allclose(logs["a/meta_loss"], losses[0], rtol=1e-6)
    np.testing.assert_allclose(
        logs["meta_loss"], 0.75 * losses[0] + 0.25 * losses[1], rtol=1e-6
    )
    assert float(logs["meta_update_skipped"]) == 0
    for agents, want in zip(state.agents, targets, strict=True):
      np.testing.assert_array_equal(agents, want)
      assert len(agents.sharding.device_set) == 2
  poisoned = state.replace(agents=(state.agents[0], state.agents[1] * np.nan))
  after, logs = program.step(poisoned)
  assert float(logs["meta_update_skipped"]) == 1
  np.testing.assert_array_equal(after.meta_params, state.meta_params)
