"""Tests for disco.environments.xminigrid_envs (XLand-MiniGrid in disco)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import suite_utils
from disco.environments import xminigrid_envs

import test_env_contract as contract

B = 2  # streams
XLAND = "XLand-MiniGrid-R1-9x9"
FORWARD, TURN_RIGHT = 0, 1
# The xminigrid environments of the environment contract (its rollouts, with
# its step limit and ruleset file, are shared with the checks below).
CONTRACT_NAMES = [
    n for n in contract.NAMES if n.startswith(xminigrid_envs.PREFIX)
]


@pytest.fixture(scope="module")
def benchmark_path(tmp_path_factory):
  """The contract's two-ruleset benchmark file
  (``test_env_contract.xland_benchmark_file``)."""
  return contract.xland_benchmark_file(
      tmp_path_factory.mktemp("xland") / "tiny_benchmark"
  )


def _view(env, states):
  """xminigrid's own view of every state ``[..., B]``."""
  from xminigrid.core import observation  # pylint: disable=g-import-not-at-top

  package = states.env_state.state
  lead = package.step_num.shape
  flat = jax.tree.map(
      lambda x: x.reshape((-1,) + x.shape[len(lead) :]), package
  )
  size = env.params.view_size
  view = jax.jit(
      jax.vmap(
          lambda s: observation.transparent_field_of_view(
              s.grid, s.agent, size, size
          )
      )
  )
  seen = np.asarray(view(flat)).astype(np.float32)
  return seen.reshape(lead + seen.shape[1:])


def _check_against_the_package(env, ts, states, limit):
  """Step types follow xminigrid's step counter, rewards its goal, and each
  observation is xminigrid's view of the state after the step (after LAST,
  the next episode's)."""
  count = np.asarray(states.env_state.state.step_num)
  last = ts.step_type == types.LAST
  before = np.concatenate([np.zeros_like(count[:, :1]), count[:, :-1]], 1)
  np.testing.assert_array_equal(count[last], 0)
  np.testing.assert_array_equal(count[~last], before[~last] + 1)
  truncated = last & (ts.discount == 1.0)
  terminated = last & (ts.discount == 0.0)
  np.testing.assert_array_equal(before[truncated] + 1, limit)
  # Only reaching the goal pays: 1 - 0.9 * steps / max_steps.
  np.testing.assert_allclose(
      ts.reward[terminated],
      1.0 - 0.9 * (before[terminated] + 1) / limit,
      rtol=1e-6,
  )
  np.testing.assert_array_equal(ts.reward[~terminated], 0.0)
  np.testing.assert_array_equal(ts.observation, _view(env, states))
  return terminated


# ------------------------------------------------------------ registry ----


def test_env_names_are_the_xminigrid_ids():
  import xminigrid  # pylint: disable=g-import-not-at-top

  assert set(xminigrid_envs.ENV_IDS) == set(xminigrid.registered_environments())
  assert len(xminigrid_envs.ENV_IDS) == 44
  assert len(xminigrid_envs.XLAND_IDS) == 21
  assert len(xminigrid_envs.MINIGRID_IDS) == 23
  specs = xminigrid_envs.env_specs()
  assert tuple(specs) == xminigrid_envs.ENV_NAMES
  assert specs["xminigrid/MiniGrid-Empty-8x8"][1] == dict(
      height=8, width=8, view_size=7, max_steps=None
  )
  assert specs[f"xminigrid/{XLAND}"][1] == dict(
      height=9,
      width=9,
      view_size=5,
      max_steps=None,
      benchmark_path=None,
      ruleset_id=0,
  )
  assert specs["xminigrid/MiniGrid-Playground"][1]["num_objects"] == 12
  env = specs["xminigrid/MiniGrid-Empty-5x5"][0](3)
  assert env.batch_size == 3 and env.name == "xminigrid/MiniGrid-Empty-5x5"
  assert int(env.params.max_steps) == 100  # xminigrid's 4 * 5 * 5


def test_importing_the_module_does_not_import_xminigrid():
  code = (
      "import sys, disco, disco.environments.xminigrid_envs; "
      "assert 'xminigrid' not in sys.modules, 'xminigrid imported'"
  )
  subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "env_id, close",
    [
        ("MiniGrid-Empty-8x9", "MiniGrid-Empty-8x8"),
        ("xminigrid/MiniGrid-DorKey-5x5", "MiniGrid-DoorKey-5x5"),
    ],
)
def test_unknown_id_names_close_matches(env_id, close):
  with pytest.raises(ValueError, match=f"Did you mean '{close}'"):
    xminigrid_envs.make(env_id, 2)


@pytest.mark.parametrize(
    "env_id, settings, message",
    [
        ("MiniGrid-Empty-8x8", dict(max_step=3), r"\['max_step'\].*max_steps"),
        ("MiniGrid-Empty-8x8", dict(ruleset_id=0), r"ruleset_id.*view_size"),
        ("MiniGrid-Empty-8x8", dict(height="8"), "height='8'.*integer"),
        ("MiniGrid-Empty-8x8", dict(max_steps=0), "max_steps=0.*>= 1"),
        (XLAND, dict(), "needs the setting benchmark_path"),
        (XLAND, dict(benchmark_path="/nonexistent/benchmark"), "no such file"),
    ],
)
def test_bad_settings_are_rejected(env_id, settings, message):
  with pytest.raises(ValueError, match=message):
    xminigrid_envs.make(env_id, 2, **settings)


