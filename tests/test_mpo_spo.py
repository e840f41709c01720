"""MPO and SPO update rules: losses and duals on hand-computed cases, the SMC
search over copies of Catch, and learning Catch with the evaluation loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import types
from disco.environments import catch
from disco.environments import catch_dm_env
from disco.training import analysis
from disco.training import loop
from disco.update_rules import base
from disco.update_rules import mpo
from disco.update_rules import mpo_common
from disco.update_rules import registry
from disco.update_rules import spo

A = 3
HP = dict(mpo.MPO_HYPER_PARAMS)


def _np_softmax(x):
  x = np.asarray(x, np.float64)
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np_kl(p, q):
  p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
  return np.sum(p * (np.log(p) - np.log(q)), axis=-1)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


# ------------------------------------------------------------ MPO pieces ----
def test_exact_e_step_hand_computed():
  # Q = [1, 0], prior [0.25, 0.75], eta = 0.5:
  # q ∝ [0.25 e^2, 0.75], Z = 0.25 e^2 + 0.75.
  q_values = jnp.array([[1.0, 0.0]])
  prior_logits = jnp.log(jnp.array([[0.25, 0.75]]))
  log_q, log_z = mpo_common.exact_e_step(
      q_values, prior_logits, jnp.asarray(0.5)
  )
  z = 0.25 * np.e**2 + 0.75
  np.testing.assert_allclose(
      np.exp(log_q), [[0.25 * np.e**2 / z, 0.75 / z]], rtol=1e-5
  )
  np.testing.assert_allclose(log_z, [np.log(z)], rtol=1e-5)
  np.testing.assert_allclose(
      mpo_common.temperature_loss(0.5, log_z, 0.01),
      [0.5 * (0.01 + np.log(z))],
      rtol=1e-5,
  )


def test_sample_e_step_hand_computed():
  adv = jnp.array([[1.0, 0.0, -1.0, 0.0]])
  weights, log_z = mpo_common.sample_e_step(adv, jnp.asarray(2.0))
  e = np.exp(np.array([0.5, 0.0, -0.5, 0.0]))
  np.testing.assert_allclose(weights, [e / e.sum()], rtol=1e-5)
  np.testing.assert_allclose(log_z, [np.log(e.sum()) - np.log(4)], rtol=1e-5)


def test_dual_softplus_and_clamp():
  duals = mpo_common.init_duals(3.0, 3.0)
  np.testing.assert_allclose(
      mpo_common.dual_value(duals["log_temperature"]),
      np.log1p(np.exp(3.0)),
      rtol=1e-6,
  )
  assert duals["log_alpha"].shape == (1,)
  clamped = mpo_common.clamp_duals(
      dict(log_temperature=jnp.array([-30.0]), log_alpha=jnp.array([-5.0]))
  )
  np.testing.assert_array_equal(clamped["log_temperature"], [-18.0])
  np.testing.assert_array_equal(clamped["log_alpha"], [-5.0])


def test_temperature_gradient_is_epsilon_minus_realised_kl():
  rule = mpo.MPO()
  uniform = jnp.zeros((4, A))
  q_values = jnp.array(
      [[5.0, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 2.0, 2.0], [-1.0, 0.0, 3.0]]
  )
  raw = 0.3
  duals = dict(log_temperature=jnp.array([raw]), log_alpha=jnp.array([1.0]))
  grads, (log_q, *_) = jax.grad(rule.dual_loss, has_aux=True)(
      duals, q_values, uniform, uniform, None
  )
  # With a uniform prior (and online policy) the policy term has no
  # temperature gradient, so dL/d eta = epsilon - mean KL(q || pi_target).
  eta = np.log1p(np.exp(raw))
  q = _np_softmax(np.asarray(q_values) / eta)
  kl = _np_kl(q, np.full((4, A), 1.0 / A)).mean()
  np.testing.assert_allclose(np.exp(log_q), q, rtol=1e-5)
  np.testing.assert_allclose(
      grads["log_temperature"],
      [(HP["epsilon"] - kl) * _sigmoid(raw)],
      rtol=1e-4,
  )
  # Online == target: KL is 0, so dL/d alpha = epsilon_policy.
  np.testing.assert_allclose(
      grads["log_alpha"], [HP["epsilon_policy"] * _sigmoid(1.0)], rtol=1e-4
  )


def _mpo_inputs(
    q_values,
    target_logits,
    online_logits,
    rewards=None,
    is_terminal=None,
    actions=None,
    behaviour_logits=None,
):
  """Rule inputs with ``[T+1, B, A]`` outputs; returns (inputs, unroll_fn)."""
  q_values = jnp.asarray(q_values, jnp.float32)
  t1, b = q_values.shape[:2]
  target_out = dict(q=q_values, logits=jnp.asarray(target_logits, jnp.float32))
  online = dict(
      q=jnp.zeros_like(q_values), logits=jnp.asarray(online_logits, jnp.float32)
  )
  behaviour = (
      online
      if behaviour_logits is None
      else dict(online, logits=jnp.asarray(behaviour_logits, jnp.float32))
  )
  inputs = types.UpdateRuleInputs(
      observations=jnp.zeros((t1, b, 1)),
      actions=(
          jnp.zeros((t1, b), jnp.int32)
          if actions is None
          else jnp.asarray(actions, jnp.int32)
      ),
      rewards=(
          jnp.zeros((t1 - 1, b))
          if rewards is None
          else jnp.asarray(rewards, jnp.float32)
      ),
      is_terminal=(
          jnp.zeros((t1 - 1, b), bool)
          if is_terminal is None
          else jnp.asarray(is_terminal)
      ),
      agent_out=online,
      behaviour_agent_out=behaviour,
  )
  return inputs, lambda params, obs: target_out


def _context(rule_state, unroll_fn, params=None):
  return base.LearnerContext(
      meta_params={},
      params=dict(w=jnp.ones(2)) if params is None else params,
      rule_state=rule_state,
      unroll_fn=unroll_fn,
      rng=jax.random.PRNGKey(1),
  )


def _mpo_update(rule, inputs, unroll_fn):
  state = rule.init_rule_state(jax.random.PRNGKey(0), dict(w=jnp.ones(2)))
  meta_out, new_state = jax.jit(
      lambda s, i: rule.unroll_meta_net(i, _context(s, unroll_fn))
  )(state, inputs)
  return state, meta_out, new_state


@pytest.mark.parametrize("q_scale,eta_grows", [(5.0, True), (0.0, False)])
def test_temperature_grows_when_realised_kl_exceeds_epsilon(q_scale, eta_grows):
  rule = mpo.MPO()
  # Uniform target and online policies; Q = [q_scale, 0, 0] everywhere.
  q_values = jnp.zeros((3, 2, A)).at[..., 0].set(q_scale)
  inputs, unroll_fn = _mpo_inputs(
      q_values, jnp.zeros((3, 2, A)), jnp.zeros((3, 2, A))
  )
  state, meta_out, new_state = _mpo_update(rule, inputs, unroll_fn)
  kl = float(meta_out["stats"]["kl_nonparametric"])
  assert (kl > HP["epsilon"]) == eta_grows
  old = float(state["duals"]["log_temperature"][0])
  new = float(new_state["duals"]["log_temperature"][0])
  assert (new > old) == eta_grows and new != old
  # The loss uses the pre-update temperature.
  np.testing.assert_allclose(
      meta_out["stats"]["temperature"], np.log1p(np.exp(old)), rtol=1e-6
  )


@pytest.mark.parametrize("shift,alpha_grows", [(2.0, True), (0.0, False)])
def test_alpha_grows_when_policy_kl_exceeds_epsilon_policy(shift, alpha_grows):
  rule = mpo.MPO()
  target_logits = jnp.zeros((3, 2, A))
  online_logits = target_logits.at[..., 1].set(shift)
  inputs, unroll_fn = _mpo_inputs(
      jnp.zeros((3, 2, A)), target_logits, online_logits
  )
  state, meta_out, new_state = _mpo_update(rule, inputs, unroll_fn)
  kl_rel = float(meta_out["stats"]["kl_mean_rel"])
  assert (kl_rel > 1.0) == alpha_grows
  old = float(state["duals"]["log_alpha"][0])
  new = float(new_state["duals"]["log_alpha"][0])
  assert (new > old) == alpha_grows and new != old


def test_m_step_loss_kl_directions_and_gradient():
  rule = mpo.MPO()
  rng = np.random.default_rng(0)
  target_logits = rng.normal(size=(2, 1, A)) * 2
  online_logits = rng.normal(size=(2, 1, A)) * 2
  q_values = rng.normal(size=(2, 1, A)) * 3
  inputs, unroll_fn = _mpo_inputs(q_values, target_logits, online_logits)
  _, meta_out, _ = _mpo_update(rule, inputs, unroll_fn)
  eta = float(meta_out["stats"]["temperature"])
  alpha = float(meta_out["alpha"])
  pi_t = _np_softmax(target_logits[:1])
  pi_o = _np_softmax(online_logits[:1])
  q = pi_t * np.exp(q_values[:1] / eta)
  q /= q.sum(-1, keepdims=True)
  # E-step diagnostic: KL(q || pi_target).
  np.testing.assert_allclose(
      meta_out["stats"]["kl_nonparametric"], _np_kl(q, pi_t).mean(), rtol=1e-4
  )
  # M-step: CE(q, pi_online) + alpha * KL(pi_target || pi_online).
  loss, logs = rule.agent_loss(inputs, meta_out, backprop=False)
  ce = -np.sum(q * np.log(pi_o), -1)
  kl = _np_kl(pi_t, pi_o)
  np.testing.assert_allclose(loss, ce + alpha * kl, rtol=1e-4)
  np.testing.assert_allclose(logs["loss_kl"], alpha * kl, rtol=1e-4)
  assert not np.allclose(kl, _np_kl(pi_o, pi_t), rtol=1e-2)

  def total(logits):
    out = dict(inputs.agent_out, logits=logits)
    return rule.agent_loss(inputs.replace(agent_out=out), meta_out, False)[
        0
    ].sum()

  grad = jax.grad(total)(inputs.agent_out["logits"])
  np.testing.assert_allclose(
      grad[:1], (pi_o - q) + alpha * (pi_o - pi_t), rtol=1e-4, atol=1e-6
  )
  np.testing.assert_array_equal(grad[1], 0.0)  # the bootstrap state


def test_q_targets_lambda_and_retrace_hand_computed():
  gamma, lambda_ = 0.9, 0.5
  hp = dict(discount_factor=gamma, td_lambda=lambda_)
  q_values = np.array(
      [[[1.0, 2.0, 0.0]], [[0.5, -1.0, 3.0]], [[2.0, 0.0, 1.0]]]
  )
  logits = np.log(np.array([[[0.2, 0.5, 0.3]]] * 3))
  v = np.sum(_np_softmax(logits) * q_values, -1)[:, 0]
  actions = np.array([[0], [2], [1]])
  rewards = np.array([[0.5], [1.0]])
  common = dict(rewards=rewards, actions=actions, behaviour_logits=logits)

  inputs, unroll_fn = _mpo_inputs(q_values, logits, logits, **common)
  _, out, _ = _mpo_update(mpo.MPO(hp, q_target="lambda"), inputs, unroll_fn)
  g1 = rewards[1, 0] + gamma * v[2]
  g0 = rewards[0, 0] + gamma * ((1 - lambda_) * v[1] + lambda_ * g1)
  np.testing.assert_allclose(out["q_target"][:, 0], [g0, g1], rtol=1e-5)

  # On-policy Retrace (rho = 1): G_t = r + g (V' + lambda (G' - Q'(a'))).
  _, out, _ = _mpo_update(mpo.MPO(hp, q_target="retrace"), inputs, unroll_fn)
  g0 = rewards[0, 0] + gamma * (v[1] + lambda_ * (g1 - q_values[1, 0, 2]))
  np.testing.assert_allclose(out["q_target"][:, 0], [g0, g1], rtol=1e-5)

  # A terminal transition does not bootstrap.
  inputs, unroll_fn = _mpo_inputs(
      q_values, logits, logits, is_terminal=[[False], [True]], **common
  )
  _, out, _ = _mpo_update(mpo.MPO(hp, q_target="lambda"), inputs, unroll_fn)
  g1 = rewards[1, 0]
  g0 = rewards[0, 0] + gamma * ((1 - lambda_) * v[1] + lambda_ * g1)
  np.testing.assert_allclose(out["q_target"][:, 0], [g0, g1], rtol=1e-5)

  # The Q loss regresses Q(s_t, a_t) on the targets.
  online_q = jnp.asarray(q_values, jnp.float32) * 0.5
  inputs = inputs.replace(agent_out=dict(inputs.agent_out, q=online_q))
  q_loss, _ = mpo.MPO(hp).agent_loss_no_meta(inputs, out)
  q_a = np.take_along_axis(np.asarray(online_q[:-1, 0]), actions[:-1], 1)
  np.testing.assert_allclose(
      q_loss[:, 0],
      0.5 * (np.asarray(out["q_target"][:, 0]) - q_a[:, 0]) ** 2,
      rtol=1e-5,
  )


def test_target_params_polyak_and_bad_q_target():
  rule = mpo.MPO()
  inputs, unroll_fn = _mpo_inputs(
      jnp.zeros((2, 1, A)), jnp.zeros((2, 1, A)), jnp.zeros((2, 1, A))
  )
  state = rule.init_rule_state(jax.random.PRNGKey(0), dict(w=jnp.zeros(2)))
  _, new_state = rule.unroll_meta_net(inputs, _context(state, unroll_fn))
  np.testing.assert_allclose(
      new_state["target_params"]["w"], HP["target_update_tau"]
  )
  with pytest.raises(ValueError, match="q_target"):
    mpo.MPO(q_target="sarsa")
  with pytest.raises(ValueError, match=r"Unknown hyper-parameter.*'td_lamda'"):
    mpo.MPO(dict(td_lamda=0.9))


# ------------------------------------------------------------------ SPO ----
ROWS = COLUMNS = 5


def _spo_agent(head_std=1e-2, **rule_kwargs):
  settings = registry.default_settings("spo")
  settings = settings.replace(
      network=dict(
          dense=(16,),
          head_w_init_std=head_std,
          model_lstm_size=8,
          model_head_hiddens=(8,),
      ),
      rule_kwargs=dict(settings.rule_kwargs, **rule_kwargs),
  )
  return agent_lib.make_agent(settings, num_actions=A)


def _catch_state(games, seed=0):
  games = jnp.asarray(games, jnp.int32)
  return catch.CatchState(
      game=games, rng=jax.random.split(jax.random.PRNGKey(seed), games.shape[0])
  )


def _acting(agent, env, games, seed=0):
  """Parameters, agent outputs and acting context at hand-made games."""
  state = jax.jit(agent.initial_learner_state)(
      jax.random.PRNGKey(seed), np.zeros((ROWS, COLUMNS, 1), np.float32)
  )
  env_state = _catch_state(games)
  obs = jax.vmap(lambda g: catch.render(g, ROWS, COLUMNS))(env_state.game)
  agent_out = agent.apply(state.params, obs)
  context = base.ActingContext(
      params=state.params,
      apply_fn=agent.apply,
      rule_state=state.rule_state,
      env=env,
      env_state=env_state,
  )
  return state, agent_out, context


def _jit_select(rule, context):
  """``select_action`` jitted with the context's arrays as arguments."""

  def select(rng, agent_out, params, rule_state, env_state):
    return rule.select_action(
        rng,
        agent_out,
        base.ActingContext(
            params=params,
            apply_fn=context.apply_fn,
            rule_state=rule_state,
            env=context.env,
            env_state=env_state,
        ),
    )

  jitted = jax.jit(select)
  return lambda rng, agent_out: jitted(
      rng, agent_out, context.params, context.rule_state, context.env_state
  )


