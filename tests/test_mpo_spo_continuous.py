"""MPO and SPO with continuous actions (a Gaussian policy): each term of the
decoupled M-step and of the duals' losses on hand-computed cases, the
duals' gradient signs, the action-input critic, Q targets, SPO's search
with sampled continuous actions, and short learning checks on the
reach-the-target task (``continuous_toy.ReachTarget``)."""

from __future__ import annotations

from continuous_toy import ReachTarget
from continuous_toy import ToyState
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import policies
from disco import types
from disco.networks import action_models
from disco.training import loop
from disco.update_rules import base
from disco.update_rules import mpo
from disco.update_rules import mpo_common as ml
from disco.update_rules import registry
from disco.update_rules import spo

LOG2 = np.log(2.0)
HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)  # 0.918939
MPO_HP = mpo.MPO_HYPER_PARAMS


def _gaussian(size=1, bound=2.0):
  return policies.Gaussian(size, (-bound,) * size, (bound,) * size)


def _params(mean, log_std):
  """``[..., 2 D]`` Gaussian parameters from ``[..., D]`` means and
  log-stds."""
  return jnp.concatenate(
      [jnp.asarray(mean, jnp.float32), jnp.asarray(log_std, jnp.float32)], -1
  )


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


# ------------------------------------------------------- M-step pieces ----
def test_gaussian_kl_per_dim_hand_computed():
  # KL(N(0, 1) || N(1, 2)) = log 2 + (1 + 1) / 8 - 1/2 = 0.443147; a second
  # dimension with equal Gaussians adds a 0.
  kl = ml.gaussian_kl_per_dim(
      _gaussian(2),
      _params([0.0, 0.5], [0.0, -1.0]),
      _params([1.0, 0.5], [LOG2, -1.0]),
  )
  np.testing.assert_allclose(kl, [0.443147, 0.0], atol=1e-6)


def test_decoupled_kls_and_cross_entropies_hand_computed():
  policy = _gaussian()
  online = _params([1.0], [LOG2])  # N(1, 2)
  target = _params([0.0], [0.0])  # N(0, 1)
  fixed_stddev, fixed_mean = ml.decoupled_params(policy, online, target)
  np.testing.assert_allclose(fixed_stddev, [1.0, 0.0])  # online mean
  np.testing.assert_allclose(fixed_mean, [0.0, LOG2])  # online std
  actions = jnp.array([[0.0], [2.0]])  # N = 2 samples
  weights = jnp.array([0.25, 0.75])
  terms = ml.decoupled_m_step(policy, online, target, actions, weights, True)
  # KL(N(0,1) || N(1,1)) = 1/2; KL(N(0,1) || N(0,2)) = log 2 + 1/8 - 1/2.
  np.testing.assert_allclose(terms["kl_mean"], [0.5], rtol=1e-6)
  np.testing.assert_allclose(terms["kl_stddev"], [0.318147], rtol=1e-5)
  # -sum_n w_n log N(a_n; 1, 1): both samples are 1 away from the mean,
  # 0.918939 + 1/2.
  np.testing.assert_allclose(terms["loss_policy_mean"], 1.418939, rtol=1e-6)
  # -sum_n w_n log N(a_n; 0, 2) = 0.25 (0.918939 + log 2) + 0.75 (0.918939 +
  # log 2 + 4/8).
  np.testing.assert_allclose(terms["loss_policy_stddev"], 1.987086, rtol=1e-6)

  # The mean's cross-entropy moves only the mean, the std's only the std:
  # d CE_mean / d mean = -sum_n w_n (a_n - 1) = -0.5; d CE_stddev / d log
  # std = -sum_n w_n ((a_n - 0)^2 / 4 - 1) = 0.25.
  grad = lambda key: jax.grad(
      lambda p: ml.decoupled_m_step(policy, p, target, actions, weights, True)[
          key
      ]
  )(online)
  np.testing.assert_allclose(grad("loss_policy_mean"), [-0.5, 0.0], atol=1e-6)
  np.testing.assert_allclose(grad("loss_policy_stddev"), [0.0, 0.25], atol=1e-6)

  # Not per dimension: the KLs of two dimensions are summed, [..., 1].
  two = ml.decoupled_kls(
      _gaussian(2),
      _params([1.0, 1.0], [LOG2, LOG2]),
      _params([0.0, 0.0], [0.0, 0.0]),
      False,
  )
  np.testing.assert_allclose(two[0], [1.0], rtol=1e-6)
  np.testing.assert_allclose(two[1], [2 * 0.318147], rtol=1e-5)


