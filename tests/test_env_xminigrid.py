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

from conftest import assert_copies_step_alike

B = 2  # streams
SEEDS = 2  # vmapped rollouts
STEPS = 100  # steps per scanned rollout
LIMIT = 9  # max_steps of the semantics test: truncations happen
XLAND = "XLand-MiniGrid-R1-9x9"
FORWARD, TURN_RIGHT = 0, 1


@pytest.fixture(scope="module")
def benchmark_path(tmp_path_factory):
  """A two-ruleset benchmark file in xminigrid's format (bz2 pickle).

  Ruleset 0: reach a red ball (stand next to it and move forward into it);
  objects: the ball and a green square. Ruleset 1: hold a green square, made
  by picking up the red ball (the only object).
  """
  # pylint: disable=g-import-not-at-top
  from xminigrid import benchmarks
  from xminigrid.core import constants
  from xminigrid.core import goals
  from xminigrid.core import rules
  # pylint: enable=g-import-not-at-top
  tiles, colors = constants.Tiles, constants.Colors
  ball = constants.TILES_REGISTRY[tiles.BALL, colors.RED]
  square = constants.TILES_REGISTRY[tiles.SQUARE, colors.GREEN]
  nothing = constants.TILES_REGISTRY[tiles.EMPTY, colors.EMPTY]
  rulesets = [
      (goals.AgentNearGoal(tile=ball), rules.EmptyRule(), (ball, square)),
      (
          goals.AgentHoldGoal(tile=square),
          rules.AgentHoldRule(tile=ball, prod_tile=square),
          (ball, nothing),
      ),
  ]
  contents = dict(
      goals=np.stack([np.asarray(g.encode()) for g, _, _ in rulesets]),
      rules=np.stack([np.asarray(r.encode())[None] for _, r, _ in rulesets]),
      init_tiles=np.asarray([t for _, _, t in rulesets], np.uint8),
      num_rules=np.asarray([[0], [1]], np.uint8),
  )
  path = tmp_path_factory.mktemp("xland") / "tiny_benchmark"
  benchmarks.save_bz2_pickle(contents, str(path))
  return path


# id -> (settings of the semantics test, observation shape). The XLand room
# is shrunk to 5x5 so that random play also reaches the goal.
TESTED = {
    "MiniGrid-Empty-8x8": (dict(), (7, 7, 2)),
    "MiniGrid-DoorKey-5x5": (dict(), (7, 7, 2)),
    "MiniGrid-FourRooms": (dict(), (7, 7, 2)),
    XLAND: (dict(height=5, width=5, ruleset_id=0), (5, 5, 2)),
}


def _make(env_id, batch_size, benchmark_path, **settings):
  if env_id.startswith("XLand"):
    settings["benchmark_path"] = str(benchmark_path)
  return xminigrid_envs.make(env_id, batch_size, **settings)


def _rollout_fn(env):
  """``jit(vmap(run))``: reset, then a ``lax.scan`` of ``STEPS`` random steps.

  ``run(key)`` returns the reset timestep, the ``[STEPS, B]`` timesteps, the
  package's step counter after every step and xminigrid's own view of the
  state after every step.
  """
  from xminigrid.core import observation  # pylint: disable=g-import-not-at-top

  size = env.params.view_size
  view = jax.vmap(
      lambda s: observation.transparent_field_of_view(
          s.grid, s.agent, size, size
      )
  )

  def run(key):
    reset_key, action_key = jax.random.split(key)
    state, first = env.reset(reset_key)
    actions = jax.random.randint(
        action_key, (STEPS, env.batch_size), 0, env.num_actions
    )

    def step(state, action):
      state, ts = env.step(state, action)
      package_state = state.env_state.state
      seen = view(package_state).astype(jnp.float32)
      return state, (ts, package_state.step_num, seen)

    _, outs = jax.lax.scan(step, state, actions)
    return (first,) + outs

  return jax.jit(jax.vmap(run))


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


@pytest.mark.parametrize("env_id", list(TESTED))
def test_shapes_semantics_and_determinism(env_id, benchmark_path):
  settings, obs_shape = TESTED[env_id]
  env = _make(env_id, B, benchmark_path, max_steps=LIMIT, **settings)
  assert env.is_jittable and env.batch_size == B and env.num_actions == 6
  assert env.observation_spec().shape == obs_shape
  assert env.observation_spec().dtype == np.float32
  action_spec = env.action_spec()
  assert action_spec.dtype == np.int32 and action_spec.shape == ()
  assert (action_spec.minimum, action_spec.maximum) == (0, 5)

  state, ts = env.reset(jax.random.PRNGKey(0))
  assert isinstance(state, suite_utils.SuiteState)
  assert ts.observation.shape == (B,) + obs_shape
  assert ts.observation.dtype == np.float32
  np.testing.assert_array_equal(ts.step_type, types.FIRST)
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.discount, 1.0)
  for leaf in jax.tree.leaves(state):
    assert leaf.shape[:1] == (B,)

  rollout = _rollout_fn(env)
  keys = jax.random.split(jax.random.PRNGKey(1), SEEDS)
  first, ts, count, seen = jax.device_get(rollout(keys))
  assert ts.observation.shape == (SEEDS, STEPS, B) + obs_shape
  assert ts.observation.dtype == np.float32  # xminigrid's are uint8
  assert ts.reward.shape == ts.discount.shape == (SEEDS, STEPS, B)
  assert ts.reward.dtype == ts.discount.dtype == np.float32
  assert ts.step_type.dtype == np.int32
  np.testing.assert_array_equal(first.step_type, types.FIRST)

  last = ts.step_type == types.LAST
  assert set(np.unique(ts.step_type)) <= {types.MID, types.LAST}
  np.testing.assert_array_equal(ts.discount[~last], 1.0)
  before = np.concatenate([np.zeros_like(count[:, :1]), count[:, :-1]], 1)
  np.testing.assert_array_equal(count[last], 0)
  np.testing.assert_array_equal(count[~last], before[~last] + 1)
  truncated = last & (ts.discount == 1.0)
  terminated = last & (ts.discount == 0.0)
  assert truncated.any()
  np.testing.assert_array_equal(before[truncated] + 1, LIMIT)
  assert np.all(before[~last] + 1 < LIMIT)
  # Only reaching the goal pays: 1 - 0.9 * steps / max_steps.
  np.testing.assert_allclose(
      ts.reward[terminated],
      1.0 - 0.9 * (before[terminated] + 1) / LIMIT,
      rtol=1e-6,
  )
  np.testing.assert_array_equal(ts.reward[~terminated], 0.0)
  if env_id == XLAND:
    assert terminated.any(), "random play never reached the ball"
  # Each observation is the state's view: after LAST, the next episode's.
  np.testing.assert_array_equal(ts.observation, seen)

  again = jax.device_get(rollout(keys))
  jax.tree.map(np.testing.assert_array_equal, (first, ts, count, seen), again)
  swapped = jax.device_get(rollout(keys[::-1]))[1]
  jax.tree.map(
      lambda a, b: np.testing.assert_array_equal(a[0], b[1]), ts, swapped
  )
  assert not np.array_equal(ts.observation[0], ts.observation[1])


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


def test_state_copies_step_alike():
  env = xminigrid_envs.make("MiniGrid-Empty-8x8", B)
  assert_copies_step_alike(env, jnp.array([0, 1], jnp.int32))
