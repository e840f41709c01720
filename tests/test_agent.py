"""The agent: optimiser, settings registry, acting and learning steps, and
gradient averaging over a named axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from disco import agent as agent_lib
from disco import optimizers
from disco import types
from disco.networks import agent_nets
from disco.update_rules import agent_settings
from disco.update_rules import registry

import conftest

T, B, A = 3, 2, 3
OBS = (5, 5, 1)


# -------------------------------------------------------------- optimiser ----
def _random_grads(rng):
  return {
      "a": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
      "b": jnp.asarray(rng.normal(scale=1e-3, size=(4,)), jnp.float32),
  }


def test_adam_constant_denominator_matches_optax_adam():
  rng = np.random.default_rng(0)
  params = _random_grads(rng)
  ours = optimizers.scale_by_adam_constant_denominator()
  ref = optax.scale_by_adam()
  s_ours, s_ref = ours.init(params), ref.init(params)
  for _ in range(3):
    grads = _random_grads(rng)
    u_ours, s_ours = ours.update(grads, s_ours)
    u_ref, s_ref = ref.update(grads, s_ref)
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5), u_ours, u_ref
    )
  assert int(s_ours.count) == 3
  jax.tree.map(
      lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6),
      (s_ours.mu, s_ours.nu),
      (s_ref.mu, s_ref.nu),
  )


def test_adam_denominator_gets_no_gradient():
  b1, b2, eps = 0.9, 0.999, 1e-8
  rng = np.random.default_rng(1)
  opt = optimizers.scale_by_adam_constant_denominator(b1, b2, eps)
  state = opt.init(jnp.zeros(5))
  for _ in range(2):
    _, state = opt.update(jnp.asarray(rng.normal(size=5), jnp.float32), state)
  g = jnp.asarray(rng.normal(size=5), jnp.float32)

  def total_update(opt, g):
    return jnp.sum(opt.update(g, state)[0])

  grad = jax.grad(lambda g: total_update(opt, g))(g)
  # Step t=3: d/dg [m_hat / (sqrt(v_hat) + eps)] with v_hat held constant.
  t = 3
  nu = b2 * np.asarray(state.nu, np.float64) + (1 - b2) * np.square(g)
  v_hat = nu / (1 - b2**t)
  expected = (1 - b1) / (1 - b1**t) / (np.sqrt(v_hat) + eps)
  np.testing.assert_allclose(grad, expected, rtol=1e-5)
  # Plain Adam differentiates through the denominator too: a different value.
  grad_adam = jax.grad(
      lambda g: total_update(optax.scale_by_adam(b1, b2, eps), g)
  )(g)
  assert np.all(np.abs(np.asarray(grad_adam) - expected) > 1e-3 * expected)


def test_agent_optimizer_clips_then_scales():
  lr = 0.1
  opt = optimizers.agent_optimizer(learning_rate=lr, max_abs_update=0.5)
  params = jnp.zeros(4)
  # First Adam step: direction g / (|g| + eps), i.e. about sign(g).
  grads = jnp.array([2.0, -3.0, 0.0, 1e-9])
  updates, _ = opt.update(grads, opt.init(params), params)
  np.testing.assert_allclose(
      updates, [-lr * 0.5, lr * 0.5, 0.0, -lr * 1e-9 / (1e-9 + 1e-8)], rtol=1e-5
  )


def test_agent_optimizer_global_norm_clip_and_linear_decay():
  """PPO's options: gradients clipped to a global norm before Adam, no
  elementwise clip, and a learning rate falling linearly to 0."""
  lr, steps = 0.1, 4
  opt = optimizers.agent_optimizer(
      lr, None, max_grad_norm=1.0, adam_eps=1e-5, decay_steps=steps
  )
  params = jnp.zeros(2)
  state = opt.init(params)
  grads = jnp.array([3.0, 4.0])  # norm 5, clipped to norm 1
  reference = optax.chain(
      optax.clip_by_global_norm(1.0),
      optax.adam(optax.linear_schedule(lr, 0.0, steps), eps=1e-5),
  )
  ref_state = reference.init(params)
  for k in range(steps + 1):
    updates, state = opt.update(grads * (k + 1), state, params)
    expected, ref_state = reference.update(grads * (k + 1), ref_state, params)
    np.testing.assert_allclose(updates, expected, rtol=1e-5, atol=1e-8)
  # The first step moves by lr, the last (step `steps`) not at all.
  first, _ = opt.update(grads, opt.init(params), params)
  np.testing.assert_allclose(jnp.abs(first), lr, rtol=1e-4)
  np.testing.assert_allclose(updates, 0.0)
  # Without the options the published chain (and its state) is unchanged.
  assert len(optimizers.agent_optimizer(lr, 1.0).init(params)) == 3


# ------------------------------------------------------------ registries ----
def test_unknown_rule_names_close_matches_and_valid_rules():
  with pytest.raises(ValueError) as info:
    registry.get_entry("actor_critc")
  message = str(info.value)
  assert "'actor_critc'" in message and "Did you mean actor_critic" in message
  for name in ("disco103", "policy_gradient", "mpo", "spo"):
    assert name in message
  with pytest.raises(ValueError, match="policy_gradient"):
    registry.default_settings("nope")


def test_bad_rule_settings_are_a_value_error():
  defaults = registry.default_settings("actor_critic")
  settings = defaults.replace(
      rule_kwargs=dict(defaults.rule_kwargs, no_such_option=1)
  )
  with pytest.raises(ValueError, match="rule_kwargs for rule 'actor_critic'"):
    registry.make_rule(settings)
  with pytest.raises(ValueError, match=r"Unknown agent setting.*optimizer"):
    agent_settings.AgentSettings.from_dict(
        dict(defaults.to_dict(), optimizer="sgd")
    )


def test_unknown_network_setting_lists_valid_ones():
  with pytest.raises(ValueError) as info:
    agent_nets.make_net_config(dict(dense=(8,), bogus_key=1))
  assert "bogus_key" in str(info.value)
  assert "model_lstm_size" in str(info.value)


def test_agent_needs_two_actions():
  with pytest.raises(ValueError, match="num_actions"):
    agent_lib.make_agent(
        registry.default_settings("policy_gradient"), num_actions=1
    )


# --------------------------------------------------------- tiny agents ----
def _settings(rule):
  return registry.default_settings(rule).replace(
      network=dict(
          dense=(8,),
          head_w_init_std=1e-2,
          model_lstm_size=8,
          model_head_hiddens=(8,),
      ),
      learning_rate=0.1,
  )


def _observations(rng, *lead):
  return jnp.asarray(rng.random(lead + OBS) < 0.2, jnp.float32)


def _rollout(agent, params, seed, discounts=None):
  """A ``[T+1, B]`` rollout with random behaviour outputs."""
  rng = np.random.default_rng(seed)
  obs = _observations(rng, T + 1, B)
  out = jax.tree.map(
      lambda s: jnp.asarray(rng.normal(size=s.shape), s.dtype),
      jax.eval_shape(agent.unroll, params, obs),
  )
  if discounts is None:
    discounts = np.ones((T + 1, B), bool)
  return types.ActorRollout(
      observations=obs,
      actions=jnp.asarray(rng.integers(0, A, (T + 1, B)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32),
      **conftest.step_fields(discounts),
      agent_outs=out,
      logits=out["logits"],
  )


@pytest.fixture(scope="module")
def learners():
  """``learner(rule) -> (agent, state, jitted learner_step)``, built once."""
  cache = {}

  def learner(rule):
    if rule not in cache:
      agent = agent_lib.make_agent(_settings(rule), num_actions=A)
      state = jax.jit(agent.initial_learner_state)(
          jax.random.PRNGKey(0), np.zeros(OBS, np.float32)
      )
      cache[rule] = (
          agent,
          state,
          jax.jit(agent.learner_step, static_argnums=4),
      )
    return cache[rule]

  return learner


def _max_abs_diff(a, b):
  return max(
      float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
      for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  )


@pytest.mark.parametrize("rule", ["actor_critic", "policy_gradient"])
def test_actor_step_shapes(rule, learners):
  agent, state, _ = learners(rule)
  params = state.params
  rng = np.random.default_rng(0)
  timestep = types.EnvTimestep(
      observation=_observations(rng, B),
      reward=jnp.array([0.0, 1.0]),
      step_type=jnp.array([types.MID, types.LAST], jnp.int32),
      discount=jnp.array([1.0, 0.0]),
  )
  step = jax.jit(agent.actor_step)(params, jax.random.PRNGKey(1), timestep)
  assert step.actions.shape == (B,) and step.actions.dtype == jnp.int32
  assert np.all((step.actions >= 0) & (step.actions < A))
  assert step.logits.shape == (B, A) and step.logits.dtype == jnp.float32
  # Rollouts keep only the outputs the rule reads from the behaviour policy.
  assert set(step.agent_outs) == set(agent.rule.behaviour_outputs)
  assert set(step.agent_outs) == {"logits"}
  np.testing.assert_array_equal(step.logits, step.agent_outs["logits"])
  np.testing.assert_array_equal(step.discounts, [1.0, 0.0])
  np.testing.assert_array_equal(step.step_types, [types.MID, types.LAST])
  np.testing.assert_array_equal(step.is_last, [False, True])
  np.testing.assert_array_equal(step.rewards, [0.0, 1.0])
  np.testing.assert_array_equal(step.observations, timestep.observation)


@pytest.mark.parametrize("rule", ["actor_critic", "policy_gradient"])
def test_learner_step_jits_and_updates(rule, learners):
  agent, state, step = learners(rule)
  rollout = _rollout(agent, state.params, seed=1)
  new_state, logs = step(jax.random.PRNGKey(0), rollout, state, {}, False)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  assert int(new_state.opt_state[0].count) == 1
  for leaf in jax.tree.leaves(new_state.params):
    assert np.all(np.isfinite(leaf))
  # Every parameter moves by at most the clipped step, and some move.
  delta = _max_abs_diff(new_state.params, state.params)
  assert 0 < delta <= 1.0 * 0.1 + 1e-6  # max_abs_update * learning_rate
  for key in ("total_loss", "global_gradient_norm", "global_update_norm"):
    assert logs[key].shape == () and np.isfinite(logs[key])
  assert logs["global_gradient_norm"] > 0


# Policy gradient normalises its advantages with batch statistics, so the
# statistics must be averaged over the axis as well as the gradients.
AXIS_RULE = "policy_gradient"


@pytest.fixture(scope="module")
def axis_step(learners):
  """The same agent with ``axis_name='i'``, its step vmapped over copies."""
  agent, state, _ = learners(AXIS_RULE)
  axis_agent = agent_lib.Agent(
      rule=agent.rule,
      num_actions=A,
      net_config=agent.net_config,
      learning_rate=0.1,
      max_abs_update=1.0,
      axis_name="i",
  )
  return jax.jit(
      jax.vmap(
          lambda r: axis_agent.learner_step(
              jax.random.PRNGKey(0), r, state, {}, False
          )[0],
          axis_name="i",
      )
  )


def _stack(*trees):
  return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def _copy(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def _concat_batch(r1, r2):
  return jax.tree.map(lambda x, y: jnp.concatenate([x, y], axis=1), r1, r2)


def test_axis_name_averages_gradients(learners, axis_step):
  agent, state, step = learners(AXIS_RULE)
  # Same episode ends in both halves, so each copy's loss averages over the
  # same number of steps and the mean of the copies' losses is the loss of
  # the concatenated batch.
  discounts = np.ones((T + 1, B), bool)
  discounts[2, 1] = False
  r1 = _rollout(agent, state.params, seed=3, discounts=discounts)
  r2 = _rollout(agent, state.params, seed=4, discounts=discounts)
  both = axis_step(_stack(r1, r2))
  p0, p1 = _copy(both.params, 0), _copy(both.params, 1)
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), p0, p1)
  # The copies moved differently alone; together they follow the average.
  alone, _ = step(jax.random.PRNGKey(0), r1, state, {}, False)
  assert _max_abs_diff(alone.params, p0) > 1e-2
  joint, _ = step(
      jax.random.PRNGKey(0), _concat_batch(r1, r2), state, {}, False
  )
  # Adam's first step is about sign(grad): allow a few near-zero gradient
  # entries to round differently.
  for x, y in zip(
      jax.tree.leaves(p0), jax.tree.leaves(joint.params), strict=True
  ):
    close = np.isclose(x, y, atol=1e-4)
    assert close.mean() >= 0.99, (close.mean(), x.shape)
  # Rule statistics are averaged too.
  jax.tree.map(
      lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6),
      _copy(both.rule_state, 0),
      joint.rule_state,
  )