def test_squashed_cross_entropy_gradient_matches_unsquashed():
  """With tanh squashing the log-density differs by a term of the action
  alone, so the M-step's gradients are those of the Gaussian before it."""
  squashed = policies.Gaussian(1, (-2.0,), (2.0,), squash=True)
  plain = _gaussian()
  online = _params([0.3], [-0.2])
  target = _params([0.0], [0.0])
  u = jnp.array([[-0.7], [0.4], [1.1]])
  weights = jnp.array([0.2, 0.3, 0.5])

  def grads(policy, actions):
    return jax.grad(
        lambda p: sum(
            ml.decoupled_m_step(policy, p, target, actions, weights, True)[k]
            for k in ("loss_policy_mean", "loss_policy_stddev")
        )
    )(online)

  np.testing.assert_allclose(
      grads(squashed, 2.0 * jnp.tanh(u)), grads(plain, u), rtol=1e-4
  )


def test_kl_penalty_and_alphas_loss_hand_computed():
  alpha = jnp.array([2.0, 3.0])
  kl = jnp.array([[0.1, 0.4]])
  np.testing.assert_allclose(ml.kl_penalty(alpha, kl), [2 * 0.1 + 3 * 0.4])
  np.testing.assert_allclose(
      ml.alphas_loss(alpha, kl, 0.2), [2 * (0.2 - 0.1) + 3 * (0.2 - 0.4)]
  )
  # d/d alpha_k = epsilon - KL_k; no gradient reaches the KLs.
  np.testing.assert_allclose(
      jax.grad(lambda a: ml.alphas_loss(a, kl, 0.2).sum())(alpha), [0.1, -0.2]
  )
  np.testing.assert_allclose(
      jax.grad(lambda k: ml.alphas_loss(alpha, k, 0.2).sum())(kl), 0.0
  )


def test_nonparametric_kl_hand_computed():
  # Values [1, 0, -1, 0] at eta = 2: w = softmax([0.5, 0, -0.5, 0]).
  weights, log_z = ml.sample_e_step(jnp.array([1.0, 0.0, -1.0, 0.0]), 2.0)
  np.testing.assert_allclose(
      weights, [0.387456, 0.235004, 0.142537, 0.235004], atol=1e-6
  )
  np.testing.assert_allclose(log_z, 0.061860, atol=1e-6)
  # sum_n w_n log(4 w_n).
  np.testing.assert_allclose(ml.nonparametric_kl(weights), 0.060600, atol=1e-6)


# ------------------------------------------------------------ the duals ----
def _bound(rule, size=1):
  return rule.for_policy(_gaussian(size))


