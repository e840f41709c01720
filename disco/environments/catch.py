"""Jittable, batched Catch.

A ball falls from a random column of the top row, one row per step; the
paddle on the bottom row moves left, stays or moves right (actions 0, 1,
2). After ``rows - 1`` steps the episode ends with +1 if the paddle is
under the ball, else -1; other rewards are 0. Random numbers are drawn as
in the published DiscoRL jittable Catch (same key, same trajectories).
"""

from __future__ import annotations

import functools
import numbers

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base

NUM_ACTIONS = 3  # 0: left, 1: stay, 2: right.
BALL_Y, BALL_X, PADDLE_Y, PADDLE_X = 0, 1, 2, 3  # indices into a game vector


def check_settings(rows, columns, batch_size=None) -> None:
  """Raises ``ValueError`` naming the first invalid Catch setting."""
  checks = [
      ("rows", rows, 2, "the ball needs a row to fall from"),
      ("columns", columns, 1, "the board needs at least one column"),
  ]
  if batch_size is not None:
    checks.append(("batch_size", batch_size, 1, "at least one stream"))
  for name, value, minimum, why in checks:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
      raise ValueError(
          f"Catch setting {name}={value!r} must be an integer >= {minimum}."
      )
    if value < minimum:
      raise ValueError(
          f"Catch setting {name}={value} is too small: use {name} >= "
          f"{minimum} ({why})."
      )


def initial_game(rng: types.Array, rows: int, columns: int) -> types.Array:
  """A fresh game ``[4]`` int32: ball on row 0 in a random column."""
  ball_x = jax.random.randint(rng, (), 0, columns)
  return jnp.array((0, ball_x, rows - 1, columns // 2), dtype=jnp.int32)


def game_step(
    game: types.Array, action: types.Array, columns: int
) -> types.Array:
  """Moves the paddle by ``action - 1`` (clipped), then drops the ball."""
  paddle_x = jnp.clip(game[PADDLE_X] + action - 1, 0, columns - 1)
  return jnp.stack(
      [game[BALL_Y] + 1, game[BALL_X], game[PADDLE_Y], paddle_x]
  ).astype(jnp.int32)


def is_terminal(game: types.Array, rows: int) -> types.Array:
  """Whether the ball has reached the bottom row (bool scalar)."""
  return game[BALL_Y] == rows - 1


def reward(game: types.Array, rows: int) -> types.Array:
  """float32 scalar: +1 / -1 for a caught / missed ball on the bottom row."""
  caught = jnp.where(game[BALL_X] == game[PADDLE_X], 1.0, -1.0)
  return jnp.where(is_terminal(game, rows), caught, 0.0).astype(jnp.float32)


def render(game: types.Array, rows: int, columns: int) -> types.Array:
  """``[rows, columns, 1]`` float32 board: 1 at the ball and the paddle."""
  y = jnp.arange(rows)[:, None]
  x = jnp.arange(columns)[None, :]
  ball = (y == game[BALL_Y]) & (x == game[BALL_X])
  paddle = (y == game[PADDLE_Y]) & (x == game[PADDLE_X])
  return (ball | paddle).astype(jnp.float32)[..., None]


@chex.dataclass(frozen=True)
class CatchState:
  """State of ``B`` Catch streams.

  Attributes:
    game: ``[B, 4]`` int32 ``(ball_y, ball_x, paddle_y, paddle_x)``.
    rng: ``[B, ...]`` one PRNG key per stream (used for the next step).
  """

  game: types.Array
  rng: types.Array


def _reset_stream(rng, rows, columns):
  next_rng, reset_rng = jax.random.split(rng)
  game = initial_game(reset_rng, rows, columns)
  timestep = types.EnvTimestep(
      observation=render(game, rows, columns),
      reward=jnp.zeros((), jnp.float32),
      step_type=jnp.asarray(types.FIRST, jnp.int32),
      discount=jnp.ones((), jnp.float32),
  )
  return CatchState(game=game, rng=next_rng), timestep


def _step_stream(state, action, rows, columns):
  next_rng, step_rng = jax.random.split(state.rng)
  game = game_step(state.game, action, columns)
  done = is_terminal(game, rows)
  # A finished episode is replaced by a new one straight away; the timestep
  # keeps the finishing reward and LAST but shows the new first observation.
  game_after = jnp.where(done, initial_game(step_rng, rows, columns), game)
  timestep = types.EnvTimestep(
      observation=render(game_after, rows, columns),
      reward=reward(game, rows),
      step_type=jnp.where(done, types.LAST, types.MID).astype(jnp.int32),
      discount=jnp.where(done, 0.0, 1.0).astype(jnp.float32),
  )
  return CatchState(game=game_after, rng=next_rng), timestep


class Catch(base.Environment):
  """``batch_size`` jittable Catch streams with automatic resets.

  Observations are ``[B, rows, columns, 1]`` float32 boards.
  """

  is_jittable = True

  def __init__(self, batch_size: int, rows: int = 8, columns: int = 8):
    check_settings(rows, columns, batch_size)
    self.batch_size = int(batch_size)
    self.rows = int(rows)
    self.columns = int(columns)
    size = dict(rows=self.rows, columns=self.columns)
    self._reset = jax.jit(jax.vmap(functools.partial(_reset_stream, **size)))
    self._step = jax.jit(jax.vmap(functools.partial(_step_stream, **size)))

  def reset(self, rng: types.Array) -> tuple[CatchState, types.EnvTimestep]:
    """Starts ``B`` episodes from one key (split into ``B`` stream keys)."""
    return self._reset(jax.random.split(rng, self.batch_size))

  def step(
      self, state: CatchState, actions: types.Array
  ) -> tuple[CatchState, types.EnvTimestep]:
    """Applies ``actions`` ``[B]`` (ints in {0, 1, 2}) to every stream."""
    actions = jnp.asarray(actions, jnp.int32)
    chex.assert_shape(actions, (self.batch_size,))
    return self._step(state, actions)

  def observation_spec(self) -> specs.Array:
    return specs.Array((self.rows, self.columns, 1), np.float32, name="board")

  def action_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray((), np.int32, 0, NUM_ACTIONS - 1, name="action")
