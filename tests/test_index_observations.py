"""State-index observations and the ``one_hot`` observation embedding: the
grid worlds' ``observation="index"``, networks whose first linear layer is a
gather (``agent_nets.NetConfig.obs_embedding="one_hot"``), the meta-training
value function on them, and ``configs/meta_train_lpg.py``, which uses both.

Each is checked against the same thing on one-hot observations: the same
outputs (exactly: a gather is the one-hot product), gradients and
meta-gradients (to float tolerance: the sums run in another order).
"""

from __future__ import annotations

import runpy

from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import errors
from disco import types
from disco.environments import lpg_grid
from disco.environments import registry as env_registry
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import trainer as mt
from disco.meta import value_function
from disco.networks import agent_nets
from disco.training import acting
from disco.update_rules import registry as rule_registry

from meta_settings import REPO_DIR

N, B, A = 13, 6, 3  # states, batch, actions
INDEX_SPEC = specs.BoundedArray((), np.int32, 0, N - 1, name="state_index")
ONE_HOT_SPEC = specs.Array((N,), np.float32, name="state_one_hot")
FLAT_SPEC = {
    "logits": types.ArraySpec((A,), np.float32),
    "y": types.ArraySpec((2, 2), np.float32),
}
# Every state at least once, the first and last among them.
INDICES = jnp.asarray(
    np.random.default_rng(0).permutation(np.r_[np.arange(N), [0, N - 1, 5]]),
    jnp.int32,
)
TINY_NET = dict(prediction_size=4, embedding_sizes=(4, 1), hidden_size=6)
LPG_CONFIG = REPO_DIR / "configs" / "meta_train_lpg.py"


def _nets(**settings):
  """The index network, the one-hot network and their (shared) parameters."""
  config = agent_nets.NetConfig(obs_embedding="one_hot", **settings)
  index_net = agent_nets.make_network(
      config.with_observation(INDEX_SPEC), A, FLAT_SPEC
  )
  one_hot_net = agent_nets.make_network(
      config.with_observation(ONE_HOT_SPEC), A, FLAT_SPEC
  )
  params = one_hot_net.init(
      jax.random.PRNGKey(1), jax.nn.one_hot(INDICES, N, dtype=jnp.float32)
  )
  return index_net, one_hot_net, params


NETWORKS = [
    dict(dense=(), separate_torsos=True, activate_final=True),
    dict(dense=(8,), separate_torsos=True, activate_final=True),
    dict(dense=(8, 4), activation="tanh"),
    dict(dense=(), compute_dtype="bfloat16"),
]


@pytest.mark.parametrize("settings", NETWORKS)
def test_index_network_is_the_one_hot_network(settings):
  index_net, one_hot_net, params = _nets(**settings)
  # The same parameters, initialised alike: the gather tables are the
  # one-hot layers' weights [N, out].
  index_params = index_net.init(jax.random.PRNGKey(1), INDICES)
  jax.tree.map(np.testing.assert_array_equal, index_params, params)
  first = [w for name, p in params.items() for k, w in p.items() if k == "w"]
  assert any(w.shape[0] == N for w in first)
  one_hot = jax.nn.one_hot(INDICES, N, dtype=jnp.float32)
  want = one_hot_net.apply(params, one_hot)
  for observations in (INDICES, INDICES[:, None]):  # [B] and [B, 1]
    got = index_net.apply(params, observations)
    jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.parametrize("settings", NETWORKS[:3])
def test_index_network_gradients_match_the_one_hot_network(settings):
  index_net, one_hot_net, params = _nets(**settings)
  weights = jax.random.normal(jax.random.PRNGKey(2), (len(INDICES), A))

  def loss(net, observations):
    def fn(p):
      out = net.apply(p, observations)
      return jnp.sum(weights * out["logits"]) + jnp.sum(out["y"] ** 2)

    return jax.grad(fn)(params)

  got = loss(index_net, INDICES)
  want = loss(one_hot_net, jax.nn.one_hot(INDICES, N, dtype=jnp.float32))
  jax.tree.map(
      lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6),
      got,
      want,
  )
  # Every row of every gather table got its states' gradient.
  for name, p in got.items():
    if p["w"].shape[0] == N:
      assert np.all(np.abs(np.asarray(p["w"])).sum(-1) > 0), name


