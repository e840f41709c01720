"""Tests for disco.environments.gymnax_envs (gymnax as disco environments)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import gymnax_envs
from disco.environments import registry
from disco.environments import suite_utils

import test_env_contract as contract

B = 2  # streams

# id -> (observation shape, number of actions). Every bsuite environment but
# MNISTBandit-bsuite, which downloads MNIST when it is built (see
# test_mnist_bandit_never_downloads).
TESTED = {
    "CartPole-v1": ((4,), 2),
    "Acrobot-v1": ((6,), 3),
    "MountainCar-v0": ((2,), 3),
    "Breakout-MinAtar": ((10, 10, 4), 3),
    "Asterix-MinAtar": ((10, 10, 4), 5),
    "Freeway-MinAtar": ((10, 10, 7), 3),
    "SpaceInvaders-MinAtar": ((10, 10, 6), 4),
    "Catch-bsuite": ((10, 5), 3),
    "DeepSea-bsuite": ((8, 8), 2),
    "MemoryChain-bsuite": ((3,), 2),
    "UmbrellaChain-bsuite": ((3,), 2),
    "DiscountingChain-bsuite": ((2,), 5),
    "SimpleBandit-bsuite": ((1, 1), 11),
    "FrozenLake-misc": ((), 4),  # an int32 observation, cast to float32
}
# gymnax's MemoryChain step returns the observation of the state *before*
# the step (by design of its step_env), except after a reset.
LAGGED_OBSERVATION = ("gymnax/MemoryChain-bsuite",)
# id -> (observation shape, action minimum [D], action maximum [D]).
CONTINUOUS = {
    "Pendulum-v1": ((3,), [-2.0], [2.0]),
    "MountainCarContinuous-v0": ((2,), [-1.0], [1.0]),
    "PointRobot-misc": ((6,), [-0.1, -0.1], [0.1, 0.1]),
    "Reacher-misc": ((8,), [-1.0, -1.0], [1.0, 1.0]),
    "Swimmer-misc": ((16,), [-1.0, -1.0], [1.0, 1.0]),
}
# The gymnax environments of the environment contract (its rollouts, with
# its step limit, are shared with the checks below).
CONTRACT_NAMES = [n for n in contract.NAMES if n.startswith(gymnax_envs.PREFIX)]


# ------------------------------------------------------------ registry ----


def test_env_names_are_the_gymnax_ids():
  import gymnax  # pylint: disable=g-import-not-at-top
  from gymnax.environments import spaces  # pylint: disable=g-import-not-at-top

  discrete, continuous = [], []
  for env_id in gymnax.registered_envs:
    if env_id == gymnax_envs.MNIST_ID:  # building it downloads MNIST
      discrete.append(env_id)
      continue
    env, params = gymnax.make(env_id)
    space = env.action_space(params)
    if isinstance(space, spaces.Discrete):
      discrete.append(env_id)
    else:
      assert isinstance(space, spaces.Box) and len(space.shape) == 1
      continuous.append(env_id)
  assert list(gymnax_envs.DISCRETE_IDS) == discrete
  assert len(discrete) == 21
  assert list(gymnax_envs.CONTINUOUS_IDS) == continuous == list(CONTINUOUS)
  assert gymnax_envs.ENV_IDS == tuple(discrete + continuous)
  specs = gymnax_envs.env_specs()
  assert tuple(specs) == gymnax_envs.ENV_NAMES
  assert gymnax_envs.CONTINUOUS_NAMES == tuple(
      "gymnax/" + i for i in continuous
  )
  assert all(name.startswith("gymnax/") for name in specs)
  factory, defaults = specs["gymnax/CartPole-v1"]
  assert defaults["max_steps_in_episode"] == 500
  assert defaults["gravity"] == 9.8
  assert specs["gymnax/Catch-bsuite"][1]["rows"] == 10
  assert specs["gymnax/MNISTBandit-bsuite"][1]["max_steps_in_episode"] == 1
  env = factory(3, max_steps_in_episode=20)
  assert env.batch_size == 3 and env.name == "gymnax/CartPole-v1"


def test_importing_the_module_does_not_import_gymnax():
  code = (
      "import sys, disco, disco.environments.gymnax_envs; "
      "assert 'gymnax' not in sys.modules, 'gymnax imported'"
  )
  subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("env_id", list(CONTINUOUS))
def test_continuous_ids_have_box_action_specs(env_id):
  obs_shape, minimum, maximum = CONTINUOUS[env_id]
  env = gymnax_envs.make(env_id, B)
  assert env.is_continuous
  spec = env.action_spec()
  assert spec.dtype == np.float32 and spec.shape == (len(minimum),)
  np.testing.assert_array_equal(spec.minimum, np.float32(minimum))
  np.testing.assert_array_equal(spec.maximum, np.float32(maximum))
  assert env.observation_spec().shape == obs_shape
  with pytest.raises(ValueError, match="continuous actions"):
    _ = env.num_actions


def test_pendulum_bounds_follow_max_torque_and_clip():
  env = gymnax_envs.make("Pendulum-v1", B, max_torque=0.5)
  np.testing.assert_array_equal(env.action_spec().maximum, [0.5])
  state, _ = env.reset(jax.random.PRNGKey(0))
  # gymnax pays -0.001 * u**2 for a torque u: only the clipped torque 0.5
  # (or -0.5) can have been applied.
  big = jnp.array([[3.0], [-3.0]])
  _, ts = env.step(state, big)
  _, clipped = env.step(state, jnp.clip(big, -0.5, 0.5))
  np.testing.assert_array_equal(ts.reward, clipped.reward)
  with pytest.raises(AssertionError, match="shape"):
    env.step(state, jnp.zeros((B,)))  # [B] is a discrete action batch


@pytest.mark.parametrize(
    "env_id, close",
    [
        ("CartPole-v2", "CartPole-v1"),
        ("gymnax/Breakout-Minatar", "Breakout-MinAtar"),
    ],
)
def test_unknown_id_names_close_matches(env_id, close):
  with pytest.raises(ValueError, match=f"Did you mean '{close}'"):
    gymnax_envs.make(env_id, 2)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(max_step=10), r"\['max_step'\].*max_steps_in_episode"),
        (dict(max_steps_in_episode=2.5), "must be an integer"),
        (dict(gravity="high"), "must be a real number"),
    ],
)
def test_bad_settings_are_rejected(settings, message):
  with pytest.raises(ValueError, match=message):
    gymnax_envs.make("CartPole-v1", 2, **settings)


def test_bad_batch_size_is_rejected():
  with pytest.raises(ValueError, match="batch_size"):
    gymnax_envs.make("CartPole-v1", 0)


def test_settings_reach_the_environment():
  env = gymnax_envs.make(
      "gymnax/CartPole-v1", 2, max_steps_in_episode=7, gravity=5
  )
  assert int(env.params.max_steps_in_episode) == 7
  assert float(env.params.gravity) == 5.0
  catch = gymnax_envs.make("Catch-bsuite", 2, rows=6, columns=4)
  assert catch.observation_spec().shape == (6, 4)
  deep_sea = gymnax_envs.make("DeepSea-bsuite", 2, size=5)
  assert deep_sea.observation_spec().shape == (5, 5)
  breakout = gymnax_envs.make(
      "Breakout-MinAtar", 2, use_minimal_action_set=False
  )
  assert breakout.num_actions == 6


def test_mnist_bandit_never_downloads(monkeypatch, tmp_path):
  from gymnax.utils import load_mnist  # pylint: disable=g-import-not-at-top

  def no_download(*args, **kwargs):
    raise AssertionError(f"download attempted: {args}")

  monkeypatch.setattr(load_mnist, "urlretrieve", no_download)
  monkeypatch.setattr(gymnax_envs, "MNIST_DIR", str(tmp_path))
  with pytest.raises(ValueError, match="MNIST files"):
    gymnax_envs.make("MNISTBandit-bsuite", 2)


# ----------------------------------------------------------- semantics ----


@pytest.mark.parametrize("env_id", list(TESTED))
def test_specs_of_each_id(env_id):
  obs_shape, num_actions = TESTED[env_id]
  env = gymnax_envs.make(env_id, B, max_steps_in_episode=contract.LIMIT)
  assert env.num_actions == num_actions
  assert env.observation_spec().shape == obs_shape


def _observe(env, states):
  """The package's own observation of every state ``[..., B]``."""
  lead = states.env_state.time.shape
  flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[len(lead) :]), states)
  observe = jax.jit(
      jax.vmap(
          lambda s, p: env.package_env.observe(
              jax.random.PRNGKey(0), s, None, p
          )
      )
  )
  seen = observe(flat.env_state, flat.params).astype(jnp.float32)
  return np.asarray(seen).reshape(lead + seen.shape[1:])


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_step_types_and_observations_follow_the_package(name):
  env, _, _, (_, ts, states) = contract.rollout(
      name, **contract.settings_for(name)
  )
  assert isinstance(states, suite_utils.SuiteState)
  # The package's time counter before each step (0 after reset), and after
  # it: a LAST step shows the next episode, whose counter is back at 0.
  time = np.asarray(states.env_state.time)
  last = ts.step_type == types.LAST
  before = np.concatenate([np.zeros_like(time[:, :1]), time[:, :-1]], axis=1)
  np.testing.assert_array_equal(time[last], 0)
  np.testing.assert_array_equal(time[~last], before[~last] + 1)
  # Truncated (LAST, discount 1) exactly when the package's limit is hit.
  truncated = last & (ts.discount == 1.0)
  np.testing.assert_array_equal(before[truncated] + 1, contract.LIMIT)
  # A LAST step shows the new state's observation: the next episode's first
  # (up to rounding: gymnax computes some observations, e.g.
  # MountainCarContinuous's, in its step differently than in observe).
  seen = _observe(env, states)
  contract.assert_same(ts.observation[last], seen[last])
  if name not in LAGGED_OBSERVATION:
    contract.assert_same(ts.observation, seen)


