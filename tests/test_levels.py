"""Levels: random LPG grid worlds, delayed-chain levels, the protocol."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco.environments import base
from disco.environments import delayed_chain
from disco.environments import lpg_levels
from disco.environments import registry


def _levels(mode, n):
  keys = jax.random.split(jax.random.PRNGKey(0), n)
  mode = lpg_levels.MODES[mode]
  return jax.jit(jax.vmap(lambda k: lpg_levels.sample_level(k, mode)))(keys)


@pytest.fixture(scope="module")
def many_levels():
  return _levels("all", 512)


def test_small_levels_are_solvable():
  # Small grids with 7 walls are the likeliest to wall objects off.
  levels = _levels("small", 4096)
  assert bool(jnp.all(jax.jit(jax.vmap(lpg_levels.is_solvable))(levels)))


def test_generation_is_deterministic_under_a_key():
  env = registry.make_env("lpg/random", 2, mode="small")
  a = env.sample_level(jax.random.PRNGKey(3))
  b = env.sample_level(jax.random.PRNGKey(3))
  c = env.sample_level(jax.random.PRNGKey(4))
  jax.tree.map(np.testing.assert_array_equal, a, b)
  assert any(
      not np.array_equal(x, y)
      for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(c), strict=True)
  )


def test_every_generated_level_is_solvable_and_in_range(many_levels):
  solvable = jax.jit(jax.vmap(lpg_levels.is_solvable))(many_levels)
  assert bool(jnp.all(solvable))
  levels = jax.device_get(many_levels)
  mode = lpg_levels.MODES["all"]
  assert set(np.unique(levels.size)) <= set(range(4, 11))
  n = levels.active.sum(-1)
  assert n.min() >= mode.min_objects and n.max() <= mode.max_objects
  assert np.all(levels.rewards[:, 0] >= 0)
  assert np.all((levels.max_steps >= 20) & (levels.max_steps <= 750))
  # Some levels keep inner walls (the generator does not simply drop them).
  g = mode.max_size
  rows, cols = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
  inside = (rows < levels.size[:, None, None]) & (
      cols < levels.size[:, None, None]
  )
  assert (levels.walls & inside).sum((1, 2)).mean() > 1


def test_solvability_check_catches_walled_in_objects(many_levels):
  level = jax.tree.map(lambda x: x[0], many_levels)
  # Wall in the start cell's neighbours: nothing is reachable any more.
  r, c = np.asarray(level.start)
  walls = np.asarray(level.walls).copy()
  for dr in (-1, 0, 1):
    for dc in (-1, 0, 1):
      if (dr or dc) and 0 <= r + dr < walls.shape[0]:
        if 0 <= c + dc < walls.shape[1]:
          walls[r + dr, c + dc] = True
  assert not bool(lpg_levels.is_solvable(level.replace(walls=walls)))


def test_grid_level_drives_the_episode():
  env = registry.make_env("lpg/random", 3, mode="small")
  level = env.sample_level(jax.random.PRNGKey(1))
  state, ts = env.reset(jax.random.PRNGKey(2), level)
  np.testing.assert_array_equal(
      state.position, np.broadcast_to(level.start, (3, 2))
  )
  assert ts.observation.shape == (3,) + env.observation_spec().shape
  assert float(ts.observation.sum()) == 3.0
  for _ in range(5):
    state, ts = env.step(state, jnp.array([1, 3, 5]))
  jax.tree.map(
      lambda x, y: np.testing.assert_array_equal(x[0], y),
      state.level,
      level,
  )


def test_chain_levels():
  env = registry.make_env("delayed_chain", 2, variant="random")
  level = env.sample_level(jax.random.PRNGKey(0))
  assert 5 <= int(level.length) <= 50
  state, ts = env.reset(jax.random.PRNGKey(1), level)
  np.testing.assert_array_equal(state.length, [level.length] * 2)
  assert ts.observation.shape == (2, 2 * 50 + 20)
  bits = np.asarray(ts.observation[:, 100:])
  assert np.all(bits[:, int(level.distractors) :] == 0)
  # A fixed level: the length is the level's, not the key's.
  fixed = delayed_chain.ChainLevel(
      length=jnp.int32(7), noisy=jnp.bool_(False), distractors=jnp.int32(0)
  )
  state, _ = env.reset(jax.random.PRNGKey(5), fixed)
  np.testing.assert_array_equal(state.length, [7, 7])


def test_env_without_levels_gives_a_clear_error():
  env = registry.make_env("catch", 2)
  with pytest.raises(base.LevelsUnsupportedError, match="has no levels"):
    base.require_levels(env, "catch")
  assert "lpg/random" in registry.level_env_names()
  assert "delayed_chain" in registry.level_env_names()
  assert "catch" not in registry.level_env_names()
