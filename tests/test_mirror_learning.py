"""Mirror-learning drifts and the DPO and LPO rules built on PPO."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco.update_rules import base
from disco.update_rules import drift
from disco.update_rules import mirror_learning
from disco.update_rules import ppo
from disco.update_rules import registry

from test_ppo import _context
from test_ppo import _inputs

# A grid of log-ratios and advantages that crosses r = 1 and A = 0.
LOG_R = jnp.linspace(-1.5, 1.5, 61)
ADVS = jnp.linspace(-4.0, 4.0, 41)
GRID_LOG_R, GRID_ADVS = jnp.meshgrid(LOG_R, ADVS, indexing="ij")


def _lpo(seed, **kwargs):
  rule = mirror_learning.LPO(init="random", **kwargs)
  params = rule.init_meta_params(jax.random.PRNGKey(seed))
  # Scale the weights up so the network is far from 0 off r = 1.
  return rule, jax.tree.map(lambda w: 3.0 * w, params)


@pytest.mark.parametrize("features", sorted(drift.FEATURES))
@pytest.mark.parametrize("hidden_size", [0, 16])
@pytest.mark.parametrize("ppo_base", [True, False])
def test_learned_drift_meets_the_mirror_conditions(
    features, hidden_size, ppo_base
):
  """For random parameters: f >= 0 on the grid, f(1, A) = 0 and
  df/dr(1, A) = 0 for every A."""
  for seed in range(3):
    rule, params = _lpo(
        seed, features=features, hidden_size=hidden_size, ppo_base=ppo_base
    )
    values = rule.drift_from_params(params, GRID_LOG_R, GRID_ADVS)
    assert bool(jnp.all(values >= 0.0))
    assert float(jnp.abs(values).max()) > 1e-2  # not trivially zero
    at_one = rule.drift_from_params(params, jnp.zeros_like(ADVS), ADVS)
    np.testing.assert_array_equal(at_one, 0.0)
    # d f / d r = d f / d log r at r = 1.
    slope = jax.vmap(
        jax.grad(
            lambda lr, a, rule=rule, params=params: rule.drift_from_params(
                params, lr, a
            )
        )
    )(jnp.zeros_like(ADVS), ADVS)
    np.testing.assert_array_equal(slope, 0.0)


def test_lpo_meta_parameters_are_the_papers():
  """8 features, 128 tanh units, no biases: 1,152 parameters; the zeros
  initialisation is PPO's drift less the ReLU offset."""
  rule = mirror_learning.LPO()
  params = rule.init_meta_params(jax.random.PRNGKey(0))
  sizes = sorted(x.size for x in jax.tree.leaves(params))
  assert sizes == [128, 1024]
  values = rule.drift_from_params(params, GRID_LOG_R, GRID_ADVS)
  expected = jax.nn.relu(
      drift.ppo_drift(GRID_LOG_R, GRID_ADVS, 0.2) - drift.LPO_OFFSET
  )
  np.testing.assert_allclose(values, expected, atol=1e-7)


def test_ppo_drift_is_ppos_clipped_objective():
  r = jnp.exp(GRID_LOG_R)
  clipped = jnp.minimum(r * GRID_ADVS, jnp.clip(r, 0.8, 1.2) * GRID_ADVS)
  np.testing.assert_allclose(
      r * GRID_ADVS - drift.ppo_drift(GRID_LOG_R, GRID_ADVS, 0.2),
      clipped,
      rtol=1e-6,
      atol=1e-6,
  )


@pytest.mark.parametrize(
    "r, adv, expected",
    [
        # A >= 0: relu((r - 1) A - alpha tanh((r - 1) A / alpha)).
        (1.5, 2.0, 1.0 - 2.0 * np.tanh(0.5)),
        (0.5, 2.0, 0.0),  # (r - 1) A < 0: x - alpha tanh(x / alpha) < 0
        (1.0, 3.0, 0.0),
        # A < 0: relu(log(r) A - beta tanh(log(r) A / beta)).
        (0.5, -1.0, np.log(2.0) - 0.6 * np.tanh(np.log(2.0) / 0.6)),
        (2.0, -1.0, 0.0),
        (1.0, -2.0, 0.0),
    ],
)
def test_dpo_drift_against_hand_computed_values(r, adv, expected):
  value = drift.dpo_drift(jnp.log(jnp.float32(r)), jnp.float32(adv), 2.0, 0.6)
  np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-7)


