"""Tests for disco.environments.lpg_grid: the LPG tabular grid worlds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import lpg_grid

import test_env_contract as contract

B = 3
STAY, NORTH, EAST, SOUTH, WEST, NORTHWEST = 0, 1, 3, 5, 7, 8


@pytest.fixture(scope="module")
def dense():
  return lpg_grid.LpgGridWorld(B, "dense")


@pytest.fixture(scope="module")
def sparse():
  return lpg_grid.LpgGridWorld(B, "sparse")


def _state(env, position, object_cells, present=None, time=0, seed=0):
  """A hand-built GridState: the same objects in every stream."""
  position = jnp.asarray(position, jnp.int32)
  batch = position.shape[0]
  cells = jnp.broadcast_to(
      jnp.asarray(object_cells, jnp.int32), (batch, env.num_objects, 2)
  )
  if present is None:
    present = jnp.ones((batch, env.num_objects), bool)
  present = jnp.broadcast_to(
      jnp.asarray(present, bool), (batch, env.num_objects)
  )
  return lpg_grid.GridState(
      position=position,
      object_cells=cells,
      present=present,
      time=jnp.full((batch,), time, jnp.int32),
      rng=jax.random.split(jax.random.PRNGKey(seed), batch),
  )


def _one_hot_index(env, position, present):
  row, col = position
  cell = int(env.tables.cell_index[row, col])
  mask = sum(1 << k for k, p in enumerate(present) if p)
  return cell * 2**env.num_objects + mask


# The A.1 table, written out independently of the module: size, objects
# (reward, term_prob, respawn_prob) per object, episode length, wall cells.
TABLE = {
    "dense": (
        (11, 11),
        [(1, 0, 0.05)] * 2 + [(-1, 0.5, 0.1), (-1, 0, 0.5)],
        500,
        0,
    ),
    "sparse": ((13, 13), [(1, 1, 0), (-1, 1, 0)], 50, 0),
    "long_horizon": (
        (11, 11),
        [(1, 0, 0.01)] * 2 + [(-1, 0.5, 1)] * 2,
        1000,
        0,
    ),
    "longer_horizon": (
        (7, 9),
        [(1, 0.1, 0.01)] * 2 + [(-1, 0.8, 1)] * 5,
        2000,
        7,
    ),
    "long_dense": ((11, 11), [(1, 0, 0.005)] * 4, 2000, 8 + 9),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_layouts_match_the_appendix_table(name):
  shape, objects, max_steps, walls = TABLE[name]
  layout = lpg_grid.LAYOUTS[name]
  tables = lpg_grid.LpgGridWorld(1, name).tables
  assert layout.shape == shape and layout.max_steps == max_steps
  np.testing.assert_allclose(
      np.stack([tables.rewards, tables.term_probs, tables.respawn_probs], 1),
      np.asarray(objects, np.float32),
  )
  assert int((~tables.free).sum()) == walls
  assert len(tables.free_cells) == shape[0] * shape[1] - walls


def test_layout_maps_connected():
  # Every free cell of every map is reachable (no sealed-off room).
  for layout in lpg_grid.LAYOUTS.values():
    free = np.array([[c == "." for c in row] for row in layout.grid])
    seen, todo = set(), [tuple(np.argwhere(free)[0])]
    while todo:
      r, c = todo.pop()
      if (r, c) in seen:
        continue
      seen.add((r, c))
      for dr, dc in lpg_grid.MOVES:
        rr, cc = r + dr, c + dc
        if 0 <= rr < free.shape[0] and 0 <= cc < free.shape[1] and free[rr, cc]:
          todo.append((rr, cc))
    assert len(seen) == free.sum(), layout.name


def test_reset_state_and_one_hot_observation(dense):
  # The specs' types, shapes and the FIRST timestep: test_env_contract.py.
  state, ts = dense.reset(jax.random.PRNGKey(0))
  num_states = 121 * 2**4
  assert dense.num_actions == 9 and dense.num_states == num_states
  assert dense.observation_spec().shape == (num_states,)
  np.testing.assert_array_equal(state.present, True)
  np.testing.assert_array_equal(state.time, 0)
  cells = np.asarray(state.object_cells)
  assert cells.shape == (B, 4, 2)
  np.testing.assert_array_equal(cells, np.broadcast_to(cells[0], cells.shape))
  assert len({tuple(c) for c in cells[0]}) == 4  # distinct cells
  for b in range(B):
    pos = tuple(np.asarray(state.position[b]))
    assert pos not in {tuple(c) for c in cells[b]}
    hot = np.flatnonzero(np.asarray(ts.observation[b]))
    np.testing.assert_array_equal(hot, [_one_hot_index(dense, pos, [True] * 4)])


def test_layout_is_drawn_per_reset_unless_seeded():
  env = lpg_grid.LpgGridWorld(2, "long_dense")
  cells = [
      np.asarray(env.reset(jax.random.PRNGKey(k))[0].object_cells[0])
      for k in range(4)
  ]
  assert any(not np.array_equal(cells[0], c) for c in cells[1:])
  seeded = lpg_grid.LpgGridWorld(2, "long_dense", layout_seed=7)
  cells = [
      np.asarray(seeded.reset(jax.random.PRNGKey(k))[0].object_cells)
      for k in range(3)
  ]
  for c in cells[1:]:
    np.testing.assert_array_equal(cells[0], c)
  for row, col in cells[0][0]:
    assert seeded.tables.free[row, col]


def test_walking_into_walls_and_edges():
  env = lpg_grid.LpgGridWorld(5, "longer_horizon")
  far = [(6, 0), (6, 1), (6, 2), (6, 3), (5, 0), (5, 1), (5, 2)]  # objects
  # Corner (0, 0): north, west and north-west leave the grid; (0, 3): east
  # is the wall at (0, 4); (1, 3): east is open; (2, 3): south is the bar.
  state = _state(env, [(0, 0), (0, 0), (0, 0), (0, 3), (2, 3)], far)
  state, ts = env.step(state, jnp.array([NORTH, WEST, NORTHWEST, EAST, SOUTH]))
  np.testing.assert_array_equal(
      state.position, [(0, 0), (0, 0), (0, 0), (0, 3), (2, 3)]
  )
  np.testing.assert_array_equal(ts.step_type, types.MID)
  np.testing.assert_array_equal(ts.reward, 0.0)
  state = _state(env, [(1, 3), (0, 0), (1, 4), (4, 0), (0, 0)], far)
  state, _ = env.step(state, jnp.array([EAST, 4, EAST, 2, SOUTH]))
  np.testing.assert_array_equal(
      state.position, [(1, 4), (1, 1), (1, 5), (3, 1), (1, 0)]
  )


def test_picking_up_objects(dense):
  # Objects 0, 1: +1 (term 0); 2: -1 (term 0.5); 3: -1 (term 0, respawn .5).
  cells = [(2, 2), (8, 8), (5, 5), (0, 10)]
  state = _state(dense, [(2, 1), (0, 9), (7, 7)], cells, time=4)
  state, ts = dense.step(state, jnp.array([EAST, EAST, EAST]))
  np.testing.assert_array_equal(ts.reward, [1.0, -1.0, 0.0])
  np.testing.assert_array_equal(ts.step_type, types.MID)
  np.testing.assert_array_equal(ts.discount, 1.0)
  np.testing.assert_array_equal(state.time, 5)
  present = np.asarray(state.present)
  assert not present[0, 0] and present[0, 1:].all()
  assert not present[1, 3] and present[1, :3].all()
  assert present[2].all()
  for b in range(B):
    pos = tuple(np.asarray(state.position[b]))
    np.testing.assert_array_equal(
        np.flatnonzero(np.asarray(ts.observation[b])),
        [_one_hot_index(dense, pos, present[b])],
    )
  # Standing on a collected object's cell gives nothing until it respawns.
  state, ts = dense.step(state, jnp.array([STAY, STAY, STAY]))
  assert ts.reward[0] == 0.0


def test_termination_prob_one_ends_the_episode(sparse):
  cells = [(6, 6), (0, 12)]
  state = _state(sparse, [(6, 5), (1, 12), (3, 3)], cells, time=10)
  state, ts = sparse.step(state, jnp.array([EAST, NORTH, EAST]))
  np.testing.assert_array_equal(ts.reward, [1.0, -1.0, 0.0])
  np.testing.assert_array_equal(
      ts.step_type, [types.LAST, types.LAST, types.MID]
  )
  np.testing.assert_array_equal(ts.discount, [0.0, 0.0, 1.0])
  # Auto-reset: a new episode, objects back, the agent on a fresh cell, and
  # the timestep already shows that episode's first observation.
  np.testing.assert_array_equal(state.time, [0, 0, 11])
  np.testing.assert_array_equal(state.present, True)
  np.testing.assert_array_equal(ts.observation, sparse.observe(state))
  for b in range(2):
    assert tuple(np.asarray(state.position[b])) not in set(cells)


def test_time_limit_truncates(sparse):
  cells = [(12, 12), (12, 0)]
  state = _state(sparse, [(0, 0), (0, 6), (5, 5)], cells)
  step = sparse.step
  for t in range(1, 50):
    state, ts = step(state, jnp.zeros(B, jnp.int32))
    np.testing.assert_array_equal(ts.step_type, types.MID)
    np.testing.assert_array_equal(state.time, t)
  state, ts = step(state, jnp.zeros(B, jnp.int32))  # step 50 = the limit
  np.testing.assert_array_equal(ts.step_type, types.LAST)
  np.testing.assert_array_equal(ts.discount, 1.0)  # truncated, not terminal
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(state.time, 0)
  np.testing.assert_array_equal(ts.observation, sparse.observe(state))


def test_respawn_and_termination_rates():
  n = 4000
  env = lpg_grid.LpgGridWorld(n, "dense")
  cells = [(0, 0), (0, 2), (0, 4), (0, 6)]
  # All objects gone, agent away from them: one step respawns object k with
  # probability [.05, .05, .1, .5].
  state = _state(env, [(9, 9)] * n, cells, present=False, seed=1)
  state, _ = env.step(state, jnp.zeros(n, jnp.int32))
  rate = np.asarray(state.present).mean(0)
  p = env.tables.respawn_probs
  assert np.all(np.abs(rate - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-9), rate
  # Collecting object 2 (eps_term 0.5) ends about half of the episodes.
  state = _state(env, [(1, 4)] * n, cells, seed=2)
  _, ts = env.step(state, jnp.full(n, NORTH, jnp.int32))
  np.testing.assert_array_equal(ts.reward, -1.0)
  last = np.asarray(ts.step_type == types.LAST)
  assert abs(last.mean() - 0.5) < 4 * np.sqrt(0.25 / n)
  np.testing.assert_array_equal(np.asarray(ts.discount)[last], 0.0)


def test_collected_object_is_gone_for_a_step_even_with_respawn_one():
  n = 400
  env = lpg_grid.LpgGridWorld(n, "long_horizon")
  cells = [(0, 0), (0, 2), (5, 5), (9, 9)]  # object 2: [-1, 0.5, 1]
  state = _state(env, [(5, 4)] * n, cells, seed=3)
  state, ts = env.step(state, jnp.full(n, EAST, jnp.int32))
  alive = np.asarray(ts.step_type == types.MID)
  assert 0 < alive.sum() < n
  assert not np.asarray(state.present)[alive, 2].any()
  state, _ = env.step(state, jnp.full(n, WEST, jnp.int32))
  assert np.asarray(state.present)[alive, 2].all()


def test_move_and_collect_actions():
  env = lpg_grid.LpgGridWorld(3, "dense", action_set="move_and_collect")
  assert env.num_actions == 18 and env.action_spec().maximum == 17
  cells = [(2, 2), (8, 8), (5, 5), (0, 10)]
  # Moving onto an object does not collect it; collecting east (9 + 3) takes
  # the neighbour without moving; collecting on an empty cell does nothing.
  state = _state(env, [(2, 1), (2, 1), (7, 7)], cells)
  state, ts = env.step(state, jnp.array([EAST, 9 + EAST, 9 + STAY]))
  np.testing.assert_array_equal(ts.reward, [0.0, 1.0, 0.0])
  np.testing.assert_array_equal(state.position, [(2, 2), (2, 1), (7, 7)])
  np.testing.assert_array_equal(
      np.asarray(state.present)[:, 0], [True, False, True]
  )
  # Collecting on one's own cell (9 + stay) works too.
  state, ts = env.step(state, jnp.array([9 + STAY, STAY, STAY]))
  np.testing.assert_array_equal(ts.reward, [1.0, 0.0, 0.0])


def test_random_features():
  env = lpg_grid.LpgGridWorld(
      B,
      "sparse",
      observation="random_features",
      feature_size=16,
      feature_seed=3,
  )
  assert env.observation_spec().shape == (16,)
  features = env.tables.features
  assert features.shape == (169 * 4, 16) and features.dtype == np.float32
  assert abs(features.std() - 1.0) < 0.1
  state, ts = env.reset(jax.random.PRNGKey(0))
  state, ts = env.step(state, jnp.array([EAST, SOUTH, STAY]))
  for b in range(B):
    pos = tuple(np.asarray(state.position[b]))
    index = _one_hot_index(env, pos, np.asarray(state.present[b]))
    np.testing.assert_array_equal(ts.observation[b], features[index])
  same = lpg_grid.LpgGridWorld(
      1,
      "sparse",
      observation="random_features",
      feature_size=16,
      feature_seed=3,
  )
  other = lpg_grid.LpgGridWorld(
      1,
      "sparse",
      observation="random_features",
      feature_size=16,
      feature_seed=4,
  )
  np.testing.assert_array_equal(same.tables.features, features)
  assert not np.allclose(other.tables.features, features)


@pytest.mark.parametrize("name", sorted(lpg_grid.LAYOUTS))
def test_every_layout_rolls_out_as_the_table_says(name):
  # The contract's rollout (jit, vmap, scan; its checks: test_env_contract.py)
  # of every layout, and what is particular to the grid worlds.
  env, _, _, (first, ts, states) = contract.rollout(f"lpg/{name}")
  contract.check_rollout(env, first, ts)
  assert ts.observation.shape == (
      contract.SEEDS,
      contract.STEPS,
      2,
      env.num_states,
  )
  step_type = np.asarray(ts.step_type)
  assert np.isin(ts.reward, np.unique(env.tables.rewards).tolist() + [0]).all()
  np.testing.assert_array_equal(np.asarray(ts.observation).sum(-1), 1.0)
  # The episode clock restarts exactly on LAST.
  np.testing.assert_array_equal(
      np.asarray(states.time) == 0, step_type == types.LAST
  )


@pytest.mark.parametrize(
    "settings, bad",
    [
        (dict(layout="huge"), "layout='huge'.*dense,.sparse"),
        (dict(observation="pixels"), "observation='pixels'.*random_features"),
        (dict(feature_size=0), "feature_size=0"),
        (dict(feature_seed=-1), "feature_seed=-1"),
        (dict(layout_seed="a"), "layout_seed='a'"),
        (dict(action_set="all"), "action_set='all'.*move_and_collect"),
        (dict(batch_size=0), "batch_size=0"),
    ],
)
def test_bad_settings(settings, bad):
  kwargs = dict(batch_size=2, layout="dense") | settings
  with pytest.raises(ValueError, match=bad):
    lpg_grid.LpgGridWorld(**kwargs)


def test_env_specs():
  assert set(lpg_grid.ENV_SPECS) == {f"lpg/{n}" for n in TABLE}
  for name, (make, defaults) in lpg_grid.ENV_SPECS.items():
    assert defaults == dict(
        observation="tabular",
        feature_size=32,
        feature_seed=0,
        layout_seed=None,
        action_set="move",
    )
    env = make(2, **defaults)
    assert isinstance(env, lpg_grid.LpgGridWorld)
    assert env.layout is lpg_grid.LAYOUTS[name.split("/")[1]]
  env = lpg_grid.ENV_SPECS["lpg/sparse"][0](
      2, observation="random_features", feature_size=8
  )
  assert env.observation_spec().shape == (8,)