def test_spo_depth_one_without_resampling_is_sample_based_mpo():
  n = 6
  agent = _spo_agent(
      head_std=1.0,
      num_particles=n,
      search_depth=1,
      resampling_period=2,
      search_gamma=0.9,
  )
  rule = agent.rule
  games = [[3, 1, 4, 2], [3, 2, 4, 2], [1, 0, 4, 3], [2, 4, 4, 1]]
  env = catch.Catch(len(games), rows=ROWS, columns=COLUMNS)
  state, agent_out, context = _acting(agent, env, games)
  duals = dict(state.rule_state["duals"], log_temperature=jnp.array([0.2]))
  context = base.ActingContext(
      params=context.params,
      apply_fn=context.apply_fn,
      rule_state=dict(state.rule_state, duals=duals),
      env=env,
      env_state=context.env_state,
  )
  actions, extras = _jit_select(rule, context)(jax.random.PRNGKey(3), agent_out)
  sampled = np.asarray(extras["search_actions"])
  assert sampled.shape == (len(games), n)
  assert extras["search_weights"].shape == extras["search_advantages"].shape
  # One-step advantages r + gamma_s * d * V(s') - V(s), stepping copies by hand.
  v0 = np.asarray(agent_out["v"][:, 0])
  adv = np.zeros(sampled.shape)
  for i in range(n):
    _, ts = env.step(context.env_state, sampled[:, i])
    v1 = np.asarray(agent.apply(state.params, ts.observation)["v"][:, 0])
    adv[:, i] = ts.reward + 0.9 * ts.discount * v1 - v0
  assert np.any(adv > 0.5) and np.any(adv < -0.5)  # catches and misses
  eta = np.log1p(np.exp(0.2))
  np.testing.assert_allclose(extras["search_advantages"], adv, atol=1e-5)
  np.testing.assert_allclose(
      extras["search_weights"], _np_softmax(adv / eta), atol=1e-5
  )
  # The action played is one of the sampled root actions.
  assert all(
      a in row for a, row in zip(np.asarray(actions), sampled, strict=True)
  )

  # SPO's losses on these statistics are sample-based MPO's.
  two = lambda x: jnp.stack([x, x])
  inputs = types.UpdateRuleInputs(
      observations=two(jnp.zeros((len(games), 1))),
      actions=two(actions),
      rewards=jnp.zeros((1, len(games))),
      is_terminal=jnp.zeros((1, len(games)), bool),
      agent_out=jax.tree.map(two, agent_out),
      behaviour_agent_out=jax.tree.map(two, agent_out),
      actor_extras=jax.tree.map(two, extras),
  )
  meta_out = dict(
      target_logits=agent_out["logits"][None], alpha=jnp.asarray(0.0), stats={}
  )
  _, logs = rule.agent_loss(inputs, meta_out, False)
  log_pi = np.log(_np_softmax(agent_out["logits"]))
  ce = -np.sum(
      _np_softmax(adv / eta) * np.take_along_axis(log_pi, sampled, 1), -1
  )
  np.testing.assert_allclose(logs["loss_policy"][0], ce, rtol=1e-4)
  _, (_, _, loss_eta, _) = rule.dual_loss(
      duals,
      extras["search_advantages"],
      agent_out["logits"],
      agent_out["logits"],
      None,
  )
  eps = spo.SPO_HYPER_PARAMS["epsilon"]
  log_z = np.log(np.mean(np.exp(adv / eta), -1))
  np.testing.assert_allclose(loss_eta, eta * (eps + log_z), rtol=1e-4)


