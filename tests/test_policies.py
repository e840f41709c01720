"""Action distributions (``disco.policies``) against distrax."""

from __future__ import annotations

import distrax
from dm_env import specs
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import policies
from disco.networks import agent_nets

RNG = np.random.default_rng(0)
LOW = np.array([-1.0, 0.0, -3.0], np.float32)
HIGH = np.array([1.0, 2.0, 5.0], np.float32)


def _gaussian(**kwargs) -> policies.Gaussian:
  return policies.Gaussian(3, tuple(LOW), tuple(HIGH), **kwargs)


def _params(*lead) -> jax.Array:
  mean = RNG.normal(size=(*lead, 3))
  log_std = RNG.uniform(-1.5, 0.5, size=(*lead, 3))
  return jnp.asarray(np.concatenate([mean, log_std], -1), jnp.float32)


def test_categorical_matches_distrax():
  policy = policies.Categorical(4)
  logits = jnp.asarray(RNG.normal(size=(5, 4)), jnp.float32)
  other = jnp.asarray(RNG.normal(size=(5, 4)), jnp.float32)
  actions = jnp.array([0, 1, 2, 3, 1])
  dist = distrax.Softmax(logits)
  np.testing.assert_allclose(
      policy.log_prob(logits, actions), dist.log_prob(actions), rtol=1e-6
  )
  np.testing.assert_allclose(policy.entropy(logits), dist.entropy(), rtol=1e-6)
  np.testing.assert_allclose(
      policy.kl(logits, other),
      dist.kl_divergence(distrax.Softmax(other)),
      rtol=1e-5,
      atol=1e-7,
  )
  assert policy.sample(jax.random.PRNGKey(0), logits).shape == (5,)
  assert policy.param_size == 4 and policy.action_shape == ()


def test_gaussian_matches_distrax():
  policy = _gaussian()
  params, other = _params(4), _params(4)
  mean, log_std = np.split(np.asarray(params), 2, -1)
  dist = distrax.MultivariateNormalDiag(mean, np.exp(log_std))
  actions = jnp.asarray(RNG.normal(size=(4, 3)) * 3, jnp.float32)
  np.testing.assert_allclose(
      policy.log_prob(params, actions), dist.log_prob(actions), rtol=1e-5
  )
  np.testing.assert_allclose(policy.entropy(params), dist.entropy(), rtol=1e-5)
  om, ol = np.split(np.asarray(other), 2, -1)
  np.testing.assert_allclose(
      policy.kl(params, other),
      dist.kl_divergence(distrax.MultivariateNormalDiag(om, np.exp(ol))),
      rtol=1e-4,
  )
  # Unsquashed samples are the Gaussian's and may leave the bounds (the
  # environment clips them).
  samples = policy.sample(
      jax.random.PRNGKey(1), jnp.tile(params[:1], (4000, 1))
  )
  np.testing.assert_allclose(samples.mean(0), mean[0], atol=0.1)
  np.testing.assert_allclose(samples.std(0), np.exp(log_std[0]), rtol=0.1)
  np.testing.assert_array_equal(policy.mode(params), mean)


def test_tanh_gaussian_matches_distrax():
  policy = _gaussian(squash=True)
  params = _params(6)
  mean, log_std = np.split(np.asarray(params), 2, -1)
  bijector = distrax.Block(
      distrax.Chain(
          [
              distrax.ScalarAffine((HIGH + LOW) / 2, (HIGH - LOW) / 2),
              distrax.Tanh(),
          ]
      ),
      1,
  )
  dist = distrax.Transformed(
      distrax.MultivariateNormalDiag(mean, np.exp(log_std)), bijector
  )
  actions = policy.sample(jax.random.PRNGKey(2), params)
  assert np.all(actions > LOW) and np.all(actions < HIGH)
  np.testing.assert_allclose(
      policy.log_prob(params, actions),
      dist.log_prob(actions),
      rtol=1e-4,
      atol=1e-4,
  )
  np.testing.assert_allclose(
      policy.mode(params), bijector.forward(jnp.asarray(mean)), rtol=1e-6
  )
  # The entropy bonus is the pre-squash Gaussian's.
  np.testing.assert_allclose(
      policy.entropy(params),
      distrax.MultivariateNormalDiag(mean, np.exp(log_std)).entropy(),
      rtol=1e-5,
  )


def test_policies_are_static_pytrees():
  policy = _gaussian(squash=True)
  assert jax.tree.leaves(policy) == []
  out = jax.jit(lambda p, x: p.log_prob(x, p.mode(x)))(policy, _params(2))
  assert out.shape == (2,)


def test_make_policy_reads_the_action_spec():
  discrete = specs.BoundedArray((), np.int32, 0, 5)
  assert policies.make_policy(discrete) == policies.Categorical(6)
  continuous = specs.BoundedArray((3,), np.float32, LOW, HIGH)
  policy = policies.make_policy(
      continuous, dict(squash=True, log_std="state_dependent")
  )
  assert policy == _gaussian(squash=True, log_std="state_dependent")
  unbounded = specs.Array((2,), np.float32)
  assert policies.make_policy(unbounded).minimum == (-np.inf, -np.inf)


@pytest.mark.parametrize(
    "spec, settings, match",
    [
        (
            specs.Array((2,), np.float32),
            dict(squash=True),
            "finite with minimum < maximum",
        ),
        (specs.Array((2, 2), np.float32), {}, r"vectors \[D\]"),
        (specs.Array((2,), np.float32), dict(sqush=True), "Unknown policy"),
        (specs.Array((2,), np.float32), dict(log_std="x"), "log_std"),
    ],
)
def test_make_policy_rejects_bad_settings(spec, settings, match):
  with pytest.raises(ValueError, match=match):
    policies.make_policy(spec, settings)


@pytest.mark.parametrize("log_std", policies.LOG_STDS)
def test_gaussian_head(log_std):
  policy = _gaussian(log_std=log_std, init_log_std=-0.5)
  spec = dict(logits=jax.ShapeDtypeStruct((6,), np.float32))
  net = agent_nets.make_network(
      agent_nets.NetConfig(dense=(8,)), 6, spec, policy=policy
  )
  obs = jnp.asarray(RNG.normal(size=(5, 4)), jnp.float32)
  params = net.init(jax.random.PRNGKey(0), obs)
  out = net.apply(params, obs)["logits"]
  assert out.shape == (5, 6)
  _, log_stds = policy.mean_and_log_std(out)
  if log_std == "state_independent":
    # One learnt vector, the same in every state, starting at init_log_std.
    np.testing.assert_array_equal(log_stds, -0.5)
    assert hk.data_structures.tree_size(params) == 4 * 8 + 8 + 8 * 3 + 3 + 3
  else:
    # A head per state, shifted so that it starts near init_log_std.
    assert np.std(log_stds) > 0
    np.testing.assert_allclose(log_stds, -0.5, atol=0.2)
