"""Jittable, batched tabular grid worlds of LPG (Oh et al. 2020,
arXiv:2007.08794, Appendix A.1; its table and figure as read from public
transcriptions).

Dynamics (one stream):

  * The agent stands on a free cell of the layout's grid (a wall around it).
  * Objects sit on distinct free cells drawn once per lifetime (one
    ``reset``, shared by its ``B`` streams; ``layout_seed`` fixes them).
  * ``action_set="move"``: 9 actions, stay or move to one of the 8
    neighbours (N, NE, ..., NW; into a wall: stay), collecting an object by
    standing on it. ``"move_and_collect"``: 18 actions, the 9 moves (never
    collecting) and 9 that collect on the target cell without moving.
  * Collecting gives the object's reward, removes it and terminates with
    its ``term_prob``; an absent object reappears at the end of a step with
    its ``respawn_prob``.
  * Termination: LAST, discount 0; ``max_steps``: truncation, LAST,
    discount 1 (termination wins a tie). A new episode has all objects
    present and the agent on a random free cell without an object (our
    choice).

Observations of the state index ``cell * 2**K + mask`` (bit ``k``: object
``k`` present; ``F`` free cells): ``"tabular"``, a float32 one-hot ``[F *
2**K]``; ``"index"``, the int32 index (for
``NetConfig.obs_embedding="one_hot"``); ``"random_features"``, a float32
row of a fixed standard-normal ``[F * 2**K, feature_size]`` matrix drawn
from ``feature_seed``.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import numbers
from typing import Any

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base

# (row, column) offsets of the 9 moves; action a < 9 moves by MOVES[a], and
# in the 18-action set action 9 + a collects on the cell at MOVES[a].
MOVES = np.array(
    [
        (0, 0),
        (-1, 0),
        (-1, 1),
        (0, 1),
        (1, 1),
        (1, 0),
        (1, -1),
        (0, -1),
        (-1, -1),
    ],
    np.int32,
)
NUM_MOVES = len(MOVES)
ACTION_SETS = {"move": NUM_MOVES, "move_and_collect": 2 * NUM_MOVES}
OBSERVATIONS = ("tabular", "index", "random_features")
WALL, FLOOR = "#", "."


@dataclasses.dataclass(frozen=True)
class ObjectKind:
  """An object row of the A.1 table.

  Attributes:
    count: objects of this kind in the layout.
    reward: reward for collecting one.
    term_prob: probability that collecting one ends the episode.
    respawn_prob: per-step probability that a collected one reappears.
  """

  count: int
  reward: float
  term_prob: float
  respawn_prob: float


@dataclasses.dataclass(frozen=True)
class Layout:
  """A tabular grid world of the A.1 table.

  Attributes:
    name: the layout's name in the A.1 table.
    grid: the free area, one string per row: ``"."`` free, ``"#"`` wall (the
      border wall is implicit).
    objects: the object kinds.
    max_steps: episode length (time limit).
  """

  name: str
  grid: tuple[str, ...]
  objects: tuple[ObjectKind, ...]
  max_steps: int

  @property
  def shape(self) -> tuple[int, int]:
    return len(self.grid), len(self.grid[0])

  @property
  def num_objects(self) -> int:
    return sum(kind.count for kind in self.objects)


def _open(rows: int, columns: int) -> tuple[str, ...]:
  return (FLOOR * columns,) * rows


# The A.1 table: size, objects [r, eps_term, eps_respawn] x count, episode
# length. Maps: the three open layouts are plain rectangles; "longer_horizon"
# and "long_dense" have the inner walls drawn in the A.1 figure.
LAYOUTS: dict[str, Layout] = {
    # 11x11; 2 x [1, 0, 0.05], 1 x [-1, 0.5, 0.1], 1 x [-1, 0, 0.5]; 500.
    "dense": Layout(
        "Dense",
        _open(11, 11),
        (
            ObjectKind(2, 1.0, 0.0, 0.05),
            ObjectKind(1, -1.0, 0.5, 0.1),
            ObjectKind(1, -1.0, 0.0, 0.5),
        ),
        500,
    ),
    # 13x13; 1 x [1, 1, 0], 1 x [-1, 1, 0]; 50.
    "sparse": Layout(
        "Sparse",
        _open(13, 13),
        (ObjectKind(1, 1.0, 1.0, 0.0), ObjectKind(1, -1.0, 1.0, 0.0)),
        50,
    ),
    # 11x11; 2 x [1, 0, 0.01], 2 x [-1, 0.5, 1]; 1000.
    "long_horizon": Layout(
        "Long Horizon",
        _open(11, 11),
        (ObjectKind(2, 1.0, 0.0, 0.01), ObjectKind(2, -1.0, 0.5, 1.0)),
        1000,
    ),
    # 7x9, two rooms joined by two gaps, a short bar between them (A.1
    # figure); 2 x [1, 0.1, 0.01], 5 x [-1, 0.8, 1]; 2000.
    "longer_horizon": Layout(
        "Longer Horizon",
        (
            "....#....",
            ".........",
            "....#....",
            "...###...",
            "....#....",
            ".........",
            "....#....",
        ),
        (ObjectKind(2, 1.0, 0.1, 0.01), ObjectKind(5, -1.0, 0.8, 1.0)),
        2000,
    ),
    # 11x11, four rooms joined by four doors (A.1 figure); 4 x [1, 0, 0.005];
    # 2000.
    "long_dense": Layout(
        "Long Dense",
        (
            "...........",
            ".....#.....",
            ".....#.....",
            ".....#.....",
            "##.#####.##",
            ".....#.....",
            ".....#.....",
            "...........",
            ".....#.....",
            ".....#.....",
            ".....#.....",
        ),
        (ObjectKind(4, 1.0, 0.0, 0.005),),
        2000,
    ),
}


def _is_int(value: Any) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_settings(
    batch_size: Any,
    layout: Any,
    observation: Any,
    feature_size: Any,
    feature_seed: Any,
    layout_seed: Any,
    action_set: Any,
) -> None:
  """Raises ``ValueError`` naming the first invalid grid-world setting."""
  if not _is_int(batch_size) or batch_size < 1:
    raise ValueError(
        f"LPG grid setting batch_size={batch_size!r} must be an "
        "integer >= 1."
    )
  if layout not in LAYOUTS:
    raise ValueError(
        f"LPG grid setting layout={layout!r} is not a layout; "
        f"valid values: {', '.join(LAYOUTS)}."
    )
  if observation not in OBSERVATIONS:
    raise ValueError(
        f"LPG grid setting observation={observation!r} is "
        f"invalid; valid values: {', '.join(OBSERVATIONS)}."
    )
  if not _is_int(feature_size) or feature_size < 1:
    raise ValueError(
        f"LPG grid setting feature_size={feature_size!r} must "
        "be an integer >= 1."
    )
  if not _is_int(feature_seed) or feature_seed < 0:
    raise ValueError(
        f"LPG grid setting feature_seed={feature_seed!r} must "
        "be an integer >= 0."
    )
  if layout_seed is not None and (not _is_int(layout_seed) or layout_seed < 0):
    raise ValueError(
        f"LPG grid setting layout_seed={layout_seed!r} must be "
        "None (a new layout per reset) or an integer >= 0."
    )
  if action_set not in ACTION_SETS:
    raise ValueError(
        f"LPG grid setting action_set={action_set!r} is invalid; "
        f"valid values: {', '.join(ACTION_SETS)}."
    )


@dataclasses.dataclass(frozen=True)
class _Tables:
  """Static numpy tables of one layout, closed over by the jitted code:
  ``free`` ``[H, W]``, ``free_cells`` ``[F, 2]`` (row-major), ``cell_index``
  ``[H, W]`` (-1 on walls), per-object ``[K]`` ``rewards``, ``term_probs``,
  ``respawn_probs``, and ``features`` ``[F * 2**K, D]`` or None."""

  free: np.ndarray
  free_cells: np.ndarray
  cell_index: np.ndarray
  rewards: np.ndarray
  term_probs: np.ndarray
  respawn_probs: np.ndarray
  max_steps: int
  collect_actions: bool
  features: np.ndarray | None
  index_observations: bool = False

  @property
  def num_states(self) -> int:
    return len(self.free_cells) * 2 ** len(self.rewards)


def _make_tables(
    layout: Layout,
    action_set: str,
    observation: str,
    feature_size: int,
    feature_seed: int,
) -> _Tables:
  free = np.array([[c == FLOOR for c in row] for row in layout.grid], bool)
  free_cells = np.argwhere(free).astype(np.int32)
  cell_index = np.full(free.shape, -1, np.int32)
  cell_index[free] = np.arange(len(free_cells), dtype=np.int32)
  per_object = [kind for kind in layout.objects for _ in range(kind.count)]
  rewards, term_probs, respawn_probs = (
      np.array([getattr(k, f) for k in per_object], np.float32)
      for f in ("reward", "term_prob", "respawn_prob")
  )
  features = None
  num_states = len(free_cells) * 2 ** len(per_object)
  if observation == "random_features":
    features = np.asarray(
        jax.random.normal(
            jax.random.PRNGKey(feature_seed),
            (num_states, feature_size),
            jnp.float32,
        )
    )
  return _Tables(
      free=free,
      free_cells=free_cells,
      cell_index=cell_index,
      rewards=rewards,
      term_probs=term_probs,
      respawn_probs=respawn_probs,
      max_steps=layout.max_steps,
      collect_actions=action_set == "move_and_collect",
      features=features,
      index_observations=observation == "index",
  )


@chex.dataclass(frozen=True)
class GridState:
  """State of ``B`` grid-world streams.

  Attributes:
    position: ``[B, 2]`` int32 ``(row, column)`` in the free area.
    object_cells: ``[B, K, 2]`` int32, the same in every stream.
    present: ``[B, K]`` bool.
    time: ``[B]`` int32 steps into the episode.
    rng: ``[B, ...]`` one PRNG key per stream.
  """

  position: types.Array
  object_cells: types.Array
  present: types.Array
  time: types.Array
  rng: types.Array


def sample_object_cells(
    rng: types.Array, tables: _Tables, num_objects: int
) -> types.Array:
  """``[K, 2]`` int32: ``K`` distinct free cells drawn uniformly."""
  index = jax.random.choice(
      rng, len(tables.free_cells), (num_objects,), replace=False
  )
  return jnp.asarray(tables.free_cells)[index]


def _start_position(rng, object_cells, tables):
  """A free cell holding no object, drawn uniformly: ``[2]`` int32."""
  cells = jnp.asarray(tables.free_cells)  # [F, 2]
  taken = jnp.any(
      jnp.all(cells[:, None, :] == object_cells[None], axis=-1), axis=-1
  )  # [F]
  # The largest uniform draw among the free cells: the same cell as
  # jax.random.categorical on these logits with the same key.
  u = jax.random.uniform(
      rng, taken.shape, minval=jnp.finfo(jnp.float32).tiny, maxval=1.0
  )
  return cells[jnp.argmax(jnp.where(taken, -1.0, u))]


def state_index(position, present, tables):
  """int32 scalar ``cell * 2**K + mask`` of one stream's tabular state."""
  cell = jnp.asarray(tables.cell_index)[position[0], position[1]]
  bits = jnp.left_shift(1, jnp.arange(present.shape[-1], dtype=jnp.int32))
  mask = jnp.sum(jnp.where(present, bits, 0))
  return (cell * (2 ** present.shape[-1]) + mask).astype(jnp.int32)