def _particles(batch=2, num=4):
  root = jnp.broadcast_to(jnp.arange(num), (batch, num))
  rows = jnp.arange(batch)[:, None] * 100 + root
  return spo.Particles(
      env_state=dict(game=jnp.stack([rows, -rows], -1)),
      root_actions=root.astype(jnp.int32),
      log_weights=rows.astype(jnp.float32) + 0.5,
      value=rows.astype(jnp.float32) * 2.0,
      terminal=(root % 2 == 0),
      depth=jnp.full((batch, num), 3, jnp.int32),
      gae=rows.astype(jnp.float32) * 10.0,
      next_actions=(rows + 7).astype(jnp.int32),
  )


def test_resample_keeps_count_and_gathers_fields():
  particles = _particles()
  # Stream 0 picks particle 2 only; stream 1 particle 1 only.
  logits = jnp.full((2, 4), -jnp.inf).at[0, 2].set(0.0).at[1, 1].set(0.0)
  out = spo.resample(particles, jax.random.PRNGKey(0), logits)
  assert jax.tree.structure(out) == jax.tree.structure(particles)
  for new, old in zip(
      jax.tree.leaves(out), jax.tree.leaves(particles), strict=True
  ):
    assert new.shape == old.shape and new.dtype == old.dtype
  np.testing.assert_array_equal(out.root_actions, [[2] * 4, [1] * 4])
  np.testing.assert_array_equal(out.value, [[4.0] * 4, [202.0] * 4])
  np.testing.assert_array_equal(out.env_state["game"][0], [[2, -2]] * 4)
  np.testing.assert_array_equal(out.env_state["game"][1], [[101, -101]] * 4)
  np.testing.assert_array_equal(out.next_actions, [[9] * 4, [108] * 4])
  np.testing.assert_array_equal(out.terminal, [[True] * 4, [False] * 4])
  np.testing.assert_array_equal(out.log_weights, 0.0)
  np.testing.assert_array_equal(out.gae, particles.gae)  # not gathered

  # Random draws: every field of a slot comes from the same source particle.
  out = spo.resample(particles, jax.random.PRNGKey(1), jnp.zeros((2, 4)))
  src = np.asarray(out.env_state["game"][..., 0])
  np.testing.assert_array_equal(out.value, 2.0 * src)
  np.testing.assert_array_equal(out.next_actions, src + 7)
  np.testing.assert_array_equal(out.root_actions, src % 100)