def test_cartpole_truncation_is_last_with_discount_one():
  env = gymnax_envs.make("CartPole-v1", B, max_steps_in_episode=5)
  state, _ = env.reset(jax.random.PRNGKey(3))
  for t in range(1, 6):
    # Alternating pushes keep the pole up for far longer than 5 steps.
    state, ts = env.step(state, jnp.full((B,), t % 2, jnp.int32))
    np.testing.assert_array_equal(ts.reward, 1.0)
    np.testing.assert_array_equal(ts.discount, 1.0)
    expected = types.LAST if t == 5 else types.MID
    np.testing.assert_array_equal(ts.step_type, expected)
  # The LAST step already shows the next episode's first observation.
  np.testing.assert_array_equal(state.env_state.time, 0)
  assert np.all(np.abs(ts.observation) <= 0.05)
  first_start = np.asarray(ts.observation)
  for t in range(1, 6):
    state, ts = env.step(state, jnp.full((B,), t % 2, jnp.int32))
    expected = types.LAST if t == 5 else types.MID
    np.testing.assert_array_equal(ts.step_type, expected)
  # Each stream's key moves on: the next episode starts elsewhere.
  assert np.all(np.abs(ts.observation) <= 0.05)
  assert not np.any(np.all(ts.observation == first_start, axis=-1))