def _observe(position, present, tables):
  index = state_index(position, present, tables)
  if tables.index_observations:
    return index
  if tables.features is None:
    return jax.nn.one_hot(index, tables.num_states, dtype=jnp.float32)
  return jnp.asarray(tables.features)[index]


def _reset_stream(rng, object_cells, tables):
  next_rng, start_rng = jax.random.split(rng)
  position = _start_position(start_rng, object_cells, tables)
  present = jnp.ones(object_cells.shape[:1], bool)
  state = GridState(
      position=position,
      object_cells=object_cells,
      present=present,
      time=jnp.zeros((), jnp.int32),
      rng=next_rng,
  )
  timestep = types.EnvTimestep(
      observation=_observe(position, present, tables),
      reward=jnp.zeros((), jnp.float32),
      step_type=jnp.asarray(types.FIRST, jnp.int32),
      discount=jnp.ones((), jnp.float32),
  )
  return state, timestep


def _step_stream(state, action, tables):
  next_rng, term_rng, respawn_rng, reset_rng = jax.random.split(state.rng, 4)
  height, width = tables.free.shape
  target = state.position + jnp.asarray(MOVES)[action % NUM_MOVES]
  inside = (
      (target[0] >= 0)
      & (target[0] < height)
      & (target[1] >= 0)
      & (target[1] < width)
  )
  clipped = jnp.clip(target, 0, jnp.array([height - 1, width - 1]))
  open_cell = inside & jnp.asarray(tables.free)[clipped[0], clipped[1]]
  if tables.collect_actions:
    collecting = (action >= NUM_MOVES) & open_cell
    position = jnp.where(open_cell & ~collecting, target, state.position)
    pick_cell = target
  else:
    collecting = jnp.asarray(True)
    position = jnp.where(open_cell, target, state.position)
    pick_cell = position
  on_cell = jnp.all(state.object_cells == pick_cell, axis=-1)  # [K]
  collected = state.present & on_cell & collecting
  reward = jnp.sum(jnp.where(collected, tables.rewards, 0.0))
  term_prob = jnp.sum(jnp.where(collected, tables.term_probs, 0.0))
  terminated = jax.random.uniform(term_rng) < term_prob
  respawned = ~state.present & (
      jax.random.uniform(respawn_rng, state.present.shape)
      < tables.respawn_probs
  )
  present = (state.present & ~collected) | respawned
  time = state.time + 1
  done = terminated | (time >= tables.max_steps)
  # A finished episode restarts at once; the timestep keeps its reward, LAST
  # and discount but shows the next episode's first observation.
  position = jnp.where(
      done, _start_position(reset_rng, state.object_cells, tables), position
  )
  present = present | done
  time = jnp.where(done, 0, time)
  new_state = GridState(
      position=position,
      object_cells=state.object_cells,
      present=present,
      time=time,
      rng=next_rng,
  )
  timestep = types.EnvTimestep(
      observation=_observe(position, present, tables),
      reward=reward.astype(jnp.float32),
      step_type=jnp.where(done, types.LAST, types.MID).astype(jnp.int32),
      discount=jnp.where(terminated, 0.0, 1.0).astype(jnp.float32),
  )
  return new_state, timestep