def test_effective_sample_size():
  np.testing.assert_allclose(
      spo.effective_sample_size(
          jnp.array([[0.0] * 4, [0.0, -jnp.inf, -jnp.inf, -jnp.inf]])
      ),
      [4.0, 1.0],
  )


# Games (ball_y, ball_x, paddle_y, paddle_x) on a 5 x 5 board where exactly
# one first action can still catch the ball, and that action.
DETERMINED = [
    ([3, 1, 4, 2], 0),
    ([3, 2, 4, 2], 1),
    ([3, 3, 4, 2], 2),
    ([2, 0, 4, 2], 0),
    ([2, 4, 4, 2], 2),
    ([2, 2, 4, 0], 2),
]


@pytest.mark.parametrize("mode", ["period", "ess"])
def test_search_on_catch_picks_the_catching_action(mode):
  agent = _spo_agent(
      num_particles=64,
      search_depth=4,
      resampling_mode=mode,
      adaptive_temperature=False,
      fixed_temperature=0.05,
  )
  games = [g for g, _ in DETERMINED]
  env = catch.Catch(len(games), rows=ROWS, columns=COLUMNS)
  _, agent_out, context = _acting(agent, env, games)
  select = _jit_select(agent.rule, context)
  for seed in range(3):
    actions, extras = select(jax.random.PRNGKey(seed), agent_out)
    np.testing.assert_array_equal(actions, [a for _, a in DETERMINED])
    assert extras["search_actions"].shape == (len(games), 64)
    np.testing.assert_allclose(
        np.sum(extras["search_weights"], -1), 1.0, rtol=1e-5
    )