def test_bad_benchmark_files_are_rejected(benchmark_path, tmp_path):
  with pytest.raises(ValueError, match="ruleset_id=2.*holds 2 rulesets"):
    xminigrid_envs.make(XLAND, 2, benchmark_path=benchmark_path, ruleset_id=2)
  not_bz2 = tmp_path / "plain.txt"
  not_bz2.write_text("not a benchmark")
  with pytest.raises(ValueError, match="not a ruleset benchmark file"):
    xminigrid_envs.make(XLAND, 2, benchmark_path=not_bz2)


def test_settings_reach_the_environment():
  env = xminigrid_envs.make("MiniGrid-Empty-8x8", 2, max_steps=30, view_size=5)
  assert env.params.max_steps == 30
  assert env.observation_spec().shape == (5, 5, 2)
  # A default step limit follows an overridden grid size.
  small = xminigrid_envs.make("MiniGrid-Empty-8x8", 2, height=5, width=6)
  assert (small.params.height, small.params.width) == (5, 6)
  assert small.params.max_steps == 4 * 5 * 6


def test_xland_ruleset_comes_from_the_file(benchmark_path):
  for ruleset_id, count in ((0, 2), (1, 1)):
    env = xminigrid_envs.make(
        XLAND, B, benchmark_path=benchmark_path, ruleset_id=ruleset_id
    )
    assert env.observation_spec().shape == (5, 5, 2) and env.num_actions == 6
    state, ts = env.reset(jax.random.PRNGKey(0))
    ruleset = jax.device_get(state.params.ruleset)
    expected = xminigrid_envs.load_ruleset(benchmark_path, ruleset_id)
    for got, want in zip(
        jax.tree.leaves(ruleset),
        jax.tree.leaves(jax.device_get(expected)),
        strict=True,
    ):
      np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))
    # The ruleset's objects are on every stream's grid: a red ball (tile 3,
    # colour 1), and for ruleset 0 a green square (tile 4, colour 2).
    grid = np.asarray(state.env_state.state.grid)
    objects = (grid[..., 0] >= 3) & (grid[..., 0] <= 4)
    np.testing.assert_array_equal(objects.sum(axis=(1, 2)), count)
    assert np.all(np.any(np.all(grid == (3, 1), axis=-1), axis=(1, 2)))
    np.testing.assert_array_equal(ts.step_type, types.FIRST)


# ----------------------------------------------------------- semantics ----


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_step_types_rewards_and_views_follow_the_package(name, benchmark_path):
  env, _, _, (_, ts, states) = contract.rollout(
      name, **contract.settings_for(name, benchmark_path)
  )
  assert env.num_actions == 6
  assert isinstance(states, suite_utils.SuiteState)
  _check_against_the_package(env, ts, states, contract.LIMIT)


def test_xland_random_play_reaches_the_goal(benchmark_path):
  # The room shrunk to 5x5 so that random play reaches the red ball.
  limit = 9
  env, _, _, (first, ts, states) = contract.rollout(
      f"xminigrid/{XLAND}",
      height=5,
      width=5,
      ruleset_id=0,
      max_steps=limit,
      benchmark_path=str(benchmark_path),
  )
  assert env.observation_spec().shape == (5, 5, 2)
  contract.check_rollout(env, first, ts, limit)
  terminated = _check_against_the_package(env, ts, states, limit)
  assert terminated.any(), "random play never reached the ball"


def test_empty_goal_is_a_termination_and_resets():
  env = xminigrid_envs.make("MiniGrid-Empty-8x8", B)
  state, start = env.reset(jax.random.PRNGKey(2))
  # From (1, 1) facing right: 5 steps right, turn down, 5 steps down onto
  # the goal at (6, 6).
  path = [FORWARD] * 5 + [TURN_RIGHT] + [FORWARD] * 5
  for t, action in enumerate(path, start=1):
    state, ts = env.step(state, jnp.full((B,), action, jnp.int32))
    if t < len(path):
      np.testing.assert_array_equal(ts.step_type, types.MID)
      np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.step_type, types.LAST)
  np.testing.assert_array_equal(ts.discount, 0.0)
  np.testing.assert_allclose(ts.reward, 1.0 - 0.9 * 11 / 256, rtol=1e-6)
  # Empty always starts alike, so the LAST observation equals the first.
  np.testing.assert_array_equal(ts.observation, start.observation)
  np.testing.assert_array_equal(state.env_state.state.step_num, 0)
  np.testing.assert_array_equal(
      state.env_state.state.agent.position, [[1, 1]] * B
  )


def test_empty_step_limit_is_a_truncation():
  env = xminigrid_envs.make("MiniGrid-Empty-8x8", B, max_steps=4)
  state, start = env.reset(jax.random.PRNGKey(3))
  for t in range(1, 5):
    state, ts = env.step(state, jnp.full((B,), TURN_RIGHT, jnp.int32))
    np.testing.assert_array_equal(
        ts.step_type, types.LAST if t == 4 else types.MID
    )
    np.testing.assert_array_equal(ts.discount, 1.0)
    np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.observation, start.observation)
  np.testing.assert_array_equal(state.env_state.state.step_num, 0)
