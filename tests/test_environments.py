"""Tests for disco.environments: jittable Catch, dm_env Catch, registry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import catch
from disco.environments import catch_dm_env
from disco.environments import registry

ROWS, COLUMNS, B = 5, 4, 3


@pytest.fixture(scope="module")
def env():
  return catch.Catch(B, rows=ROWS, columns=COLUMNS)


def _state(games, rng_seed=0):
  games = jnp.asarray(games, jnp.int32)
  return catch.CatchState(
      game=games,
      rng=jax.random.split(jax.random.PRNGKey(rng_seed), games.shape[0]),
  )


def _check_timestep(ts, batch_size, rows, columns):
  assert ts.observation.shape == (batch_size, rows, columns, 1)
  assert ts.observation.dtype == np.float32
  assert (
      ts.reward.shape
      == ts.discount.shape
      == ts.step_type.shape
      == (batch_size,)
  )
  assert ts.reward.dtype == ts.discount.dtype == np.float32
  assert ts.step_type.dtype == np.int32
  # Exactly two cells are lit: the ball never shows on the paddle's row, as
  # an episode that reaches it is reset before its board is returned.
  np.testing.assert_array_equal(np.sum(ts.observation, axis=(1, 2, 3)), 2.0)


def test_reset_shapes_and_specs(env):
  state, ts = env.reset(jax.random.PRNGKey(0))
  _check_timestep(ts, B, ROWS, COLUMNS)
  np.testing.assert_array_equal(ts.step_type, types.FIRST)
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.discount, 1.0)
  game = np.asarray(state.game)
  assert game.shape == (B, 4) and game.dtype == np.int32
  np.testing.assert_array_equal(game[:, 0], 0)
  assert np.all((game[:, 1] >= 0) & (game[:, 1] < COLUMNS))
  np.testing.assert_array_equal(game[:, 2:], [[ROWS - 1, COLUMNS // 2]] * B)
  assert env.is_jittable and env.batch_size == B and env.num_actions == 3
  assert env.observation_spec().shape == (ROWS, COLUMNS, 1)
  assert env.observation_spec().dtype == np.float32
  assert env.action_spec().dtype == np.int32 and env.action_spec().shape == ()
  # Observation renders the ball and paddle cells.
  obs = np.asarray(ts.observation)[..., 0]
  for b in range(B):
    assert obs[b, 0, game[b, 1]] == obs[b, ROWS - 1, COLUMNS // 2] == 1.0


def test_ball_drops_and_episode_length(env):
  state, _ = env.reset(jax.random.PRNGKey(1))
  step = env.step  # already jitted
  stay = jnp.ones((B,), jnp.int32)
  for t in range(1, ROWS - 1):
    state, ts = step(state, stay)
    np.testing.assert_array_equal(state.game[:, 0], t)
    np.testing.assert_array_equal(ts.step_type, types.MID)
    np.testing.assert_array_equal(ts.reward, 0.0)
    np.testing.assert_array_equal(ts.discount, 1.0)
  state, ts = step(state, stay)  # step ROWS - 1 ends every episode
  np.testing.assert_array_equal(ts.step_type, types.LAST)
  np.testing.assert_array_equal(state.game[:, 0], 0)  # auto-reset


def test_terminal_reward():
  # Ball in column 1, one row above the paddle; (paddle_x, action) per stream.
  cases = [(1, 1), (0, 2), (2, 0), (0, 1), (2, 2)]
  expected = [1.0, 1.0, 1.0, -1.0, -1.0]  # caught when paddle_x+action-1 == 1
  env = catch.Catch(len(cases), rows=ROWS, columns=COLUMNS)
  state = _state([[ROWS - 2, 1, ROWS - 1, x] for x, _ in cases])
  new_state, ts = env.step(state, jnp.array([a for _, a in cases]))
  np.testing.assert_array_equal(ts.reward, expected)
  np.testing.assert_array_equal(ts.step_type, types.LAST)
  np.testing.assert_array_equal(ts.discount, 0.0)
  # The observation is already the next episode's first board.
  np.testing.assert_array_equal(new_state.game[:, 0], 0)
  np.testing.assert_array_equal(new_state.game[:, 3], COLUMNS // 2)
  np.testing.assert_array_equal(
      ts.observation,
      jax.vmap(lambda g: catch.render(g, ROWS, COLUMNS))(new_state.game),
  )
  # One row higher nothing ends and the reward is 0.
  _, ts = env.step(
      state.replace(game=state.game.at[:, 0].add(-1)),
      jnp.ones((len(cases),), jnp.int32),
  )
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.step_type, types.MID)


def test_paddle_clipped_at_walls():
  game = jnp.array([0, 0, ROWS - 1, 0], jnp.int32)
  assert catch.game_step(game, 0, COLUMNS)[3] == 0
  game = game.at[3].set(COLUMNS - 1)
  assert catch.game_step(game, 2, COLUMNS)[3] == COLUMNS - 1


def test_step_under_scan_and_vmap(env):
  state, _ = env.reset(jax.random.PRNGKey(2))
  actions = jax.random.randint(jax.random.PRNGKey(3), (12, B), 0, 3)

  @jax.jit
  def rollout(state, actions):
    return jax.lax.scan(env.step, state, actions)

  _, ts = jax.device_get(rollout(state, actions))
  assert ts.observation.shape == (12, B, ROWS, COLUMNS, 1)
  # Episodes last ROWS - 1 steps from reset, in every stream.
  last = ts.step_type == types.LAST
  expected = (np.arange(1, 13) % (ROWS - 1) == 0)[:, None]
  np.testing.assert_array_equal(last, np.broadcast_to(expected, last.shape))
  assert np.all(np.abs(ts.reward[last]) == 1.0)
  assert np.all(ts.reward[~last] == 0.0) and np.all(ts.discount[last] == 0.0)

  # vmap over copies of the state (e.g. a search trying several actions).
  copies = jax.tree.map(lambda x: jnp.stack([x, x]), state)
  both = jnp.stack([jnp.zeros((B,), jnp.int32), 2 * jnp.ones((B,), jnp.int32)])
  new = jax.device_get(jax.vmap(env.step)(copies, both)[0])
  np.testing.assert_array_equal(new.game[0, :, 3], COLUMNS // 2 - 1)
  np.testing.assert_array_equal(new.game[1, :, 3], COLUMNS // 2 + 1)


def test_jittable_and_dm_env_agree_step_by_step(env):
  """Same actions and ball columns give identical timesteps, with resets."""
  num_steps = 4 * (ROWS - 1) + 2  # several episodes and auto-resets
  actions = np.asarray(
      jax.random.randint(jax.random.PRNGKey(5), (num_steps, B), 0, 3)
  )

  state, ts = env.reset(jax.random.PRNGKey(4))
  jit_steps = [ts]
  ball_columns = [[int(c)] for c in state.game[:, 1]]
  for a in actions:
    state, ts = env.step(state, a)
    jit_steps.append(ts)
    for b in np.flatnonzero(ts.step_type == types.LAST):
      ball_columns[b].append(int(state.game[b, 1]))

  host = catch_dm_env.BatchedDmEnv(
      [
          catch_dm_env.CatchDmEnv(ROWS, COLUMNS, seed=b, ball_columns=cols)
          for b, cols in enumerate(ball_columns)
      ]
  )
  host_state, ts = host.reset(None)
  assert host_state is None and not host.is_jittable
  host_steps = [ts]
  for t, a in enumerate(actions):
    # Accepts numpy and jax actions alike.
    _, ts = host.step(None, a if t % 2 else jnp.asarray(a))
    host_steps.append(ts)

  assert sum(len(c) for c in ball_columns) > 3 * B  # several episodes each
  for t, (j, h) in enumerate(zip(jit_steps, host_steps, strict=True)):
    _check_timestep(h, B, ROWS, COLUMNS)
    assert isinstance(h.observation, np.ndarray)
    for field in ("observation", "reward", "step_type", "discount"):
      np.testing.assert_array_equal(
          np.asarray(getattr(j, field)),
          getattr(h, field),
          err_msg=f"{field} differs at step {t}",
      )


def test_dm_env_single_stream():
  env = catch_dm_env.CatchDmEnv(rows=3, columns=3, seed=0, ball_columns=[2])
  ts = env.reset()
  assert ts.first() and ts.observation.shape == (3, 3, 1)
  assert env.game.tolist() == [0, 2, 2, 1]
  assert env.step(1).mid()
  ts = env.step(2)
  assert ts.last() and ts.reward == 1.0 and ts.discount == 0.0
  assert env.step(1).first()  # dm_env convention: step after LAST resets
  with pytest.raises(ValueError, match="action"):
    env.step(3)


def test_batched_dm_env_seeds():
  a = catch_dm_env.batched_catch(4, rows=5, columns=5, seed=3)
  b = catch_dm_env.batched_catch(4, rows=5, columns=5, seed=3)
  for _ in range(6):
    np.testing.assert_array_equal(
        a.step(None, np.ones(4))[1].observation,
        b.step(None, np.ones(4))[1].observation,
    )
  assert len(set(catch_dm_env.stream_seeds(3, 4))) == 4
  with pytest.raises(ValueError, match="shape"):
    a.step(None, np.zeros((3,), np.int32))


def test_registry_builds_both():
  assert {"catch", "catch_dm_env"} <= set(registry.env_names())
  assert registry.is_jittable("catch")
  assert not registry.is_jittable("catch_dm_env")
  jit_env = registry.make_env("catch", 2, rows=4, columns=3)
  host_env = registry.make_env("catch_dm_env", 2, rows=4, columns=3, seed=0)
  assert jit_env.is_jittable and not host_env.is_jittable
  assert jit_env.observation_spec() == host_env.observation_spec()
  assert jit_env.action_spec() == host_env.action_spec()
  assert registry.make_env("catch", 1).observation_spec().shape == (8, 8, 1)


@pytest.mark.parametrize(
    "name, batch_size, settings, match",
    [
        (
            "pong",
            1,
            {},
            r"Unknown environment 'pong'. Did you mean gymnax/Pong",
        ),
        ("nope", 1, {}, r"Registered: .*catch, .*gymnax/\.\.\..*env_names"),
        ("cath", 1, {}, r"Did you mean catch"),
        ("catch", 1, {"row": 5}, r"did you mean 'rows' for 'row'"),
        ("catch", 1, {"seed": 0}, r"Unknown setting\(s\) \['seed'\]"),
        ("catch", 1, {"rows": 1}, r"rows >= 2"),
        ("catch_dm_env", 1, {"columns": 0}, r"columns >= 1"),
        ("catch", 0, {}, r"batch_size >= 1"),
        ("catch_dm_env", 0, {}, r"batch_size >= 1"),
        ("catch", 1, {"rows": 4.5}, r"rows=4.5 must be an integer"),
    ],
)
def test_registry_errors(name, batch_size, settings, match):
  with pytest.raises(ValueError, match=match):
    registry.make_env(name, batch_size, **settings)
  if name == "pong":
    with pytest.raises(ValueError, match="env_names"):
      registry.is_jittable(name)