def test_spo_refuses_missing_or_host_environment():
  agent = _spo_agent(num_particles=2, search_depth=1)
  games = [[0, 1, 4, 2]]
  _, agent_out, context = _acting(agent, catch.Catch(1, ROWS, COLUMNS), games)
  no_env = base.ActingContext(
      params=context.params, apply_fn=agent.apply, rule_state=context.rule_state
  )
  with pytest.raises(ValueError, match="env="):
    agent.rule.select_action(jax.random.PRNGKey(0), agent_out, no_env)
  host = catch_dm_env.batched_catch(1, rows=ROWS, columns=COLUMNS)
  host_ctx = base.ActingContext(
      params=context.params,
      apply_fn=agent.apply,
      rule_state=context.rule_state,
      env=host,
      env_state=context.env_state,
  )
  with pytest.raises(ValueError, match="jittable"):
    agent.rule.select_action(jax.random.PRNGKey(0), agent_out, host_ctx)
  with pytest.raises(ValueError, match="jittable"):
    loop.EvalLoop(
        agent,
        host,
        loop.LoopConfig(num_envs=1, batch_size=1, replay_capacity=0),
    )
  assert agent.rule.needs_env_copies and not mpo.MPO.needs_env_copies


def test_registered_settings():
  for name in ("mpo", "spo"):
    assert name in registry.rule_names()
    settings = registry.default_settings(name)
    agent = agent_lib.make_agent(settings, num_actions=A)
    assert agent.rule.agent_output_spec(A)["logits"].shape == (A,)
  settings = registry.default_settings("spo")
  settings = settings.replace(
      rule_kwargs=dict(settings.rule_kwargs, resampling_mode="always")
  )
  with pytest.raises(ValueError, match="resampling_mode"):
    registry.make_rule(settings)


