"""PPO: GAE, the clipped losses against hand computations, and learning."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from disco import agent as agent_lib
from disco import types
from disco.environments import registry as env_registry
from disco.training import analysis
from disco.training import loop as loop_lib
from disco.update_rules import base
from disco.update_rules import ppo
from disco.update_rules import registry
from disco.value_fns import returns

# ------------------------------------------------------------------- GAE ----


def _rlax_gae(rewards, discounts, values, lambda_):
  return jax.vmap(
      lambda r, d, v: rlax.truncated_generalized_advantage_estimation(
          r, d, lambda_, v
      ),
      in_axes=1,
      out_axes=1,
  )(rewards, discounts, values)


def test_gae_matches_rlax_with_terminations():
  rng = np.random.default_rng(0)
  t, b = 9, 4
  rewards = jnp.asarray(rng.normal(size=(t, b)), jnp.float32)
  terminal = rng.random((t, b)) < 0.3
  discounts = jnp.asarray(0.9 * (1.0 - terminal), jnp.float32)
  values = jnp.asarray(rng.normal(size=(t + 1, b)), jnp.float32)
  ours = returns.gae(rewards, discounts, values, 0.8)
  np.testing.assert_allclose(
      ours, _rlax_gae(rewards, discounts, values, 0.8), rtol=1e-6
  )
  # A termination bootstraps with 0: the advantage there is r - V(s).
  np.testing.assert_allclose(
      ours[terminal], (rewards - values[:-1])[terminal], rtol=1e-6
  )


def test_gae_cuts_at_a_truncation():
  """Before a truncated transition the estimate is rlax's on the episode's
  own states (bootstrapping from its last state); after it, rlax's on the
  rest; the truncated transition itself gets 0."""
  rng = np.random.default_rng(1)
  t, cut = 8, 3
  rewards = jnp.asarray(rng.normal(size=(t, 2)), jnp.float32)
  discounts = jnp.full((t, 2), 0.95, jnp.float32)
  values = jnp.asarray(rng.normal(size=(t + 1, 2)), jnp.float32)
  truncated = np.zeros((t, 2), bool)
  truncated[cut, 0] = True
  ours = returns.gae(rewards, discounts, values, 0.9, jnp.asarray(truncated))
  before = _rlax_gae(rewards[:cut], discounts[:cut], values[: cut + 1], 0.9)
  after = _rlax_gae(
      rewards[cut + 1 :], discounts[cut + 1 :], values[cut + 1 :], 0.9
  )
  np.testing.assert_allclose(ours[:cut, 0], before[:, 0], rtol=1e-5)
  assert ours[cut, 0] == 0.0
  np.testing.assert_allclose(ours[cut + 1 :, 0], after[:, 0], rtol=1e-5)
  # The other stream is not cut.
  np.testing.assert_allclose(
      ours[:, 1],
      _rlax_gae(rewards, discounts, values, 0.9)[:, 1],
      rtol=1e-5,
  )


# --------------------------------------------------------------- losses ----

T, B, A = 4, 3, 3


def _inputs(seed, truncated=None):
  rng = np.random.default_rng(seed)
  f32 = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
  terminal = np.zeros((T, B), bool)
  terminal[1, 0] = True
  truncated = np.zeros((T, B), bool) if truncated is None else truncated
  return types.UpdateRuleInputs(
      observations=jnp.zeros((T + 1, B, 1)),
      actions=jnp.asarray(rng.integers(0, A, (T + 1, B)), jnp.int32),
      rewards=f32(T, B),
      is_terminal=jnp.asarray(terminal),
      agent_out=dict(logits=f32(T + 1, B, A), v=f32(T + 1, B, 1)),
      behaviour_agent_out=dict(logits=f32(T + 1, B, A), v=f32(T + 1, B, 1)),
      is_truncated=jnp.asarray(truncated),
      mask=jnp.asarray(~truncated, jnp.float32),
  )


def _context():
  return base.LearnerContext(
      meta_params={},
      params={},
      rule_state={},
      unroll_fn=None,
      rng=jax.random.PRNGKey(0),
  )


def _losses(rule, inputs):
  meta_out, _ = rule.unroll_meta_net(inputs, _context())
  policy, _ = rule.agent_loss(inputs, meta_out, backprop=False)
  value, _ = rule.agent_loss_no_meta(inputs, meta_out)
  return np.asarray(policy), np.asarray(value)


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _hand_ppo(inputs, hp, normalize, clip_value):
  """PPO's per-transition losses with plain loops, in float64."""
  x = jax.tree.map(lambda a: np.asarray(a, np.float64), inputs)
  v_old, v = x.behaviour_agent_out["v"][..., 0], x.agent_out["v"][..., 0]
  g, lam, eps = hp["discount_factor"], hp["gae_lambda"], hp["clip_epsilon"]
  adv = np.zeros((T, B))
  for b in range(B):
    acc = 0.0
    for t in reversed(range(T)):
      if x.is_truncated[t, b]:
        acc = 0.0
        continue
      cont = 1.0 - x.is_terminal[t, b]
      delta = x.rewards[t, b] + g * cont * v_old[t + 1, b] - v_old[t, b]
      acc = delta + g * lam * cont * acc
      adv[t, b] = acc
  target = adv + v_old[:-1]
  pg_adv = adv
  if normalize:
    kept = adv[x.mask > 0]
    pg_adv = (adv - kept.mean()) / (kept.std() + 1e-8)
  a = np.asarray(inputs.actions)[:-1, :, None]
  log_pi = np.take_along_axis(_log_softmax(x.agent_out["logits"][:-1]), a, -1)
  log_mu = np.take_along_axis(
      _log_softmax(x.behaviour_agent_out["logits"][:-1]), a, -1
  )
  ratio = np.exp(log_pi - log_mu)[..., 0]
  surrogate = np.minimum(
      ratio * pg_adv, np.clip(ratio, 1 - eps, 1 + eps) * pg_adv
  )
  log_p = _log_softmax(x.agent_out["logits"][:-1])
  entropy = -(np.exp(log_p) * log_p).sum(-1)
  policy = -surrogate - hp["entropy_cost"] * entropy
  value = (v[:-1] - target) ** 2
  if clip_value:
    clipped = v_old[:-1] + np.clip(v[:-1] - v_old[:-1], -eps, eps)
    value = np.maximum(value, (clipped - target) ** 2)
  return policy, hp["value_cost"] * 0.5 * value


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("clip_value", [True, False])
def test_losses_match_a_hand_computation(normalize, clip_value):
  truncated = np.zeros((T, B), bool)
  truncated[2, 1] = True
  inputs = _inputs(0, truncated)
  # Large enough changes that both clips are active somewhere.
  hp = dict(ppo.PPO_HYPER_PARAMS, clip_epsilon=0.1)
  rule = ppo.PPO(hp, normalize_advantages=normalize, clip_value=clip_value)
  policy, value = _losses(rule, inputs)
  expected_policy, expected_value = _hand_ppo(inputs, hp, normalize, clip_value)
  np.testing.assert_allclose(policy, expected_policy, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(value, expected_value, rtol=1e-4, atol=1e-6)


def _one_transition(agent_out, behaviour_agent_out):
  """Inputs of one transition (``T = 1``) per stream, action 0 taken; the
  outputs are ``[2, B, ...]``."""
  b = jax.tree.leaves(agent_out)[0].shape[1]
  return types.UpdateRuleInputs(
      observations=jnp.zeros((2, b, 1)),
      actions=jnp.zeros((2, b), jnp.int32),
      rewards=jnp.zeros((1, b)),
      is_terminal=jnp.zeros((1, b), bool),
      agent_out=agent_out,
      behaviour_agent_out=behaviour_agent_out,
  )


def test_surrogate_gradient_vanishes_outside_the_clip_range():
  """Ratio 1.5 or 0.5 with clip 0.2: the policy loss has no gradient where
  the clip binds (ratio above 1.2 with A > 0, below 0.8 with A < 0) and has
  one where it does not (the pessimistic, unclipped side)."""
  rule = ppo.PPO(dict(entropy_cost=0.0, clip_epsilon=0.2))
  # Behaviour: uniform over 2 actions; action 0 taken everywhere.
  beh = jnp.zeros((2, 4, 2))
  log3 = float(np.log(3.0))
  logits = jnp.asarray(
      [[[log3, 0.0], [0.0, log3], [log3, 0.0], [0.0, log3]]] * 2
  )  # pi(0) = 0.75, 0.25, 0.75, 0.25: ratios 1.5, 0.5, 1.5, 0.5
  advs = jnp.asarray([[1.0, -1.0, -1.0, 1.0]])

  def loss(logits):
    inputs = _one_transition(dict(logits=logits), dict(logits=beh))
    meta_out = dict(pg_advs=advs, raw_advs=advs)
    return rule.agent_loss(inputs, meta_out, backprop=False)[0].sum()

  np.testing.assert_allclose(loss(logits), -(1.2 - 0.8 - 1.5 + 0.5), rtol=1e-5)
  grads = np.asarray(jax.grad(loss)(logits))[0]
  np.testing.assert_array_equal(grads[:2], 0.0)  # the clip binds
  # Unclipped: lowering pi(0) lowers the loss where A < 0 (column 2), and
  # raising it does where A > 0 (column 3).
  assert grads[2, 0] > 1e-3 and grads[3, 0] < -1e-3


@pytest.mark.parametrize("clip_value", [True, False])
def test_value_clipping(clip_value):
  """V_old 0, target 1, clip 0.2: at V = 0.5 the clipped prediction 0.2 is
  further from the target, so the clipped loss binds and has no gradient;
  at V = -0.5 the unclipped one binds."""
  rule = ppo.PPO(dict(clip_epsilon=0.2, value_cost=1.0), clip_value=clip_value)

  def loss(v):
    values = jnp.stack([v, jnp.zeros_like(v)])[..., None]  # [T+1, B, 1]
    inputs = _one_transition(dict(v=values), dict(v=jnp.zeros((2, 2, 1))))
    meta_out = dict(value_targets=jnp.ones((1, 2)))
    return rule.agent_loss_no_meta(inputs, meta_out)[0][0]

  v = jnp.asarray([0.5, -0.5])
  value, grads = loss(v), jax.jacfwd(lambda v: loss(v).sum())(v)
  if clip_value:
    np.testing.assert_allclose(value, [0.5 * 0.8**2, 0.5 * 1.5**2], rtol=1e-6)
    np.testing.assert_allclose(grads, [0.0, -1.5], rtol=1e-6)
  else:
    np.testing.assert_allclose(value, [0.5 * 0.5**2, 0.5 * 1.5**2], rtol=1e-6)
    np.testing.assert_allclose(grads, [-0.5, -1.5], rtol=1e-6)


def test_targets_come_from_the_behaviour_outputs():
  """The advantages and value targets use the acting network's values, so
  they stay fixed while a rollout is reused."""
  rule = ppo.PPO()
  inputs = _inputs(3)
  moved = inputs.replace(
      agent_out=jax.tree.map(lambda x: x + 1.0, inputs.agent_out)
  )
  a, _ = rule.unroll_meta_net(inputs, _context())
  b, _ = rule.unroll_meta_net(moved, _context())
  jax.tree.map(np.testing.assert_array_equal, a, b)


def test_registry_defaults_are_purejaxrls():
  settings = registry.default_settings("ppo")
  assert settings.learning_rate == 2.5e-4 and settings.max_grad_norm == 0.5
  assert settings.adam_eps == 1e-5 and settings.anneal_learning_rate
  assert settings.max_abs_update is None
  network = settings.network
  assert network["dense"] == (64, 64)
  assert network["activation"] == "tanh"
  assert network["separate_torsos"] and network["activate_final"]
  assert dict(settings.hyper_params) == dict(
      discount_factor=0.99,
      gae_lambda=0.95,
      clip_epsilon=0.2,
      entropy_cost=0.01,
      value_cost=0.5,
      reward_scale=1.0,
  )
  with pytest.raises(ValueError, match="num_updates"):
    agent_lib.make_agent(settings, 2)


# ------------------------------------------------------------- learning ----


def _learn(env_name, env_settings, seeds, config, settings, iterations):
  env = env_registry.make_env(env_name, config.num_envs, **env_settings)
  agent = agent_lib.make_agent(
      settings, env.num_actions, num_updates=config.num_updates(iterations)
  )
  loop = loop_lib.EvalLoop(agent, env, config)
  _, metrics = loop.run(loop.init_seeds(seeds), {}, iterations)
  return metrics


@pytest.mark.parametrize("rule", ["ppo", "dpo"])
def test_ppo_learns_catch(rule):
  """CI version: Catch 5x5, one seed, 16 envs x 16 steps, 2 epochs x 4
  minibatches; DPO (PPO with DPO's drift) too."""
  settings = registry.default_settings(rule)
  settings = settings.replace(
      learning_rate=3e-3, network=dict(settings.network, dense=(32,))
  )
  config = loop_lib.LoopConfig(
      num_envs=16,
      rollout_len=16,
      batch_size=16,
      replay_capacity=0,
      min_replay_size=0,
      update_epochs=2,
      num_minibatches=4,
  )
  metrics = _learn("catch", dict(rows=5, columns=5), [0], config, settings, 100)
  score = analysis.final_scores(metrics, 200)
  assert score[0] >= 0.8, score


@pytest.mark.slow
def test_ppo_solves_cartpole_with_purejaxrls_settings():
  """purejaxrl's CartPole-v1 setting (500k env steps, 3 seeds): every seed
  ends near the maximum return of 500, as purejaxrl's PPO does (about a
  minute here)."""
  config = loop_lib.LoopConfig(**registry.PPO_LOOP)
  metrics = _learn(
      "gymnax/CartPole-v1",
      {},
      [0, 1, 2],
      config,
      registry.default_settings("ppo"),
      500_000 // config.env_steps_per_iteration,
  )
  scores = analysis.final_scores(metrics, 100)
  assert (scores >= 475).all(), scores