class LpgGridWorld(base.Environment):
  """``batch_size`` streams of one LPG tabular grid world (Appendix A.1).

  Observations are ``[B, F * 2**K]`` float32 (tabular), ``[B]`` int32 (index)
  or ``[B, feature_size]`` float32; actions int32 in ``[0, 9)`` or ``[0,
  18)``.
  """

  is_jittable = True

  def __init__(
      self,
      batch_size: int,
      layout: str = "dense",
      observation: str = "tabular",
      feature_size: int = 32,
      feature_seed: int = 0,
      layout_seed: int | None = None,
      action_set: str = "move",
  ):
    """Builds the environment.

    Args:
      batch_size: number of streams ``B``.
      layout: a key of ``LAYOUTS``.
      observation: ``"tabular"``, ``"index"`` or ``"random_features"``.
      feature_size: length ``D`` of a random feature vector.
      feature_seed: seed of the random feature matrix.
      layout_seed: None draws the object cells at each ``reset``; an integer
        fixes them.
      action_set: ``"move"`` (9 actions) or ``"move_and_collect"`` (18).

    Raises:
      ValueError: naming the first invalid setting and its valid values.
    """
    check_settings(
        batch_size,
        layout,
        observation,
        feature_size,
        feature_seed,
        layout_seed,
        action_set,
    )
    self.batch_size = int(batch_size)
    self.layout = LAYOUTS[layout]
    self.layout_name = layout
    self.observation = observation
    self.action_set = action_set
    self.tables = _make_tables(
        self.layout,
        action_set,
        observation,
        int(feature_size),
        int(feature_seed),
    )
    self._fixed_cells = None
    if layout_seed is not None:
      self._fixed_cells = np.asarray(
          sample_object_cells(
              jax.random.PRNGKey(layout_seed),
              self.tables,
              self.layout.num_objects,
          )
      )
    tables = self.tables
    self._reset = jax.jit(self._reset_fn)
    self._step = jax.jit(
        jax.vmap(functools.partial(_step_stream, tables=tables))
    )
    self._observe = jax.jit(
        jax.vmap(functools.partial(_observe, tables=tables))
    )

  def _reset_fn(self, rng):
    layout_rng, stream_rng = jax.random.split(rng)
    if self._fixed_cells is None:
      cells = sample_object_cells(
          layout_rng, self.tables, self.layout.num_objects
      )
    else:
      cells = jnp.asarray(self._fixed_cells)
    return jax.vmap(
        functools.partial(_reset_stream, tables=self.tables), in_axes=(0, None)
    )(jax.random.split(stream_rng, self.batch_size), cells)

  @property
  def num_objects(self) -> int:
    return self.layout.num_objects

  @property
  def num_states(self) -> int:
    """Number of tabular states ``F * 2**K``."""
    return self.tables.num_states

  def reset(self, rng: types.Array) -> tuple[GridState, types.EnvTimestep]:
    """Starts a lifetime: ``B`` first episodes from one key."""
    return self._reset(rng)

  def step(
      self, state: GridState, actions: types.Array
  ) -> tuple[GridState, types.EnvTimestep]:
    """Applies ``actions`` ``[B]`` (ints in ``[0, num_actions)``)."""
    actions = jnp.asarray(actions, jnp.int32)
    chex.assert_shape(actions, (self.batch_size,))
    return self._step(state, actions)

  def observe(self, state: GridState) -> types.Array:
    """The observations ``[B, ...]`` of ``state`` (what a timestep shows)."""
    return self._observe(state.position, state.present)

  def observation_spec(self) -> specs.Array:
    if self.tables.index_observations:
      return specs.BoundedArray(
          (), np.int32, 0, self.num_states - 1, name="state_index"
      )
    if self.tables.features is None:
      return specs.Array((self.num_states,), np.float32, name="state_one_hot")
    return specs.Array(
        self.tables.features.shape[1:], np.float32, name="state_features"
    )

  def action_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray(
        (), np.int32, 0, ACTION_SETS[self.action_set] - 1, name="action"
    )


GRID_SETTINGS: dict[str, Any] = dict(
    observation="tabular",
    feature_size=32,
    feature_seed=0,
    layout_seed=None,
    action_set="move",
)


def _factory(layout: str) -> Callable[..., LpgGridWorld]:
  def make(batch_size: int, **settings: Any) -> LpgGridWorld:
    return LpgGridWorld(batch_size, layout=layout, **settings)

  make.__name__ = make.__qualname__ = f"make_lpg_{layout}"
  make.__doc__ = (
      f"``LpgGridWorld(batch_size, layout={layout!r}, " "**settings)``."
  )
  return make


# Registry entries: "lpg/<layout>" -> (factory, settings with defaults).
ENV_SPECS: dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]] = {
    f"lpg/{name}": (_factory(name), dict(GRID_SETTINGS)) for name in LAYOUTS
}