# ------------------------------------------------------------- learning ----
def _learn_catch(rule, num_iterations, loop_config, seeds=(0,)):
  """Final returns ``[S]`` of the rule's default settings on Catch."""
  env = catch.Catch(loop_config.num_envs, rows=ROWS, columns=COLUMNS)
  agent = agent_lib.make_agent(registry.default_settings(rule), env.num_actions)
  eval_loop = loop.EvalLoop(agent, env, loop_config)
  _, metrics = eval_loop.run(
      eval_loop.init_seeds(list(seeds)), {}, num_iterations
  )
  return analysis.final_scores(metrics, 200)


ON_POLICY = loop.LoopConfig(
    num_envs=4, rollout_len=8, batch_size=4, replay_capacity=0
)
# Learner steps of the short CI check (each of 4 envs x 8 steps).
FAST = {"mpo": 800, "spo": 500}


@pytest.mark.parametrize("rule", ["mpo", "spo"])
def test_learns_catch_short(rule):
  returns = _learn_catch(rule, FAST[rule], ON_POLICY)
  assert np.all(returns >= 0.8), returns


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["mpo", "spo"])
def test_learns_catch_every_seed(rule):
  """The long version: three seeds, each must learn."""
  returns = _learn_catch(rule, 2 * FAST[rule], ON_POLICY, seeds=(0, 1, 2))
  assert np.all(returns >= 0.8), returns