def test_dpo_objective_derivatives():
  """The derivatives of r A - f: A sech^2((r - 1) A / alpha) for A > 0 and
  r > 1; A - (A / r) tanh^2(A log r / beta) for A < 0 and r < 1 (positive
  for small r: the rollback)."""
  objective = lambda r, a: r * a - drift.dpo_drift(jnp.log(r), a, 2.0, 0.6)
  grad = jax.grad(objective)
  r, a = jnp.float32(1.7), jnp.float32(1.3)
  np.testing.assert_allclose(
      grad(r, a), a / jnp.cosh((r - 1) * a / 2.0) ** 2, rtol=1e-5
  )
  r, a = jnp.float32(0.2), jnp.float32(-1.1)
  expected = a - (a / r) * jnp.tanh(a * jnp.log(r) / 0.6) ** 2
  np.testing.assert_allclose(grad(r, a), expected, rtol=1e-5)
  assert float(expected) > 0.0


def _loss_and_grads(rule, inputs, meta_params=None):
  context = _context()
  if meta_params is not None:
    context = base.LearnerContext(
        **{**vars(context), "meta_params": meta_params}
    )

  def loss(agent_out):
    x = inputs.replace(agent_out=agent_out)
    meta_out, _ = rule.unroll_meta_net(x, context)
    policy, _ = rule.agent_loss(x, meta_out, backprop=False)
    value, _ = rule.agent_loss_no_meta(x, meta_out)
    return jnp.sum(policy + value), (policy, value)

  grads, (policy, value) = jax.grad(loss, has_aux=True)(inputs.agent_out)
  return policy, value, grads


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_as_a_drift_is_ppo(seed):
  """DriftRule (PPO's drift) gives today's PPO losses and gradients."""
  inputs = _inputs(seed)
  hp = dict(clip_epsilon=0.1)
  ours = _loss_and_grads(mirror_learning.DriftRule(hp), inputs)
  theirs = _loss_and_grads(ppo.PPO(hp), inputs)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_lpo_gradient_flows_through_the_drift():
  """With a random learned drift the policy gradient differs from PPO's,
  and it reads the drift's parameters from the meta-parameters."""
  inputs = _inputs(0)
  rule, params = _lpo(0)
  lpo_policy, _, lpo_grads = _loss_and_grads(rule, inputs, params)
  ppo_policy, _, ppo_grads = _loss_and_grads(ppo.PPO(), inputs)
  assert not np.allclose(lpo_policy, ppo_policy)
  assert not np.allclose(lpo_grads["logits"], ppo_grads["logits"])


def test_registry_entries_use_ppos_agent_and_loop():
  for name in ("dpo", "lpo"):
    entry = registry.get_entry(name)
    assert dict(entry.loop) == registry.PPO_LOOP
    settings = registry.default_settings(name)
    assert dict(settings.network) == dict(
        registry.default_settings("ppo").network
    )
  assert registry.default_settings("dpo").hyper_params["dpo_alpha"] == 2.0
  assert registry.default_settings("dpo").hyper_params["dpo_beta"] == 0.6
  lpo = registry.default_settings("lpo")
  assert lpo.rule_kwargs["features"] == "lu2022"
  assert lpo.rule_kwargs["hidden_size"] == 128


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(features="cubic"), "Unknown drift features 'cubic'"),
        (dict(init="ones"), "Unknown LPO init 'ones'"),
        (dict(hidden_size=-1), "hidden_size must be >= 0"),
    ],
)
def test_bad_lpo_settings(kwargs, message):
  settings = registry.default_settings("lpo")
  settings = settings.replace(rule_kwargs=dict(settings.rule_kwargs, **kwargs))
  with pytest.raises(ValueError, match=message):
    agent_lib.make_agent(settings, 2, num_updates=10)