def test_for_policy_sets_up_continuous_rules_only():
  rule = mpo.MPO()
  assert rule.for_policy(policies.Categorical(3)) is rule
  bound = _bound(rule, 3)
  assert bound is not rule and rule.gaussian is None
  assert bound.gaussian.action_size == 3
  duals = bound.init_rule_state(jax.random.PRNGKey(0), {})["duals"]
  assert {k: v.shape for k, v in duals.items()} == dict(
      log_temperature=(1,), log_alpha_mean=(3,), log_alpha_stddev=(3,)
  )
  summed = _bound(mpo.MPO(per_dim_constraining=False), 3)
  duals = summed.init_rule_state(jax.random.PRNGKey(0), {})["duals"]
  assert duals["log_alpha_mean"].shape == (1,)
  # The discrete rule's state is as before.
  duals = rule.init_rule_state(jax.random.PRNGKey(0), {})["duals"]
  assert sorted(duals) == ["log_alpha", "log_temperature"]
  # Outputs: a flat q [A] for discrete actions, an action-input q otherwise.
  assert set(rule.flat_output_spec(3)) == {"logits", "q"}
  assert not rule.model_output_spec(3)
  assert set(bound.flat_output_spec(6)) == {"logits"}
  assert bound.model_output_spec(6)["q"].shape == ()
  with pytest.raises(ValueError, match="root_dirichlet_fraction=0"):
    spo.SPO(root_dirichlet_fraction=0.25).for_policy(_gaussian())


def test_temperature_gradient_is_epsilon_minus_sampled_kl():
  rule = _bound(mpo.MPO())
  raw = 1.854587  # softplus(raw) = 2
  duals = dict(
      log_temperature=jnp.array([raw]),
      log_alpha_mean=jnp.array([1.0]),
      log_alpha_stddev=jnp.array([0.5]),
  )
  values = jnp.array([[[1.0, 0.0, -1.0, 0.0]]])  # [T=1, B=1, N=4]
  target = _params([[[0.0]]], [[[0.0]]])
  online = _params([[[0.1]]], [[[0.2]]])  # KLs 0.005 and 0.0758
  grads, aux = jax.grad(rule.gaussian_dual_loss, has_aux=True)(
      duals, values, target, online, None
  )
  weights, kl_mean, kl_stddev, loss_eta, *_ = aux
  # L = eta (eps + log mean_n exp(Q/eta)) = 2 (0.01 + 0.061860);
  # dL/d eta = eps - sum_n w_n log(N w_n) = 0.01 - 0.060600.
  np.testing.assert_allclose(loss_eta, [[2 * (0.01 + 0.061860)]], atol=1e-5)
  np.testing.assert_allclose(
      grads["log_temperature"], [(0.01 - 0.060600) * _sigmoid(raw)], atol=1e-5
  )
  np.testing.assert_allclose(weights[0, 0, 0], 0.387456, atol=1e-6)
  # dL/d alpha = eps_bound - KL, for both bounds: KL(N(0,1) || N(0.1,1)) =
  # 0.005 > 1e-3 and KL(N(0,1) || N(0, e^0.2)) = 0.2 + e^-0.4 / 2 - 1/2.
  kl_s = 0.2 + 0.5 * np.exp(-0.4) - 0.5
  np.testing.assert_allclose(kl_mean, [[[0.005]]], rtol=1e-4)
  np.testing.assert_allclose(kl_stddev, [[[kl_s]]], rtol=1e-4)
  np.testing.assert_allclose(
      grads["log_alpha_mean"],
      [(MPO_HP["epsilon_mean"] - 0.005) * _sigmoid(1.0)],
      rtol=1e-4,
  )
  np.testing.assert_allclose(
      grads["log_alpha_stddev"],
      [(MPO_HP["epsilon_stddev"] - kl_s) * _sigmoid(0.5)],
      rtol=1e-4,
  )


def _continuous_inputs(
    target_logits, online_logits, actions, rewards=None, q=None, **kw
):
  """``[T+1, B]`` inputs of a Gaussian policy with D = 1."""
  target_logits = jnp.asarray(target_logits, jnp.float32)
  t1, b = target_logits.shape[:2]
  online = dict(logits=jnp.asarray(online_logits, jnp.float32))
  if q is not None:
    online["q"] = jnp.asarray(q, jnp.float32)
  return types.UpdateRuleInputs(
      observations=jnp.arange(t1 * b, dtype=jnp.float32).reshape(t1, b, 1),
      actions=jnp.asarray(actions, jnp.float32),
      rewards=(
          jnp.zeros((t1 - 1, b)) if rewards is None else jnp.asarray(rewards)
      ),
      is_terminal=jnp.zeros((t1 - 1, b), bool),
      agent_out=online,
      behaviour_agent_out=dict(logits=target_logits),
      policy=_gaussian(),
      **kw,
  )