@pytest.mark.parametrize("compute_dtype", ["float32", "bfloat16"])
def test_index_network_with_per_action_outputs(compute_dtype):
  """A shared torso with an action model: without a torso (``dense=()``)
  the model reads the index's one-hot vector."""
  config = agent_nets.NetConfig(
      dense=(),
      obs_embedding="one_hot",
      model_lstm_size=4,
      model_head_hiddens=(4,),
      compute_dtype=compute_dtype,
  )
  model_spec = {"q": types.ArraySpec((1,), np.float32)}
  index_net, one_hot_net = (
      agent_nets.make_network(
          config.with_observation(spec), A, FLAT_SPEC, model_spec
      )
      for spec in (INDEX_SPEC, ONE_HOT_SPEC)
  )
  one_hot = jax.nn.one_hot(INDICES, N, dtype=jnp.float32)
  params = one_hot_net.init(jax.random.PRNGKey(1), one_hot)
  jax.tree.map(
      np.testing.assert_array_equal,
      index_net.apply(params, INDICES),
      one_hot_net.apply(params, one_hot),
  )


def test_out_of_range_indices_read_zero_rows_as_their_one_hot():
  index_net, one_hot_net, params = _nets(dense=(), separate_torsos=True)
  bad = jnp.asarray([-1, N, N + 4, -N], jnp.int32)
  got = index_net.apply(params, bad)
  want = one_hot_net.apply(params, jax.nn.one_hot(bad, N, dtype=jnp.float32))
  jax.tree.map(np.testing.assert_array_equal, got, want)


def test_which_observations_each_embedding_takes():
  one_hot = agent_nets.NetConfig(obs_embedding="one_hot")
  assert one_hot.with_observation(INDEX_SPEC).num_states == N
  # Other float observations go in as they are, as with "none".
  assert one_hot.with_observation(specs.Array((4,), np.float32)) == one_hot
  with pytest.raises(ValueError, match="obs_embedding='one_hot'") as e:
    agent_nets.NetConfig().check_observation(INDEX_SPEC)
  assert "\n" not in str(e.value)
  with pytest.raises(ValueError, match="obs_embedding='none'"):
    one_hot.check_observation(specs.Array((7, 7, 2), np.int32))
  with pytest.raises(ValueError, match="obs_embedding='none'"):
    one_hot.check_observation(specs.BoundedArray((), np.int32, 1, N))
  with pytest.raises(ValueError, match="valid: .*obs_embedding"):
    agent_nets.make_net_config(dict(dense=(), num_states=N))
  # Index observations without num_states fail when traced, not silently.
  net = agent_nets.make_network(one_hot, A, FLAT_SPEC)
  with pytest.raises(ValueError, match="with_observation"):
    net.init(jax.random.PRNGKey(0), INDICES)


# ------------------------------------------------------------ grid worlds --


def _rollout(env, steps=30, seed=0):
  """The observations of a random rollout ``[steps + 1, B, ...]``."""
  state, timestep = env.reset(jax.random.PRNGKey(seed))
  observations = [timestep.observation]
  for key in jax.random.split(jax.random.PRNGKey(seed + 1), steps):
    actions = jax.random.randint(key, (env.batch_size,), 0, env.num_actions)
    state, timestep = env.step(state, actions)
    observations.append(timestep.observation)
  return np.stack(observations)


@pytest.mark.parametrize(
    "name, settings",
    [
        ("lpg/dense", {}),
        ("lpg/longer_horizon", dict(action_set="move_and_collect")),
        ("lpg/random", dict(mode="small")),
    ],
)
def test_grid_index_observations_are_the_one_hot_argmax(name, settings):
  tabular = env_registry.make_env(name, 4, **settings)
  index = env_registry.make_env(name, 4, observation="index", **settings)
  spec = index.observation_spec()
  assert isinstance(spec, specs.BoundedArray)
  assert (spec.shape, spec.dtype, spec.minimum) == ((), np.int32, 0)
  assert spec.maximum + 1 == tabular.observation_spec().shape[0]
  one_hot = _rollout(tabular)
  got = _rollout(index)
  assert got.shape == one_hot.shape[:2] and got.dtype == np.int32
  np.testing.assert_array_equal(got, one_hot.argmax(-1))
  np.testing.assert_array_equal(one_hot.sum(-1), 1.0)
  assert len(np.unique(got)) > 10  # the rollout visits states


