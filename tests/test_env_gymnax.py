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
from disco.environments import suite_utils

from conftest import assert_copies_step_alike

B = 2  # streams
SEEDS = 2  # vmapped rollouts
STEPS = 100  # steps per scanned rollout
LIMIT = 6  # max_steps_in_episode of the semantics test: truncations happen

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
# Episodes that never reach LIMIT steps: every bandit pull terminates, and a
# memory chain of length 5 terminates at step 6 (termination wins).
NO_TRUNCATION = ("SimpleBandit-bsuite", "MemoryChain-bsuite")
# gymnax's MemoryChain step returns the observation of the state *before*
# the step (by design of its step_env), except after a reset.
LAGGED_OBSERVATION = ("MemoryChain-bsuite",)
CONTINUOUS = (
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "PointRobot-misc",
    "Reacher-misc",
    "Swimmer-misc",
)


def _rollout_fn(env):
  """``jit(vmap(run))``: reset, then a ``lax.scan`` of ``STEPS`` random steps.

  ``run(key)`` returns the reset timestep, the ``[STEPS, B]`` timesteps, the
  package's time counter ``[STEPS, B]`` after every step and the package's
  own observation of the state after every step.
  """
  observe = jax.vmap(
      lambda s, p: env.package_env.observe(jax.random.PRNGKey(0), s, None, p)
  )

  def run(key):
    reset_key, action_key = jax.random.split(key)
    state, first = env.reset(reset_key)
    actions = jax.random.randint(
        action_key, (STEPS, env.batch_size), 0, env.num_actions
    )

    def step(state, action):
      state, ts = env.step(state, action)
      seen = observe(state.env_state, state.params).astype(jnp.float32)
      return state, (ts, state.env_state.time, seen)

    _, outs = jax.lax.scan(step, state, actions)
    return (first,) + outs

  return jax.jit(jax.vmap(run))


def _check_episodes(ts, time, limit, truncates):
  """Step types, discounts and the time counter agree ([SEEDS, T, B])."""
  last = ts.step_type == types.LAST
  assert set(np.unique(ts.step_type)) <= {types.MID, types.LAST}
  assert last.any(), "no episode ended"
  np.testing.assert_array_equal(ts.discount[~last], 1.0)
  assert set(np.unique(ts.discount)) <= {0.0, 1.0}
  # The counter before each step (0 after reset), and after it: a LAST step
  # shows the next episode, whose counter is back at 0.
  before = np.concatenate([np.zeros_like(time[:, :1]), time[:, :-1]], axis=1)
  np.testing.assert_array_equal(time[last], 0)
  np.testing.assert_array_equal(time[~last], before[~last] + 1)
  # Truncated (LAST, discount 1) exactly at the limit; never past it.
  truncated = last & (ts.discount == 1.0)
  assert truncated.any() == truncates
  np.testing.assert_array_equal(before[truncated] + 1, limit)
  assert np.all(before[~last] + 1 < limit)


# ------------------------------------------------------------ registry ----


def test_env_names_are_the_discrete_gymnax_ids():
  import gymnax  # pylint: disable=g-import-not-at-top
  from gymnax.environments import spaces  # pylint: disable=g-import-not-at-top

  discrete = []
  for env_id in gymnax.registered_envs:
    if env_id == gymnax_envs.MNIST_ID:  # building it downloads MNIST
      discrete.append(env_id)
      continue
    env, params = gymnax.make(env_id)
    if isinstance(env.action_space(params), spaces.Discrete):
      discrete.append(env_id)
  assert list(gymnax_envs.DISCRETE_IDS) == discrete
  assert len(discrete) == 21
  assert set(gymnax.registered_envs) - set(discrete) == set(CONTINUOUS)
  specs = gymnax_envs.env_specs()
  assert tuple(specs) == gymnax_envs.ENV_NAMES
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


@pytest.mark.parametrize("env_id", CONTINUOUS)
def test_continuous_ids_are_rejected(env_id):
  with pytest.raises(ValueError, match="continuous") as error:
    gymnax_envs.make(env_id, 2)
  assert "CartPole-v1" in str(error.value)  # names the valid ids


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
def test_shapes_semantics_and_determinism(env_id):
  obs_shape, num_actions = TESTED[env_id]
  env = gymnax_envs.make(env_id, B, max_steps_in_episode=LIMIT)
  assert env.is_jittable and env.batch_size == B
  assert env.num_actions == num_actions
  assert env.observation_spec().shape == obs_shape
  assert env.observation_spec().dtype == np.float32
  action_spec = env.action_spec()
  assert action_spec.dtype == np.int32 and action_spec.shape == ()
  assert (action_spec.minimum, action_spec.maximum) == (0, num_actions - 1)

  state, ts = env.reset(jax.random.PRNGKey(0))
  assert isinstance(state, suite_utils.SuiteState)
  assert ts.observation.shape == (B,) + obs_shape
  assert ts.observation.dtype == np.float32
  np.testing.assert_array_equal(ts.step_type, types.FIRST)
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.discount, 1.0)
  # Every leaf leads with the stream axis (copies / search along it work).
  for leaf in jax.tree.leaves(state):
    assert leaf.shape[:1] == (B,)

  rollout = _rollout_fn(env)
  keys = jax.random.split(jax.random.PRNGKey(1), SEEDS)
  first, ts, time, seen = jax.device_get(rollout(keys))
  assert ts.observation.shape == (SEEDS, STEPS, B) + obs_shape
  assert ts.observation.dtype == np.float32
  assert ts.reward.shape == ts.discount.shape == (SEEDS, STEPS, B)
  assert ts.reward.dtype == ts.discount.dtype == np.float32
  assert ts.step_type.dtype == np.int32
  np.testing.assert_array_equal(first.step_type, types.FIRST)
  _check_episodes(ts, time, LIMIT, env_id not in NO_TRUNCATION)
  # A LAST step shows the new state's observation: the next episode's first.
  last = ts.step_type == types.LAST
  np.testing.assert_array_equal(ts.observation[last], seen[last])
  if env_id not in LAGGED_OBSERVATION:
    np.testing.assert_array_equal(ts.observation, seen)

  # Same keys, same trajectories (also when the seeds are reordered); other
  # keys, other ones.
  again = jax.device_get(rollout(keys))
  jax.tree.map(np.testing.assert_array_equal, (first, ts, time, seen), again)
  swapped = jax.device_get(rollout(keys[::-1]))[1]
  jax.tree.map(
      lambda a, b: np.testing.assert_array_equal(a[0], b[1]), ts, swapped
  )
  assert not all(np.array_equal(x[0], x[1]) for x in jax.tree.leaves(ts))


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


def test_state_copies_step_alike():
  env = gymnax_envs.make("Breakout-MinAtar", B)
  assert_copies_step_alike(env, jnp.array([0, 2], jnp.int32))


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