def _target_unroll(target_logits, q_fn):
  """A target network: ``logits``, and ``q = q_fn(obs, actions)`` at given
  actions ``[T+1, B, K, 1]``."""

  def unroll_fn(params, observations, actions=None):
    del params
    out = dict(logits=jnp.asarray(target_logits, jnp.float32))
    if actions is not None:
      out["q"] = q_fn(observations, actions)
    return out

  return unroll_fn


def _update(rule, inputs, unroll_fn, rng=1):
  state = rule.init_rule_state(jax.random.PRNGKey(0), dict(w=jnp.zeros(2)))

  def update(state, inputs):
    context = base.LearnerContext(
        meta_params={},
        params=dict(w=jnp.ones(2)),
        rule_state=state,
        unroll_fn=unroll_fn,
        rng=jax.random.PRNGKey(rng),
    )
    return rule.unroll_meta_net(inputs, context)

  meta_out, new_state = jax.jit(update)(state, inputs)
  return state, meta_out, new_state


@pytest.mark.parametrize("q_scale,eta_grows", [(30.0, True), (0.0, False)])
def test_temperature_grows_when_realised_kl_exceeds_epsilon(q_scale, eta_grows):
  rule = _bound(mpo.MPO())
  logits = jnp.zeros((3, 2, 2))  # N(0, 1) everywhere, online == target
  # Q = q_scale * a: the larger, the further q is from the prior.
  q_fn = lambda obs, a: q_scale * a[..., 0]
  inputs = _continuous_inputs(logits, logits, jnp.zeros((3, 2, 1)))
  state, meta_out, new_state = _update(
      rule, inputs, _target_unroll(logits, q_fn)
  )
  kl = float(meta_out["stats"]["kl_nonparametric"])
  assert (kl > MPO_HP["epsilon"]) == eta_grows
  old = float(state["duals"]["log_temperature"][0])
  new = float(new_state["duals"]["log_temperature"][0])
  assert (new > old) == eta_grows and new != old
  # The loss uses the pre-update temperature.
  np.testing.assert_allclose(
      meta_out["stats"]["temperature"], np.log1p(np.exp(old)), rtol=1e-6
  )


@pytest.mark.parametrize(
    "online_mean,online_log_std,mean_grows,stddev_grows",
    [
        (0.5, 0.0, True, False),
        (0.0, 0.5, False, True),
        (0.0, 0.0, False, False),
    ],
)
def test_alphas_grow_when_their_kl_exceeds_its_bound(
    online_mean, online_log_std, mean_grows, stddev_grows
):
  rule = _bound(mpo.MPO())
  target = jnp.zeros((3, 2, 2))
  online = _params(
      jnp.full((3, 2, 1), online_mean), jnp.full((3, 2, 1), online_log_std)
  )
  inputs = _continuous_inputs(target, online, jnp.zeros((3, 2, 1)))
  q_fn = lambda obs, a: -jnp.square(a[..., 0])
  state, meta_out, new_state = _update(
      rule, inputs, _target_unroll(target, q_fn)
  )
  for key, grows, stat in (
      ("log_alpha_mean", mean_grows, "kl_mean_rel"),
      ("log_alpha_stddev", stddev_grows, "kl_stddev_rel"),
  ):
    assert (float(meta_out["stats"][stat]) > 1.0) == grows, stat
    step = float(new_state["duals"][key][0] - state["duals"][key][0])
    assert (step > 0) == grows and step != 0, key