def test_grid_observation_choices():
  with pytest.raises(ValueError, match="observation='indices'.*index"):
    lpg_grid.LpgGridWorld(2, observation="indices")
  with pytest.raises(ValueError, match="observation='random_features'"):
    env_registry.make_env("lpg/random", 2, observation="random_features")


# --------------------------------------------------------- value function --


@pytest.mark.parametrize("dense", [(), (8,)])
def test_value_function_on_indices_is_the_one_hot_value_function(dense):
  index_env = env_registry.make_env("lpg/sparse", 3, observation="index")
  tabular_env = env_registry.make_env("lpg/sparse", 3)
  index_fn, one_hot_fn = (
      value_function.ValueFunction(
          value_function.ValueFnConfig(
              dense=dense, obs_embedding="one_hot", learning_rate=0.1
          ),
          observation_spec=env.observation_spec(),
      )
      for env in (index_env, tabular_env)
  )
  assert index_fn.net_config.num_states == index_env.num_states
  settings = rule_registry.default_settings("lpg")
  settings = settings.replace(
      rule_kwargs=dict(
          settings.rule_kwargs,
          net=dict(settings.rule_kwargs["net"], **TINY_NET),
      ),
      network=dict(settings.network, dense=(4,), obs_embedding="one_hot"),
  )
  agent = agent_lib.make_agent(
      settings,
      index_env.num_actions,
      observation_spec=index_env.observation_spec(),
  )
  rng = jax.random.PRNGKey(0)
  actor = acting.init_actor(index_env, rng)
  obs = actor.timestep.observation[0]
  learner = agent.initial_learner_state(rng, obs)
  _, rollout = acting.unroll_actor(
      agent, index_env, learner.params, learner.rule_state, actor, rng, 12
  )
  one_hot_rollout = rollout.replace(
      observations=jax.nn.one_hot(
          rollout.observations, index_env.num_states, dtype=jnp.float32
      )
  )
  index_state = index_fn.initial_state(rng, obs)
  one_hot_state = one_hot_fn.initial_state(
      rng, one_hot_rollout.observations[0, 0]
  )
  jax.tree.map(np.testing.assert_array_equal, index_state, one_hot_state)
  np.testing.assert_array_equal(
      index_fn.values(index_state.params, rollout.observations),
      one_hot_fn.values(index_state.params, one_hot_rollout.observations),
  )
  logits = rollout.logits + 0.5
  got, got_logs = index_fn.update(index_state, rollout, logits)
  want, want_logs = one_hot_fn.update(one_hot_state, one_hot_rollout, logits)
  close = lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  jax.tree.map(close, got_logs, want_logs)
  jax.tree.map(close, got, want)
  moved = jax.tree.map(
      lambda a, b: float(jnp.abs(a - b).max()), got.params, index_state.params
  )
  assert all(v > 0 for v in jax.tree.leaves(moved))


# ----------------------------------------------------------- LPG config ----


def lpg_config(out, index: bool, **overrides):
  """``configs/meta_train_lpg.py`` at tiny sizes, one group on ``dense``:
  with its index observations (``index``) or one-hot ones, set explicitly."""
  config = runpy.run_path(str(LPG_CONFIG))["get_config"]()
  observation = "index" if index else "tabular"
  embedding = "one_hot" if index else "none"
  config.population = (
      dict(
          env="lpg/dense",
          env_settings=dict(observation=observation),
          num_agents=2,
      ),
  )
  config.agent.network.obs_embedding = embedding
  config.value_fn.obs_embedding = embedding
  config.num_devices = 1
  config.batch_size = 4
  config.rollout_len = 3
  config.inner_steps = 2
  config.max_unrolled_inner_steps = 2
  config.lifetime_updates = (2, 6)
  config.rule_kwargs = dict(net=dict(TINY_NET))
  config.num_meta_steps = 2
  config.output_dir = str(out)
  config.update(overrides)
  return config