# -------------------------------------------- one state set, SPO targets ----
@pytest.mark.parametrize("name", ["mpo", "spo"])
def test_dual_losses_average_over_the_loss_transitions(name):
  """The duals see exactly the transitions the policy and value losses see
  (the agent's loss mask): data at a masked transition changes nothing."""
  rule = registry.make_rule(registry.default_settings(name))
  rng = np.random.default_rng(0)
  t, b = 3, 2
  width = A if name == "mpo" else 4  # Q over actions, or N search samples
  first = jnp.asarray(rng.normal(size=(t, b, width)) * 3, jnp.float32)
  logits = jnp.asarray(rng.normal(size=(t, b, A)), jnp.float32)
  duals = mpo_common.init_duals(0.5, 0.5)
  mask = jnp.ones((t, b)).at[1, 0].set(0.0)

  def dual_grads(values, mask):
    return jax.grad(rule.dual_loss, has_aux=True)(
        duals, values, logits, 2 * logits, mask
    )[0]

  masked_change = first.at[1, 0].multiply(-5.0)
  kept_change = first.at[2, 1].multiply(-5.0)
  same = dual_grads(masked_change, mask)
  jax.tree.map(np.testing.assert_allclose, same, dual_grads(first, mask))
  moved = dual_grads(kept_change, mask)
  assert not np.allclose(
      moved["log_temperature"], dual_grads(first, mask)["log_temperature"]
  )
  # Without a mask, every transition counts.
  assert not np.allclose(
      dual_grads(masked_change, None)["log_temperature"],
      dual_grads(first, None)["log_temperature"],
  )


def test_spo_unroll_meta_net_targets_duals_and_target_network():
  settings = registry.default_settings("spo")
  rule = registry.make_rule(settings)
  hp = rule.hyper_params
  gamma, lambda_, tau = (
      hp["discount_factor"],
      hp["td_lambda"],
      hp["target_update_tau"],
  )
  t, b, n = 2, 1, 4
  rng = np.random.default_rng(1)
  online_v = jnp.asarray([[[0.5]], [[1.5]], [[-1.0]]])  # [T+1, B, 1]
  target_v = jnp.asarray([[[1.0]], [[2.0]], [[3.0]]])
  logits = jnp.asarray(rng.normal(size=(t + 1, b, A)), jnp.float32)
  weights = rng.random((t + 1, b, n))
  extras = dict(
      search_actions=jnp.zeros((t + 1, b, n), jnp.int32),
      search_weights=jnp.asarray(weights / weights.sum(-1, keepdims=True)),
      search_advantages=jnp.asarray(rng.normal(size=(t + 1, b, n)) * 4),
  )
  inputs = types.UpdateRuleInputs(
      observations=jnp.zeros((t + 1, b, 1)),
      actions=jnp.zeros((t + 1, b), jnp.int32),
      rewards=jnp.asarray([[1.0], [2.0]]),
      is_terminal=jnp.asarray([[False], [False]]),
      agent_out=dict(logits=logits, v=online_v),
      behaviour_agent_out=dict(logits=logits, v=online_v),
      actor_extras=extras,
  )
  params = dict(w=jnp.ones(3))
  state = rule.init_rule_state(jax.random.PRNGKey(0), dict(w=jnp.zeros(3)))
  context = base.LearnerContext(
      meta_params={},
      params=params,
      rule_state=state,
      unroll_fn=lambda p, obs: dict(logits=logits, v=target_v),
      rng=jax.random.PRNGKey(2),
  )
  meta_out, new_state = rule.unroll_meta_net(inputs, context)
  # Critic: GAE(lambda) targets on the target critic.
  g1 = 2.0 + gamma * 3.0
  g0 = 1.0 + gamma * ((1 - lambda_) * 2.0 + lambda_ * g1)
  np.testing.assert_allclose(
      meta_out["value_target"][:, 0], [g0, g1], rtol=1e-5
  )
  # Duals: one clipped Adam step against the gradient of the dual loss at
  # the pre-update duals (Adam's first step moves each by about dual_lr).
  grads = jax.grad(rule.dual_loss, has_aux=True)(
      state["duals"],
      extras["search_advantages"][:-1],
      logits[:-1],
      logits[:-1],
      None,
  )[0]
  for key in ("log_temperature", "log_alpha"):
    step = np.asarray(new_state["duals"][key] - state["duals"][key])
    assert np.sign(step) == -np.sign(np.asarray(grads[key])), key
    np.testing.assert_allclose(
        np.abs(step), settings.rule_kwargs["dual_lr"], rtol=0.05
    )

  # Logged temperature: the pre-update dual.
  np.testing.assert_allclose(
      meta_out["stats"]["temperature"],
      mpo_common.dual_value(state["duals"]["log_temperature"]),
  )
  # Target network: Polyak towards the parameters this step starts from.
  np.testing.assert_allclose(new_state["target_params"]["w"], tau)