# ------------------------------------------------------ MPO's M-step ----
def test_mpo_agent_loss_hand_computed():
  """CE_mean + CE_stddev + alpha_mean KL_mean + alpha_stddev KL_stddev with
  the cases above: online N(1, 2), target N(0, 1), samples 0 and 2."""
  rule = _bound(mpo.MPO())
  online = jnp.stack([_params([1.0], [LOG2])] * 2)[:, None]  # [T+1=2, B=1]
  target = _params([[[0.0]]], [[[0.0]]])  # [T=1, B=1, 2]
  inputs = _continuous_inputs(
      jnp.stack([target[0]] * 2), online, jnp.zeros((2, 1, 1))
  )
  meta_out = dict(
      target_logits=target,
      sampled_actions=jnp.array([[[[0.0], [2.0]]]]),
      e_step_weights=jnp.array([[[0.25, 0.75]]]),
      alpha_mean=jnp.array([3.0]),
      alpha_stddev=jnp.array([5.0]),
      stats={},
  )
  loss, logs = rule.agent_loss(inputs, meta_out, backprop=False)
  np.testing.assert_allclose(
      loss, [[1.418939 + 1.987086 + 3.0 * 0.5 + 5.0 * 0.318147]], rtol=1e-5
  )
  np.testing.assert_allclose(logs["loss_kl_mean"], [[1.5]], rtol=1e-5)
  # The penalty's gradient reaches the policy only, not the duals.
  grad = jax.grad(
      lambda a: rule.agent_loss(inputs, dict(meta_out, alpha_mean=a), False)[
          0
      ].sum()
  )(meta_out["alpha_mean"])
  np.testing.assert_array_equal(grad, 0.0)


def test_mpo_q_targets_and_loss_hand_computed():
  """A near-deterministic target policy (std e^-20) at mean 0.5: V(s) =
  Q(s, 0.5); behaviour == target, so Retrace's importance weights are 1."""
  gamma, lambda_ = 0.9, 0.5
  hp = dict(discount_factor=gamma, td_lambda=lambda_)
  logits = jnp.broadcast_to(_params([0.5], [-20.0]), (3, 1, 2))
  actions = jnp.array([[[1.0]], [[-1.0]], [[0.0]]])
  rewards = jnp.array([[0.5], [1.0]])
  # Q(s, a) = obs - a^2: states 0, 1, 2.
  q_fn = lambda obs, a: obs[:, :, None, 0] - jnp.square(a[..., 0])
  unroll_fn = _target_unroll(logits, q_fn)
  v = np.array([0.0, 1.0, 2.0]) - 0.25
  q_taken = np.array([0.0 - 1.0, 1.0 - 1.0, 2.0])

  inputs = _continuous_inputs(logits, logits, actions, rewards)
  _, out, _ = _update(_bound(mpo.MPO(hp, q_target="lambda")), inputs, unroll_fn)
  g1 = 1.0 + gamma * v[2]
  g0 = 0.5 + gamma * ((1 - lambda_) * v[1] + lambda_ * g1)
  np.testing.assert_allclose(out["q_target"][:, 0], [g0, g1], rtol=1e-5)
  assert out["sampled_actions"].shape == (2, 1, 20, 1)
  np.testing.assert_allclose(out["sampled_actions"], 0.5, atol=1e-6)

  _, out, _ = _update(
      _bound(mpo.MPO(hp, q_target="retrace")), inputs, unroll_fn
  )
  g0 = 0.5 + gamma * (v[1] + lambda_ * (g1 - q_taken[1]))
  np.testing.assert_allclose(out["q_target"][:, 0], [g0, g1], rtol=1e-5)

  # The critic's loss: the online q at the taken actions, [T+1, B].
  online_q = jnp.array([[2.0], [3.0], [9.0]])
  inputs = inputs.replace(agent_out=dict(inputs.agent_out, q=online_q))
  q_loss, _ = _bound(mpo.MPO(hp)).agent_loss_no_meta(inputs, out)
  np.testing.assert_allclose(
      q_loss[:, 0], 0.5 * (np.asarray(out["q_target"][:, 0]) - [2.0, 3.0]) ** 2
  )
  with pytest.raises(ValueError, match="taken actions"):
    mpo.MPO(hp).for_policy(_gaussian()).agent_loss_no_meta(
        inputs.replace(agent_out=dict(logits=inputs.agent_out["logits"])), out
    )