def test_lpg_config_reads_every_grid_world_as_indices(tmp_path):
  config = runpy.run_path(str(LPG_CONFIG))["get_config"]()
  assert config.agent.network.obs_embedding == "one_hot"
  assert config.value_fn.obs_embedding == "one_hot"
  for group in config.population:
    assert group["env_settings"]["observation"] == "index"
  config.num_devices = 1
  config.output_dir = str(tmp_path / "run")
  # Held out: CartPole's floats and a one-hot grid world go in as they are.
  config.validation.envs = (
      {"env": "gymnax/CartPole-v1"},
      {"env": "lpg/sparse"},
  )
  config.validation.references = ("lpg/sparse:random=0,reference=1,source=x",)
  config.validation.every = 1
  plan = plan_lib.build(config)
  assert len(plan.groups) == 5
  for g in plan.groups:
    assert g.agent.net_config.num_states == g.env.num_states
    assert g.value_fn.net_config.num_states == g.env.num_states
  plans = plan.validation.validator.plans
  assert plans["gymnax/CartPole-v1"].agent.net_config.num_states is None
  assert plans["lpg/sparse"].agent.net_config.num_states is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(agent=dict(network=dict(obs_embedding="none"))), "network.obs"),
        (dict(value_fn=dict(obs_embedding="none")), "value_fn.obs"),
        (dict(value_fn=dict(obs_embedding="one-hot")), "value_fn"),
    ],
)
def test_lpg_config_bad_embeddings_fail_in_one_line(
    tmp_path, overrides, message
):
  config = lpg_config(tmp_path / "run", index=True)
  for key, value in overrides.items():
    for k, v in value.items():
      if isinstance(v, dict):
        config[key][k].update(v)
      else:
        config[key][k] = v
  with pytest.raises(errors.UsageError, match=message) as e:
    plan_lib.build(config)
  assert "\n" not in str(e.value)


def _one_step(config):
  plan = plan_lib.build(config)
  state = plan_lib.initial_state(plan)
  new_state, logs = plan.population.step(state)
  return plan, jax.device_get((state, new_state, logs))


def test_lpg_meta_step_on_indices_is_the_one_hot_meta_step(tmp_path):
  # Plain SGD at rate 1 on the meta-parameters: their change is the
  # meta-gradient.
  settings = dict(meta_optimizer="sgd", meta_learning_rate=1.0)
  settings.update(meta_max_grad_norm=None)
  index_plan, (before, index_after, index_logs) = _one_step(
      lpg_config(tmp_path / "index", True, **settings)
  )
  one_hot_plan, (one_hot_before, one_hot_after, one_hot_logs) = _one_step(
      lpg_config(tmp_path / "one_hot", False, **settings)
  )
  assert index_plan.groups[0].agent.net_config.num_states == 1936
  assert one_hot_plan.groups[0].agent.net_config.num_states is None
  # The same initial agents (parameters alike) and meta-parameters.
  jax.tree.map(
      np.testing.assert_array_equal,
      before.agents[0].learner.params,
      one_hot_before.agents[0].learner.params,
  )
  grad = lambda s: jax.tree.map(
      lambda a, b: a - b, before.meta_params, s.meta_params
  )
  got, want = grad(index_after), grad(one_hot_after)
  norm = np.sqrt(sum(np.sum(np.square(g)) for g in jax.tree.leaves(want)))
  assert norm > 1e-4
  jax.tree.map(
      lambda g, w: np.testing.assert_allclose(
          g, w, rtol=1e-4, atol=1e-6 * norm
      ),
      got,
      want,
  )
  assert set(index_logs) == set(one_hot_logs)
  for key in index_logs:
    np.testing.assert_allclose(
        index_logs[key], one_hot_logs[key], rtol=1e-4, atol=1e-6, err_msg=key
    )
  jax.tree.map(
      lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6),
      index_after.agents[0].learner.params,
      one_hot_after.agents[0].learner.params,
  )


def test_tiny_lpg_meta_training_on_indices(tmp_path):
  out = tmp_path / "run"
  summary = mt.train(
      lpg_config(out, index=True), log=lambda _: None, progress=False
  )
  assert summary["meta_steps"] == 2
  assert (out / run_folder.META_PARAMS_FILE).exists()