def test_cartpole_fallen_pole_is_last_with_discount_zero():
  env = gymnax_envs.make("CartPole-v1", B)
  state, ts = env.reset(jax.random.PRNGKey(4))
  push_right = jnp.ones((B,), jnp.int32)
  ended = np.zeros(B, bool)
  for _ in range(40):
    previous = np.asarray(ts.observation)
    state, ts = env.step(state, push_right)
    last = np.asarray(ts.step_type) == types.LAST
    new = last & ~ended
    # The pole falls: a termination, with the reward of that step.
    np.testing.assert_array_equal(ts.discount[new], 0.0)
    np.testing.assert_array_equal(ts.reward[new], 1.0)
    # The observation is a fresh start, not the fallen pole.
    assert np.all(np.abs(ts.observation[new]) <= 0.05)
    assert np.all(np.abs(previous[new]).max(axis=-1) > 0.05)
    np.testing.assert_array_equal(state.env_state.time[new], 0)
    ended |= last
  assert ended.all(), "the pole never fell"


def test_streams_use_the_parameters_in_their_state():
  env = gymnax_envs.make("CartPole-v1", B, max_steps_in_episode=50)
  state, _ = env.reset(jax.random.PRNGKey(6))
  limits = jnp.array([2, 3], jnp.int32)
  state = state.replace(
      params=state.params.replace(max_steps_in_episode=limits)
  )
  step_types = []
  for t in range(3):
    state, ts = env.step(state, jnp.full((B,), t % 2, jnp.int32))
    step_types.append(np.asarray(ts.step_type))
  np.testing.assert_array_equal(
      step_types,
      [
          [types.MID, types.MID],
          [types.LAST, types.MID],
          [types.MID, types.LAST],
      ],
  )


def test_continuous_reference_entries_and_the_random_return():
  from disco.environments import reference_scores  # pylint: disable=g-import-not-at-top

  for env_id in ("Pendulum-v1", "MountainCarContinuous-v0"):
    entry = reference_scores.get_entry("gymnax/" + env_id)
    np.testing.assert_allclose(
        reference_scores.normalize(
            [entry.random_return, entry.reference_return], "gymnax/" + env_id
        ),
        [0.0, 1.0],
    )
  # The table's random return of Pendulum-v1 (measured with gymnax's own
  # step) is the adapter's: one 200-step episode per stream, uniform
  # torques in [-2, 2].
  episodes, steps = 512, 200
  env = gymnax_envs.make("Pendulum-v1", episodes)

  def run(key):
    state, _ = env.reset(key)

    def step(state, action_key):
      actions = jax.random.uniform(
          action_key, (episodes, 1), minval=-2.0, maxval=2.0
      )
      state, ts = env.step(state, actions)
      return state, ts

    _, ts = jax.lax.scan(step, state, jax.random.split(key, steps))
    return ts

  ts = jax.device_get(jax.jit(run)(jax.random.PRNGKey(11)))
  np.testing.assert_array_equal(ts.step_type[-1], types.LAST)
  np.testing.assert_array_equal(ts.step_type[:-1], types.MID)
  returns = ts.reward.sum(axis=0)
  entry = reference_scores.get_entry("gymnax/Pendulum-v1")
  sem = np.hypot(returns.std() / np.sqrt(episodes), 4.5355)
  assert abs(returns.mean() - entry.random_return) < 4 * sem


def test_logs_name_only_the_settings_that_differ_from_the_defaults():
  name = "gymnax/CartPole-v1"
  defaults = registry.get_entry(name).settings
  assert "gravity" in defaults  # the physics constants are settings
  assert registry.describe_settings(name, defaults) == name
  changed = {**defaults, "gravity": 3.5}
  assert registry.describe_settings(name, changed) == f"{name} (gravity=3.5)"
  catch = {"rows": 5, "columns": 8}  # Catch is 8x8 by default
  assert registry.describe_settings("catch", catch) == "catch (rows=5)"