def test_rule_set_up_for_discrete_refuses_continuous_rollouts():
  logits = jnp.zeros((2, 1, 2))
  inputs = _continuous_inputs(logits, logits, jnp.zeros((2, 1, 1)))
  with pytest.raises(ValueError, match="for_policy"):
    mpo.MPO().unroll_meta_net(inputs, None)


# --------------------------------------------------- the action-input critic ----
def test_scaled_actions():
  policy = policies.Gaussian(3, (-2.0, 0.0, -np.inf), (2.0, 1.0, np.inf))
  np.testing.assert_allclose(
      action_models.scaled_actions(policy, jnp.array([3.0, 0.25, 5.0])),
      [1.0, -0.5, 5.0],
  )


def _settings(rule, **rule_kwargs):
  settings = registry.default_settings(rule)
  return settings.replace(
      network=dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)),
      rule_kwargs=dict(settings.rule_kwargs, **rule_kwargs),
  )


def test_action_input_critic_network():
  env = ReachTarget(3, size=2)
  agent = agent_lib.make_agent(_settings("mpo"), action_spec=env.action_spec())
  params = agent.init_params(jax.random.PRNGKey(0), np.zeros(2, np.float32))
  assert "mlp/action_input_q/~/linear_0" in params
  assert params["mlp/action_input_q/~/linear_0"]["w"].shape == (16 + 2, 8)
  obs = jnp.ones((3, 2))
  assert "q" not in agent.apply(params, obs)  # no action given
  actions = jnp.array([[0.5, -1.0], [2.0, 0.0], [-3.0, 1.0]])
  one = agent.network.apply(params, obs, actions)["q"]
  many = agent.network.apply(
      params, obs, jnp.stack([actions, -actions], axis=1)
  )["q"]
  assert one.shape == (3,) and many.shape == (3, 2)
  np.testing.assert_allclose(many[:, 0], one, rtol=1e-6)
  # Actions beyond the bounds read as the bounds (the environment clips).
  np.testing.assert_allclose(
      agent.network.apply(params, obs, jnp.clip(actions, -2.0, 2.0))["q"], one
  )
  # The discrete rule's network is untouched: a flat q [A], no such head.
  discrete = agent_lib.make_agent(_settings("mpo"), num_actions=3)
  params = discrete.init_params(jax.random.PRNGKey(0), np.zeros(2, np.float32))
  assert not any("action_input" in k for k in params)
  assert discrete.apply(params, obs)["q"].shape == (3, 3)


# --------------------------------------------------------------- SPO ----
class StreamReach(ReachTarget):
  """``ReachTarget`` with one PRNG key per stream, so that SPO can copy each
  stream's state."""

  def reset(self, rng):
    return super().reset(jax.random.split(rng, self.batch_size))

  def _draw(self, rng):
    keys = jax.vmap(jax.random.split)(rng)  # [B, 2] keys
    target = jax.vmap(
        lambda k: jax.random.uniform(k, (self.size,), minval=-1.0)
    )(keys[:, 1])
    return ToyState(target=target, rng=keys[:, 0])


def _spo_acting(agent, env, seed=0):
  state = agent.initial_learner_state(
      jax.random.PRNGKey(seed), np.zeros(env.size, np.float32)
  )
  env_state, ts = env.reset(jax.random.PRNGKey(seed + 1))
  agent_out = agent.apply(state.params, ts.observation)
  context = base.ActingContext(
      params=state.params,
      apply_fn=agent.apply,
      rule_state=state.rule_state,
      env=env,
      env_state=env_state,
      policy=agent.policy,
  )
  return state, agent_out, context


