"""Procedurally generated LPG grid worlds: random levels for curricula.

A ``GridLevel`` fixes a lifetime; ``RandomGridWorld`` (``lpg/random``)
steps any level of its mode (all padded to the mode's largest shapes).
Ranges follow GROOVE's random modes (Jackson et al., NeurIPS 2023,
github.com/EmptyJackson/groove):

========  =========  ================  =======  ================
mode      grid side  walls drawn in    objects  episode length
========  =========  ================  =======  ================
small     4..6       7 of 6 x 6        1..3     20..100 (log)
medium    6..8       10 of 8 x 8       2..4     100..250 (log)
large     8..10      15 of 10 x 10     2..5     250..750 (log)
all       4..10      15 of 10 x 10     1..5     20..750 (log)
========  =========  ================  =======  ================

Object rewards are uniform in ``[-1, 1]`` (the first's in ``[0, 1]``),
termination and respawn probabilities log-uniform in ``[0.01, 1]`` and
``[0.001, 0.1]``. Every level is solvable (unlike GROOVE's): objects sit on
distinct cells reachable from the start, or the level drops its walls.
Dynamics are ``lpg_grid``'s 9-move ones, but episodes start on the level's
start cell. Observations: ``"tabular"``, a float32 one-hot ``[G * G *
2**K]`` of cell and presence bits, or ``"index"``, its int32 index.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import Any

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base
from disco.environments import lpg_grid


@dataclasses.dataclass(frozen=True)
class LevelMode:
  """Ranges of one random mode (see the module docstring)."""

  min_size: int
  max_size: int
  num_walls: int
  min_objects: int
  max_objects: int
  min_steps: int
  max_steps: int


MODES: dict[str, LevelMode] = {
    "small": LevelMode(4, 6, 7, 1, 3, 20, 100),
    "medium": LevelMode(6, 8, 10, 2, 4, 100, 250),
    "large": LevelMode(8, 10, 15, 2, 5, 250, 750),
    "all": LevelMode(4, 10, 15, 1, 5, 20, 750),
}
OBSERVATIONS = ("tabular", "index")


@chex.dataclass(frozen=True)
class GridLevel:
  """One level (``G``: the mode's largest side, ``K``: its most objects).

  Attributes:
    size: int32 ``[]`` grid side (cells outside are walls).
    walls: bool ``[G, G]``, True where the agent may not stand.
    start: int32 ``[2]`` start cell (row, column).
    object_cells: int32 ``[K, 2]``.
    active: bool ``[K]``, the objects the level holds.
    rewards, term_probs, respawn_probs: float32 ``[K]`` (0 where inactive).
    max_steps: int32 ``[]`` episode length.
  """

  size: types.Array
  walls: types.Array
  start: types.Array
  object_cells: types.Array
  active: types.Array
  rewards: types.Array
  term_probs: types.Array
  respawn_probs: types.Array
  max_steps: types.Array


def _log_uniform(rng, shape, low, high):
  return jnp.exp(
      jax.random.uniform(rng, shape, minval=np.log(low), maxval=np.log(high))
  )


def reachable(free: types.Array, start: types.Array) -> types.Array:
  """bool ``[G, G]``: cells reachable over 8-neighbour moves from ``start``
  (int32 ``[2]``) through ``free`` (bool ``[G, G]``). Jittable."""
  g = free.shape[0]
  region = jnp.zeros_like(free).at[start[0], start[1]].set(True)

  def grow(_, region):
    padded = jnp.pad(region, 1)
    grown = region
    for dr, dc in lpg_grid.MOVES[1:]:
      grown |= padded[1 + dr : 1 + dr + g, 1 + dc : 1 + dc + g]
    return grown & free

  return jax.lax.fori_loop(0, g * g, grow, region)


def sample_level(rng: types.Array, mode: LevelMode) -> GridLevel:
  """A random solvable level of ``mode``."""
  g, k = mode.max_size, mode.max_objects
  keys = jax.random.split(rng, 9)
  size = jax.random.randint(
      keys[0], (), mode.min_size, mode.max_size + 1, jnp.int32
  )
  num_objects = jax.random.randint(
      keys[1], (), mode.min_objects, mode.max_objects + 1, jnp.int32
  )
  max_steps = jnp.round(
      _log_uniform(keys[2], (), mode.min_steps, mode.max_steps)
  ).astype(jnp.int32)
  rewards = jax.random.uniform(keys[3], (k,), minval=-1.0, maxval=1.0)
  rewards = rewards.at[0].set(jnp.abs(rewards[0]))
  term_probs = _log_uniform(keys[4], (k,), 1e-2, 1.0)
  respawn_probs = _log_uniform(keys[5], (k,), 1e-3, 1e-1)
  rows, cols = jnp.meshgrid(jnp.arange(g), jnp.arange(g), indexing="ij")
  inside = (rows < size) & (cols < size)
  wall_index = jax.random.choice(
      keys[6], g * g, (mode.num_walls,), replace=False
  )
  walls = jnp.zeros(g * g, bool).at[wall_index].set(True).reshape(g, g)
  # The start: a free cell inside the grid, uniformly.
  free = inside & ~walls
  start_flat = jax.random.categorical(
      keys[7], jnp.where(free.reshape(-1), 0.0, -jnp.inf)
  )
  start = jnp.stack([start_flat // g, start_flat % g]).astype(jnp.int32)
  region = reachable(free, start)
  # Too few reachable cells for the objects: the level drops its walls.
  enough = region.sum() >= num_objects + 1
  walls = jnp.where(enough, walls, False)
  region = jnp.where(enough, region, inside)
  candidates = region.reshape(-1).at[start_flat].set(False)
  # K distinct reachable cells (Gumbel top-k); the first num_objects count.
  gumbel = jax.random.gumbel(keys[8], (g * g,))
  order = jnp.argsort(-jnp.where(candidates, gumbel, -jnp.inf))[:k]
  object_cells = jnp.stack([order // g, order % g], -1).astype(jnp.int32)
  active = jnp.arange(k) < num_objects
  zero = lambda x: jnp.where(active, x, 0.0).astype(jnp.float32)
  return GridLevel(
      size=size,
      walls=walls | ~inside,
      start=start,
      object_cells=object_cells,
      active=active,
      rewards=zero(rewards),
      term_probs=zero(term_probs),
      respawn_probs=zero(respawn_probs),
      max_steps=max_steps,
  )


def is_solvable(level: GridLevel) -> types.Array:
  """bool ``[]``: the start and every active object are on distinct free cells,
  every active object reachable from the start."""
  free = ~level.walls
  region = reachable(free, level.start)
  cells = level.object_cells
  ok = region[cells[:, 0], cells[:, 1]] | ~level.active
  distinct = ~jnp.any(jnp.all(cells == level.start, axis=-1) & level.active)
  return free[level.start[0], level.start[1]] & jnp.all(ok) & distinct


@chex.dataclass(frozen=True)
class RandomGridState:
  """State of ``B`` streams (every leaf ``[B, ...]``).

  Attributes:
    position: int32 ``[B, 2]``.
    present: bool ``[B, K]``.
    time: int32 ``[B]`` steps into the episode.
    rng: ``[B, ...]`` keys.
    level: each stream's ``GridLevel``.
  """

  position: types.Array
  present: types.Array
  time: types.Array
  rng: types.Array
  level: GridLevel


def _observe(position, present, g, as_index):
  """The state's one-hot ``[G * G * 2**K]``, or (``as_index``) its int32
  index."""
  k = present.shape[-1]
  bits = jnp.left_shift(1, jnp.arange(k, dtype=jnp.int32))
  mask = jnp.sum(jnp.where(present, bits, 0))
  index = ((position[0] * g + position[1]) * (2**k) + mask).astype(jnp.int32)
  if as_index:
    return index
  return jax.nn.one_hot(index, g * g * 2**k, dtype=jnp.float32)


def _reset_stream(rng, level, g, as_index):
  present = level.active
  state = RandomGridState(
      position=level.start,
      present=present,
      time=jnp.zeros((), jnp.int32),
      rng=rng,
      level=level,
  )
  timestep = types.EnvTimestep(
      observation=_observe(level.start, present, g, as_index),
      reward=jnp.zeros((), jnp.float32),
      step_type=jnp.asarray(types.FIRST, jnp.int32),
      discount=jnp.ones((), jnp.float32),
  )
  return state, timestep


def _step_stream(state, action, g, as_index):
  level = state.level
  next_rng, term_rng, respawn_rng = jax.random.split(state.rng, 3)
  target = state.position + jnp.asarray(lpg_grid.MOVES)[action]
  inside = jnp.all((target >= 0) & (target < g))
  clipped = jnp.clip(target, 0, g - 1)
  open_cell = inside & ~level.walls[clipped[0], clipped[1]]
  position = jnp.where(open_cell, target, state.position)
  on_cell = jnp.all(level.object_cells == position, axis=-1)
  collected = state.present & on_cell
  reward = jnp.sum(jnp.where(collected, level.rewards, 0.0))
  term_prob = jnp.sum(jnp.where(collected, level.term_probs, 0.0))
  terminated = jax.random.uniform(term_rng) < term_prob
  respawned = (
      ~state.present
      & level.active
      & (
          jax.random.uniform(respawn_rng, state.present.shape)
          < level.respawn_probs
      )
  )
  present = (state.present & ~collected) | respawned
  time = state.time + 1
  done = terminated | (time >= level.max_steps)
  position = jnp.where(done, level.start, position)
  present = jnp.where(done, level.active, present)
  new_state = state.replace(
      position=position,
      present=present,
      time=jnp.where(done, 0, time),
      rng=next_rng,
  )
  timestep = types.EnvTimestep(
      observation=_observe(position, present, g, as_index),
      reward=reward.astype(jnp.float32),
      step_type=jnp.where(done, types.LAST, types.MID).astype(jnp.int32),
      discount=jnp.where(terminated, 0.0, 1.0).astype(jnp.float32),
  )
  return new_state, timestep


class RandomGridWorld(base.Environment):
  """``batch_size`` streams of generated LPG grid-world levels.

  Observations ``[B, G * G * 2**K]`` float32 (``"tabular"``) or ``[B]`` int32
  (``"index"``); 9 actions (``lpg_grid.MOVES``).

  Raises:
    ValueError: for an invalid ``mode``, ``observation`` or ``batch_size``.
  """

  is_jittable = True
  has_levels = True

  def __init__(
      self, batch_size: int, mode: str = "all", observation: str = "tabular"
  ):
    if mode not in MODES:
      raise ValueError(
          f"lpg/random setting mode={mode!r} is invalid; valid values: "
          f"{', '.join(MODES)}."
      )
    if observation not in OBSERVATIONS:
      raise ValueError(
          f"lpg/random setting observation={observation!r} is invalid; "
          f"valid values: {', '.join(OBSERVATIONS)}."
      )
    lpg_grid.check_settings(batch_size, "dense", "tabular", 1, 0, None, "move")
    self.batch_size = int(batch_size)
    self.mode_name = mode
    self.mode = MODES[mode]
    self.observation = observation
    self._as_index = observation == "index"
    g = self.mode.max_size
    self._sample = jax.jit(functools.partial(sample_level, mode=self.mode))
    self._reset = jax.jit(self._reset_fn)
    self._step = jax.jit(
        jax.vmap(functools.partial(_step_stream, g=g, as_index=self._as_index))
    )

  def _reset_fn(self, rng, level=None):
    level_rng, stream_rng = jax.random.split(rng)
    if level is None:
      level = sample_level(level_rng, self.mode)
    return jax.vmap(
        functools.partial(
            _reset_stream, g=self.mode.max_size, as_index=self._as_index
        ),
        in_axes=(0, None),
    )(jax.random.split(stream_rng, self.batch_size), level)

  def sample_level(self, rng: types.Array) -> GridLevel:
    """A random solvable level of this mode."""
    return self._sample(rng)

  def level_features(self, level: GridLevel) -> dict[str, types.Array]:
    """Grid side, inner walls, objects and episode length (float32)."""
    g = self.mode.max_size
    rows, cols = jnp.meshgrid(jnp.arange(g), jnp.arange(g), indexing="ij")
    inside = (rows < level.size) & (cols < level.size)
    return dict(
        size=level.size.astype(jnp.float32),
        walls=jnp.sum(level.walls & inside).astype(jnp.float32),
        objects=jnp.sum(level.active).astype(jnp.float32),
        max_steps=level.max_steps.astype(jnp.float32),
    )

  def reset(
      self, rng: types.Array, level: GridLevel | None = None
  ) -> tuple[RandomGridState, types.EnvTimestep]:
    """Starts a lifetime on ``level`` (None: a random one)."""
    return self._reset(rng, level)

  def step(
      self, state: RandomGridState, actions: types.Array
  ) -> tuple[RandomGridState, types.EnvTimestep]:
    actions = jnp.asarray(actions, jnp.int32)
    chex.assert_shape(actions, (self.batch_size,))
    return self._step(state, actions)

  @property
  def num_states(self) -> int:
    """Number of tabular states ``G * G * 2**K``."""
    g, k = self.mode.max_size, self.mode.max_objects
    return g * g * 2**k

  def observation_spec(self) -> specs.Array:
    if self._as_index:
      return specs.BoundedArray(
          (), np.int32, 0, self.num_states - 1, name="state_index"
      )
    g, k = self.mode.max_size, self.mode.max_objects
    return specs.Array((g * g * 2**k,), np.float32, name="state_one_hot")

  def action_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray(
        (), np.int32, 0, lpg_grid.NUM_MOVES - 1, name="action"
    )


ENV_SPECS: dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]] = {
    "lpg/random": (RandomGridWorld, dict(mode="all", observation="tabular")),
}
