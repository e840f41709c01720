"""The LPG family (``lpg``, ``ta_lpg``): meta-network, agent loss,
meta-gradient, lifetimes, meta-training and evaluation (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path
import runpy
import subprocess
import sys

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from disco import agent as agent_lib
from disco import errors
from disco import types
from disco import weights as weights_lib
from disco.environments import registry as env_registry
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import meta_step
from disco.meta import plan as plan_lib
from disco.meta import population as population_lib
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import trainer as mt
from disco.meta import value_function
from disco.networks import lpg_net
from disco.training import acting
from disco.update_rules import base
from disco.update_rules import lpg
from disco.update_rules import registry

from meta_settings import REPO_DIR
from meta_settings import subprocess_env

TINY_NET = dict(prediction_size=4, embedding_sizes=(4, 1), hidden_size=6)
TINY_AGENT_NET = dict(dense=(8,), separate_torsos=True, activate_final=True)


def tiny_rule(**net) -> lpg.LPG:
  return lpg.LPG(net=dict(TINY_NET, **net))


def net_args(t=5, b=2, p=4, seed=0, ends=None):
  """Random meta-network arguments ``[T, B]``; ``ends`` marks episode ends
  (terminations) of the first trajectory."""
  rng = np.random.default_rng(seed)
  ends_arr = np.zeros((t, b), bool)
  if ends is not None:
    ends_arr[list(ends), 0] = True
  y = rng.dirichlet(np.ones(p), size=(t + 1, b)).astype(np.float32)
  return [
      jnp.asarray(rng.normal(size=(t, b)), jnp.float32),  # rewards
      jnp.asarray(ends_arr),  # terminal
      jnp.asarray(ends_arr),  # episode ends
      jnp.asarray(rng.uniform(0.1, 1.0, size=(t, b)), jnp.float32),  # pi_a
      jnp.asarray(y[:-1]),
      jnp.asarray(y[1:]),
  ]


# -------------------------------------------------------------- network ----


@pytest.mark.parametrize("conditioning", [False, True])
def test_meta_network_shapes(conditioning):
  config = lpg_net.LPGNetConfig(**TINY_NET, lifetime_conditioning=conditioning)
  net = lpg_net.make_lpg_net(config)
  args = net_args()
  if conditioning:
    args.append(jnp.array([0.5, np.log(100.0)], jnp.float32))
  params = net.init(jax.random.PRNGKey(0), *args)
  out = net.apply(params, None, *args)
  assert out["pi_hat"].shape == (5, 2)
  assert out["y_hat"].shape == (5, 2, 4)
  assert out["core"].shape == (5, 2, 6)
  np.testing.assert_allclose(out["y_hat"].sum(-1), 1.0, rtol=1e-5)
  features = 2 + 3 + (2 if conditioning else 0)
  assert config.num_features == features
  assert params["lpg/gru"]["w_i"].shape == (features, 3 * 6)
  assert params["lpg/embedding/~/linear_0"]["w"].shape == (4, 4)
  assert params["lpg/y_hat"]["w"].shape == (6, 4)
  # The rule builds the same parameter tree.
  rule = tiny_rule(lifetime_conditioning=conditioning)
  assert not weights_lib.params_diff(
      params, rule.init_meta_params(jax.random.PRNGKey(1))
  )


def test_backward_recurrence_resets_at_episode_ends():
  """Transition 2 ends an episode: the outputs of transitions 0..2 depend on
  nothing after it, those of 3..4 on nothing before them; without the end,
  information flows backwards across it."""
  net = lpg_net.make_lpg_net(lpg_net.LPGNetConfig(**TINY_NET))
  params = net.init(jax.random.PRNGKey(0), *net_args())

  def outputs(ends, reward_at=None, next_y_at=None):
    args = net_args(ends=ends)
    if reward_at is not None:
      args[0] = args[0].at[reward_at, 0].add(3.0)
    if next_y_at is not None:
      args[5] = args[5].at[next_y_at, 0].set(jnp.array([1.0, 0, 0, 0]))
    return np.asarray(net.apply(params, None, *args)["core"][:, 0])

  base = outputs([2])
  later = outputs([2], reward_at=3)
  np.testing.assert_array_equal(later[:3], base[:3])
  assert np.all(np.abs(later[3] - base[3]) > 0)
  earlier = outputs([2], reward_at=1)
  np.testing.assert_array_equal(earlier[2:], base[2:])
  assert np.all(np.abs(earlier[:2] - base[:2]).max(-1) > 0)
  # y(s_{t+1}) of the transition that ends the episode is not read.
  np.testing.assert_array_equal(outputs([2], next_y_at=2), base)
  # Without the episode end, the later reward reaches the earlier steps.
  no_end = outputs(None)
  assert np.all(np.abs(outputs(None, reward_at=3)[:3] - no_end[:3]) > 0)


def test_backward_gru_is_haikus_reset_gru_unrolled_backwards():
  """BackwardGRU computes what hk.dynamic_unroll(hk.ResetCore(hk.GRU)) does
  backwards in time, with the same parameters."""
  t, b, i, h = 6, 3, 5, 8
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  x = jax.random.normal(keys[0], (t, b, i))
  ends = jax.random.bernoulli(keys[1], 0.3, (t, b))

  def ours(x, ends):
    return lpg_net.BackwardGRU(h)(x, ends)

  def haikus(x, ends):
    core = hk.ResetCore(hk.GRU(h))
    return hk.dynamic_unroll(
        core, (x, ends), core.initial_state(batch_size=b), reverse=True
    )[0]

  ours, haikus = hk.transform(ours), hk.transform(haikus)
  params = ours.init(keys[2], x, ends)
  assert jax.tree.map(jnp.shape, params) == jax.tree.map(
      jnp.shape, haikus.init(keys[2], x, ends)
  )
  # Biases too: the initial ones are zeros.
  params = jax.tree.map(
      lambda p: p + 0.1 * jax.random.normal(keys[2], p.shape), params
  )
  np.testing.assert_allclose(
      ours.apply(params, None, x, ends),
      haikus.apply(params, None, x, ends),
      rtol=1e-5,
      atol=1e-6,
  )


# ----------------------------------------------------------------- loss ----


def rule_inputs(rng, t=4, b=3, a=3, p=4, terminal_at=None):
  rng = np.random.default_rng(rng)
  is_terminal = np.zeros((t, b), bool)
  if terminal_at is not None:
    is_terminal[terminal_at, 1] = True
  agent_out = dict(
      logits=jnp.asarray(rng.normal(size=(t + 1, b, a)), jnp.float32),
      y=jnp.asarray(rng.normal(size=(t + 1, b, p)), jnp.float32),
  )
  return types.UpdateRuleInputs(
      observations=jnp.zeros((t + 1, b, 1)),
      actions=jnp.asarray(rng.integers(0, a, size=(t + 1, b)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(t, b)), jnp.float32),
      is_terminal=jnp.asarray(is_terminal),
      agent_out=agent_out,
      behaviour_agent_out=agent_out,
  )


def test_agent_loss_equals_hand_computation():
  rule = tiny_rule()
  inputs = rule_inputs(0)
  rng = np.random.default_rng(1)
  pi_hat = rng.normal(size=(4, 3)).astype(np.float32)
  y_hat_logits = rng.normal(size=(4, 3, 4)).astype(np.float32)
  meta_out = dict(
      pi_hat=jnp.asarray(pi_hat),
      y_hat_logits=jnp.asarray(y_hat_logits),
      y_hat=jax.nn.softmax(y_hat_logits),
  )
  loss, logs = rule.agent_loss(inputs, meta_out, backprop=False)

  def log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))

  logits = np.asarray(inputs.agent_out["logits"])[:-1]
  actions = np.asarray(inputs.actions)[:-1]
  log_pi = np.take_along_axis(log_softmax(logits), actions[..., None], -1)
  log_p, log_q = log_softmax(y_hat_logits), log_softmax(
      np.asarray(inputs.agent_out["y"])[:-1]
  )
  kl = (np.exp(log_p) * (log_p - log_q)).sum(-1)
  expected = -pi_hat * log_pi[..., 0] + 0.5 * kl
  np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(logs["y_loss"], kl.mean(), rtol=1e-5)


def test_meta_regularizer_equals_hand_computation():
  rule = lpg.LPG(dict(policy_entropy_coeff=0.1), net=TINY_NET)
  rng = np.random.default_rng(2)
  pi_hat = rng.normal(size=(2, 4, 3))
  y_hat = rng.dirichlet(np.ones(4), size=(2, 4, 3))
  valid = dict(
      logits=jnp.asarray(rng.normal(size=(5, 3, 3)), jnp.float32),
      y=jnp.asarray(rng.normal(size=(5, 3, 4)), jnp.float32),
  )
  reg, logs = rule.meta_regularizer(
      dict(pi_hat=jnp.asarray(pi_hat), y_hat=jnp.asarray(y_hat)),
      valid,
      jnp.zeros((4, 3), jnp.int32),
  )

  def entropy(x):
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return -(p * np.log(p)).sum(-1).mean()

  h_pi = entropy(np.asarray(valid["logits"], np.float64)[:-1])
  h_y = entropy(np.asarray(valid["y"], np.float64)[:-1])
  expected = (
      -0.1 * h_pi
      - 1e-3 * h_y
      + 5e-3 * np.mean(pi_hat**2)
      + 1e-3 * np.mean((y_hat**2).sum(-1))
  )
  np.testing.assert_allclose(reg, expected, rtol=1e-5)
  np.testing.assert_allclose(logs["lpg_policy_entropy"], h_pi, rtol=1e-5)


# ------------------------------------------------------------- lifetime ----


def test_lifetime_inputs_reach_the_network():
  rule = tiny_rule(lifetime_conditioning=True)
  meta_params = rule.init_meta_params(jax.random.PRNGKey(0))
  inputs = rule_inputs(3)
  state = rule.init_rule_state(jax.random.PRNGKey(0), {})
  assert float(state["lifetime"]) == base.DEFAULT_LIFETIME

  def targets(state):
    context = lpg_context(meta_params, state)
    return rule.unroll_meta_net(inputs, context)

  young = rule.start_lifetime(state, 100)
  out_young, next_state = targets(young)
  assert int(next_state["num_updates"]) == 1
  np.testing.assert_allclose(
      rule.lifetime_inputs(next_state), [0.01, np.log(100.0)], rtol=1e-6
  )
  out_old, _ = targets(dict(young, num_updates=jnp.array(90, jnp.int32)))
  out_short, _ = targets(rule.start_lifetime(state, 10))
  for other in (out_old, out_short):
    assert not np.allclose(other["pi_hat"], out_young["pi_hat"])
  # Without conditioning, the rule keeps no state and ignores the lifetime.
  plain = tiny_rule()
  assert plain.start_lifetime({}, 10) == {}


def lpg_context(meta_params, rule_state):
  return base.LearnerContext(
      meta_params=meta_params,
      params={},
      rule_state=rule_state,
      unroll_fn=None,
      rng=jax.random.PRNGKey(0),
  )


def test_draw_lifetime_range():
  draws = jax.vmap(lambda k: population_lib.draw_lifetime(k, 10, 250))(
      jax.random.split(jax.random.PRNGKey(0), 2000)
  )
  draws = np.asarray(draws)
  assert draws.min() >= 10 and draws.max() <= 250
  assert draws.min() < 15 and draws.max() > 200
  # Log-uniform: about as many below sqrt(10 * 250) = 50 as above.
  assert 0.4 < np.mean(draws < 50) < 0.6


def tiny_settings(name="ta_lpg"):
  settings = registry.default_settings(name)
  return settings.replace(
      rule_kwargs=dict(
          settings.rule_kwargs,
          net=dict(settings.rule_kwargs["net"], **TINY_NET),
      ),
      network=dict(settings.network, **TINY_AGENT_NET),
  )


@pytest.fixture(scope="module")
def lifetime_population():
  settings = tiny_settings()
  env = env_registry.make_env("lpg/dense", 2)
  agent = agent_lib.make_agent(settings, env.num_actions)
  group = meta_step.AgentGroup(
      name="dense",
      env=env,
      agent=agent,
      value_fn=value_function.ValueFunction(
          value_function.ValueFnConfig(dense=(8,))
      ),
      num_agents=2,
  )
  config = meta_step.PopulationConfig(
      rollout_len=3,
      inner_steps=2,
      lifetime_updates=(2, 5),
      key_scheme="per_agent",
  )
  population = population_lib.BackpropPopulation(
      [group], config, optax.adam(1e-3), jax.devices()[:1]
  )
  meta_params = agent.rule.init_meta_params(jax.random.PRNGKey(0))
  state = population.init(jax.random.PRNGKey(3), meta_params)
  history = []
  for _ in range(6):
    agents = jax.device_get(state.agents[0])
    history.append(agents)
    state, logs = population.step(state)
  history.append(jax.device_get(state.agents[0]))
  return history, logs


def test_lifetimes_restart_agents(lifetime_population):
  history, logs = lifetime_population
  assert np.isfinite(logs["meta_loss"])
  restarts = 0
  for before, after in zip(history[:-1], history[1:], strict=True):
    for i in range(2):
      lifetime = int(before.lifetime[i])
      assert 2 <= lifetime <= 5
      # The rule counts the agent's updates and knows its lifetime.
      rule_state = after.learner.rule_state
      assert int(rule_state["num_updates"][i]) == 2 * int(after.age[i])
      assert float(rule_state["lifetime"][i]) == int(after.lifetime[i])
      if (int(before.age[i]) + 2) * 2 > lifetime:  # its last meta-step
        assert int(after.age[i]) == 0
        restarts += 1
      else:
        assert int(after.age[i]) == int(before.age[i]) + 1
        assert int(after.lifetime[i]) == lifetime
  assert restarts >= 2


def test_population_refuses_impossible_lifetimes():
  with pytest.raises(ValueError, match="cannot hold"):
    meta_step.PopulationConfig(inner_steps=5, lifetime_updates=(3, 10))
  with pytest.raises(ValueError, match="not both"):
    meta_step.PopulationConfig(
        inner_steps=1, lifetime_updates=(3, 10), lifetime_meta_steps=4
    )


# -------------------------------------------------------- meta-gradient ----


def test_meta_gradient_matches_finite_differences():
  """The meta-gradient of a tiny LPG setting against central differences
  along random directions, in float64: one inner LPG update, then the rule's
  meta-regulariser plus a fixed weighting of the updated policy's
  log-probabilities on a validation rollout (the outer loss's shape: its
  advantages are constants of the meta-gradient by design, and with more
  inner steps the meta-network's inputs are too, as GROOVE's)."""
  with jax.enable_x64(True):
    # The agent's Adam excludes its denominator from differentiation (as
    # the published meta-trainer); a huge epsilon makes it constant, so the
    # meta-gradient is the exact derivative.
    settings = tiny_settings("lpg").replace(
        adam_eps=1e6, learning_rate=1e5, max_grad_norm=None
    )
    env = env_registry.make_env("lpg/dense", 2)
    agent = agent_lib.make_agent(settings, env.num_actions)
    value_fn = value_function.ValueFunction(
        value_function.ValueFnConfig(dense=(8,))
    )
    rng = jax.random.PRNGKey(0)
    actor = acting.init_actor(env, rng)
    obs = jax.tree.map(lambda x: x[0], actor.timestep.observation)
    to64 = lambda tree: jax.tree.map(
        lambda x: x.astype(jnp.float64)
        if jnp.issubdtype(x.dtype, jnp.floating)
        else x,
        tree,
    )
    learner = to64(agent.initial_learner_state(rng, obs))
    value_state = to64(value_fn.initial_state(rng, obs))
    rollouts = []
    for k in range(2):
      actor, rollout = acting.unroll_actor(
          agent,
          env,
          learner.params,
          learner.rule_state,
          actor,
          jax.random.PRNGKey(k),
          4,
      )
      rollouts.append(to64(rollout))
    train, valid = jax.tree.map(lambda x: x[None], rollouts[0]), rollouts[1]
    weights = jax.random.normal(
        jax.random.PRNGKey(7), valid.rewards[1:].shape, jnp.float64
    )
    meta_params = to64(agent.rule.init_meta_params(jax.random.PRNGKey(1)))

    def loss(mp):
      new, _, _, meta_out = meta_gradient_lib.inner_updates(
          agent,
          value_fn,
          mp,
          learner,
          value_state,
          train,
          jax.random.split(jax.random.PRNGKey(5), 1),
      )
      out = agent.unroll(new.params, valid.observations)
      reg, _ = agent.rule.meta_regularizer(meta_out, out, valid.actions[:-1])
      log_pi = jnp.take_along_axis(
          jax.nn.log_softmax(out["logits"][:-1]),
          valid.actions[:-1, :, None],
          -1,
      )[..., 0]
      return reg + jnp.mean(weights * log_pi)

    grads = jax.jit(jax.grad(loss))(meta_params)
    loss = jax.jit(loss)
    eps = 1e-5
    for k in range(3):
      leaves, tree = jax.tree.flatten(meta_params)
      keys = jax.random.split(jax.random.PRNGKey(10 + k), len(leaves))
      direction = jax.tree.unflatten(
          tree,
          [
              jax.random.normal(key, x.shape, jnp.float64)
              for key, x in zip(keys, leaves, strict=True)
          ],
      )
      plus = jax.tree.map(lambda p, d: p + eps * d, meta_params, direction)
      minus = jax.tree.map(lambda p, d: p - eps * d, meta_params, direction)
      numeric = (loss(plus) - loss(minus)) / (2 * eps)
      analytic = sum(
          jnp.vdot(g, d)
          for g, d in zip(
              jax.tree.leaves(grads), jax.tree.leaves(direction), strict=True
          )
      )
      assert abs(float(analytic)) > 1e-6
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6)


# ----------------------------------------------------------- launchers ----

LPG_CONFIG = REPO_DIR / "configs" / "meta_train_lpg.py"


def tiny_lpg_config(out: Path, **overrides):
  config = runpy.run_path(str(LPG_CONFIG))["get_config"]()
  config.population = (dict(env="lpg/dense", env_settings={}, num_agents=1),)
  config.num_devices = 1
  config.batch_size = 2
  config.rollout_len = 3
  config.inner_steps = 1
  config.lifetime_updates = (1, 3)
  config.rule_kwargs = dict(net=dict(TINY_NET))
  config.agent.network.dense = (8,)
  config.value_fn.dense = (8,)
  config.num_meta_steps = 2
  config.output_dir = str(out)
  config.update(overrides)
  return config


def test_lpg_config_is_groove_settings(tmp_path):
  config = runpy.run_path(str(LPG_CONFIG))["get_config"]()
  assert config.rule == "lpg"
  assert [g["env"] for g in config.population] == [
      f"lpg/{n}"
      for n in (
          "dense",
          "sparse",
          "long_horizon",
          "longer_horizon",
          "long_dense",
      )
  ]
  assert (config.batch_size, config.rollout_len, config.inner_steps) == (
      64,
      20,
      5,
  )
  assert config.meta_learning_rate == 1e-4
  assert config.meta_max_grad_norm == 0.5
  assert tuple(config.lifetime_updates) == (10, 250)
  settings = settings_lib._agent_settings(config)
  assert settings.rule_kwargs["net"]["hidden_size"] == 256
  config.num_devices = 1
  config.output_dir = str(tmp_path / "run")
  plan = plan_lib.build(config)
  assert len(plan.groups) == 5
  assert plan.population.config.lifetime_updates == (10, 250)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(lifetime_updates=(0, 3)), "cannot hold"),
        (dict(lifetime_updates=(5, 3)), "cannot hold"),
        (dict(lifetime_updates=(2, 3), inner_steps=3), "cannot hold"),
        (dict(lifetime_meta_steps=4), "both set"),
        (dict(rule="actor_critic"), "no meta-parameters"),
        (dict(init_meta_params="disco103"), "holds Disco meta-parameters"),
        (dict(rule_kwargs=dict(net=dict(hidden_sise=3))), "rule_kwargs"),
    ],
)
def test_meta_train_bad_lpg_settings(tmp_path, overrides, message):
  config = tiny_lpg_config(tmp_path / "run", **overrides)
  with pytest.raises(errors.UsageError, match=message):
    plan_lib.build(config)


@pytest.fixture(scope="module")
def exported_rule(tmp_path_factory):
  out = tmp_path_factory.mktemp("lpg") / "run"
  config = tiny_lpg_config(out, rule="ta_lpg")
  summary = mt.train(config, log=lambda _: None, progress=False)
  return out, summary


def run_eval(args, cwd):
  return subprocess.run(
      [sys.executable, "-m", "disco.launch.evaluate", *args],
      cwd=cwd,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=600,
  )


def test_meta_trained_lpg_rule_evaluates(exported_rule, tmp_path):
  out, summary = exported_rule
  assert summary["meta_steps"] == 2
  path = out / run_folder.META_PARAMS_FILE
  metadata = weights_lib.load_metadata(path)
  assert metadata["rule"] == "ta_lpg"
  assert (
      metadata["rule_kwargs"]["net"]["hidden_size"] == TINY_NET["hidden_size"]
  )
  result = run_eval(
      [
          f"--config.rule={path}",
          "--config.env=lpg/dense",
          "--config.total_env_steps=600",
          "--config.num_envs=4",
          "--config.rollout_len=10",
          "--config.min_replay_size=4",
          "--config.network.dense=(8,)",
          f"--config.output_dir={tmp_path / 'eval'}",
      ],
      tmp_path,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
  assert summary["rule"] == "meta_params"
  # A file whose arrays do not fit the rule its metadata names: one line,
  # exit status 2.
  metadata["rule_kwargs"]["net"]["hidden_size"] = 5
  bad = tmp_path / "bad.npz"
  weights_lib.save_meta_params(
      bad, weights_lib.load_meta_params(path), metadata
  )
  result = run_eval(
      [f"--config.rule={bad}", "--config.env=lpg/dense"], tmp_path
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "does not fit rule 'ta_lpg'" in lines[0]


def test_meta_train_impossible_lifetimes_one_line(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.meta_train",
          f"--config={LPG_CONFIG}",
          "--config.rule=ta_lpg",
          "--config.lifetime_updates=(2,300)",
          f"--config.output_dir={tmp_path / 'run'}",
      ],
      cwd=tmp_path,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "lifetime_updates=(2, 300) cannot hold" in lines[0]
  assert not (tmp_path / "run").exists()