def test_spo_continuous_search_depth_one_is_sample_based_mpo():
  n = 5
  env = StreamReach(4, size=2)
  agent = agent_lib.make_agent(
      _settings(
          "spo",
          num_particles=n,
          search_depth=1,
          resampling_period=2,
          search_gamma=0.9,
      ),
      action_spec=env.action_spec(),
  )
  rule = agent.rule
  state, agent_out, context = _spo_acting(agent, env)
  actions, extras = rule.select_action(
      jax.random.PRNGKey(3), agent_out, context
  )
  sampled = np.asarray(extras["search_actions"])
  assert sampled.shape == (4, n, 2) and sampled.dtype == np.float32
  # One-step episodes: each root action's advantage is r - V(s).
  v0 = np.asarray(agent_out["v"][:, 0])
  adv = np.zeros((4, n))
  for i in range(n):
    _, ts = env.step(context.env_state, sampled[:, i])
    adv[:, i] = np.asarray(ts.reward) - v0
  np.testing.assert_allclose(extras["search_advantages"], adv, atol=1e-5)
  eta = float(ml.dual_value(state.rule_state["duals"]["log_temperature"]))
  w = np.exp(adv / eta - (adv / eta).max(-1, keepdims=True))
  np.testing.assert_allclose(
      extras["search_weights"], w / w.sum(-1, keepdims=True), atol=1e-5
  )
  # The action played is one of the root actions, as drawn.
  assert all(
      any(np.array_equal(a, r) for r in row)
      for a, row in zip(np.asarray(actions), sampled, strict=True)
  )

  # The policy's loss: the decoupled M-step on the stored actions and
  # weights, against the densities written out.
  two = lambda x: jnp.stack([x, x])
  inputs = types.UpdateRuleInputs(
      observations=two(jnp.zeros((4, 2))),
      actions=two(actions),
      rewards=jnp.zeros((1, 4)),
      is_terminal=jnp.zeros((1, 4), bool),
      agent_out=jax.tree.map(two, agent_out),
      behaviour_agent_out=jax.tree.map(two, agent_out),
      actor_extras=jax.tree.map(two, extras),
      policy=agent.policy,
  )
  target = agent_out["logits"] + jnp.array([0.3, -0.2, 0.1, 0.2])
  meta_out = dict(
      target_logits=target[None],
      alpha_mean=jnp.zeros([2]),
      alpha_stddev=jnp.zeros([2]),
      stats={},
  )
  _, logs = rule.agent_loss(inputs, meta_out, False)
  mean, log_std = np.split(np.asarray(agent_out["logits"]), 2, -1)
  t_mean, t_log_std = np.split(np.asarray(target), 2, -1)

  def log_density(m, s):  # [B, D] mean and log-std at the [B, N, D] samples
    z = (sampled - m[:, None]) / np.exp(s[:, None])
    return np.sum(-0.5 * z**2 - s[:, None] - HALF_LOG_2PI, -1)

  weights = np.asarray(extras["search_weights"])
  np.testing.assert_allclose(
      logs["loss_policy_mean"][0],
      -np.sum(weights * log_density(mean, t_log_std), -1),
      rtol=1e-4,
  )
  np.testing.assert_allclose(
      logs["loss_policy_stddev"][0],
      -np.sum(weights * log_density(t_mean, log_std), -1),
      rtol=1e-4,
  )