def test_spo_search_two_steps_deep_matches_hand_computed_advantages():
  """Depth 2, no resampling: each root action's advantage is
  delta_0 + (gamma_s * lambda_s) * delta_1 over two real environment steps,
  with next actions from the policy (here always 'stay') and one-step
  advantages r + gamma_s * d * V(s') - (gamma_s * d_prev) * V(s) as in the
  reference (the stored value is already discounted)."""
  gamma_s, lambda_s, n = 0.8, 0.5, 3
  settings = registry.default_settings("spo")
  settings = settings.replace(
      rule_kwargs=dict(
          settings.rule_kwargs,
          num_particles=n,
          search_depth=2,
          resampling_period=3,
          search_gamma=gamma_s,
          search_gae_lambda=lambda_s,
      )
  )
  rule = registry.make_rule(settings)
  games = [[2, 1, 4, 2], [1, 3, 4, 0]]  # rows to fall: 2 and 3
  env = catch.Catch(len(games), rows=ROWS, columns=COLUMNS)
  weights = jnp.asarray([0.3, -0.2, 0.5, 0.1, 0.0])

  def value(obs):  # a fixed, position-dependent value
    return jnp.tensordot(obs[..., 0], jnp.arange(25.0).reshape(5, 5) / 25, 2)

  def apply_fn(params, obs):
    del params
    stay = jnp.asarray([-30.0, 30.0, -30.0])
    return dict(
        logits=jnp.broadcast_to(stay, obs.shape[:1] + (A,)),
        v=(value(obs) + weights.sum())[:, None],
    )

  env_state = _catch_state(games)
  obs0 = jax.vmap(lambda g: catch.render(g, ROWS, COLUMNS))(env_state.game)
  root_out = dict(
      logits=jnp.zeros((len(games), A)), v=apply_fn(None, obs0)["v"]
  )
  context = base.ActingContext(
      params={},
      apply_fn=apply_fn,
      rule_state=rule.init_rule_state(jax.random.PRNGKey(0), {}),
      env=env,
      env_state=env_state,
  )
  particles, _ = rule.search(jax.random.PRNGKey(4), root_out, context)
  v = lambda o: np.asarray(apply_fn(None, o)["v"][:, 0])
  for i in range(n):
    actions = particles.root_actions[:, i]
    s1, ts1 = env.step(env_state, actions)
    _, ts2 = env.step(s1, jnp.ones_like(actions))  # 'stay'
    d1, d2 = np.asarray(ts1.discount), np.asarray(ts2.discount)
    value1 = gamma_s * d1 * v(ts1.observation)
    delta0 = np.asarray(ts1.reward) + value1 - v(obs0)
    delta1 = np.asarray(ts2.reward) + gamma_s * d2 * v(ts2.observation) - value1
    alive = 1.0 - np.asarray(ts1.step_type == types.LAST, np.float32)
    expected = delta0 + alive * gamma_s * lambda_s * delta1
    np.testing.assert_allclose(
        particles.gae[:, i], expected, rtol=1e-5, atol=1e-5
    )