def test_spo_unroll_meta_net_continuous_duals():
  env = StreamReach(2, size=2)
  agent = agent_lib.make_agent(_settings("spo"), action_spec=env.action_spec())
  rule = agent.rule
  t, b, n = 2, 2, 3
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(t + 1, b, 4)) * 0.3, jnp.float32)
  v = jnp.asarray(rng.normal(size=(t + 1, b, 1)), jnp.float32)
  extras = dict(
      search_actions=jnp.asarray(
          rng.normal(size=(t + 1, b, n, 2)), jnp.float32
      ),
      search_weights=jnp.full((t + 1, b, n), 1.0 / n),
      search_advantages=jnp.asarray(rng.normal(size=(t + 1, b, n)) * 5),
  )
  inputs = types.UpdateRuleInputs(
      observations=jnp.zeros((t + 1, b, 2)),
      actions=jnp.zeros((t + 1, b, 2)),
      rewards=jnp.ones((t, b)),
      is_terminal=jnp.zeros((t, b), bool),
      agent_out=dict(logits=logits, v=v),
      behaviour_agent_out=dict(logits=logits, v=v),
      actor_extras=extras,
      policy=agent.policy,
  )
  state = rule.init_rule_state(jax.random.PRNGKey(0), dict(w=jnp.zeros(2)))
  context = base.LearnerContext(
      meta_params={},
      params=dict(w=jnp.ones(2)),
      rule_state=state,
      unroll_fn=lambda p, obs: dict(logits=logits, v=v),
      rng=jax.random.PRNGKey(2),
  )
  meta_out, new_state = rule.unroll_meta_net(inputs, context)
  grads = jax.grad(rule.gaussian_dual_loss, has_aux=True)(
      state["duals"],
      extras["search_advantages"][:-1],
      logits[:-1],
      logits[:-1],
      inputs.mask,
  )[0]
  # One clipped Adam step against the gradient, about dual_lr in size.
  for key in ("log_temperature", "log_alpha_mean", "log_alpha_stddev"):
    step = np.asarray(new_state["duals"][key] - state["duals"][key])
    np.testing.assert_array_equal(np.sign(step), -np.sign(grads[key]))
  # Online == target: both KLs are 0, so both alphas shrink.
  assert np.all(np.asarray(grads["log_alpha_mean"]) > 0)
  assert meta_out["value_target"].shape == (t, b)
  np.testing.assert_allclose(meta_out["alpha_mean"], np.log1p(np.exp(3.0)))


def test_spo_refuses_state_without_stream_axis():
  env = ReachTarget(3, size=2)  # one PRNG key [2] for all streams
  agent = agent_lib.make_agent(
      _settings("spo", num_particles=2, search_depth=1),
      action_spec=env.action_spec(),
  )
  _, agent_out, context = _spo_acting(agent, env)
  with pytest.raises(ValueError, match=r"\.rng has shape \[2\]"):
    agent.rule.select_action(jax.random.PRNGKey(0), agent_out, context)


# ------------------------------------------------------------ learning ----
def _learn(env, settings, iterations):
  """Per-iteration mean returns ``[iterations]`` of one seed, 8 streams x 8
  one-step episodes per iteration, one learner step on each rollout."""
  agent = agent_lib.make_agent(
      settings,
      action_spec=env.action_spec(),
      observation_spec=env.observation_spec(),
  )
  config = loop.LoopConfig(
      num_envs=env.batch_size,
      rollout_len=9,
      batch_size=env.batch_size,
      replay_capacity=0,
  )
  eval_loop = loop.EvalLoop(agent, env, config)
  _, metrics = eval_loop.run(eval_loop.init_seeds([0]), {}, iterations)
  episodes = np.maximum(np.asarray(metrics["episodes"])[0], 1)
  return np.asarray(metrics["return_sum"])[0] / episodes


def test_mpo_learns_reach_target_short():
  """Random Gaussian actions earn about -2.67 (2 dims); MPO's registry
  defaults improve on that by a clear margin in 400 learner steps."""
  returns = _learn(
      ReachTarget(8, size=2), registry.default_settings("mpo"), 400
  )
  start, end = returns[:40].mean(), returns[-80:].mean()
  assert end > start + 0.6 and end > -2.0, (start, end)


def test_spo_learns_reach_target_short():
  """SPO's search already picks the better of its sampled actions; the
  policy it trains improves on them."""
  settings = registry.default_settings("spo")
  settings = settings.replace(
      rule_kwargs=dict(settings.rule_kwargs, num_particles=8, search_depth=1)
  )
  returns = _learn(StreamReach(8, size=2), settings, 200)
  start, end = returns[:20].mean(), returns[-40:].mean()
  assert end > start + 0.4, (start, end)
