"""Catch as a host ``dm_env.Environment`` (``CatchDmEnv``, the dynamics of
``catch.Catch``), and ``BatchedDmEnv``: ``B`` dm_env environments as one
host ``Environment`` that steps them in turn and auto-resets as the
jittable ones do."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import dm_env
from dm_env import specs
import jax
import numpy as np

from disco import types
from disco.environments import base
from disco.environments import catch


class CatchDmEnv(dm_env.Environment):
  """One Catch stream driven by a numpy ``RandomState``.

  Args:
    rows: board height (>= 2).
    columns: board width (>= 1).
    seed: seed of the ball's start columns.
    ball_columns: start columns of the next episodes, used before random
      draws (e.g. to replay another implementation's episodes).
  """

  def __init__(
      self,
      rows: int = 8,
      columns: int = 8,
      seed: int | None = 1,
      ball_columns: Iterable[int] | None = None,
  ):
    catch.check_settings(rows, columns)
    self._rows = int(rows)
    self._columns = int(columns)
    self._rng = np.random.RandomState(seed)
    self._ball_columns = None if ball_columns is None else iter(ball_columns)
    self._ball_y = self._ball_x = self._paddle_x = 0
    self._paddle_y = self._rows - 1
    self._reset_next_step = True

  def _next_ball_column(self) -> int:
    if self._ball_columns is not None:
      column = next(self._ball_columns, None)
      if column is not None:
        return int(column)
      self._ball_columns = None
    return int(self._rng.randint(self._columns))

  @property
  def game(self) -> np.ndarray:
    """``[4]`` int32 ``(ball_y, ball_x, paddle_y, paddle_x)``, as ``catch``."""
    return np.array(
        [self._ball_y, self._ball_x, self._paddle_y, self._paddle_x],
        dtype=np.int32,
    )

  def reset(self) -> dm_env.TimeStep:
    self._reset_next_step = False
    self._ball_y = 0
    self._ball_x = self._next_ball_column()
    self._paddle_x = self._columns // 2
    return dm_env.restart(self._observation())

  def step(self, action) -> dm_env.TimeStep:
    if self._reset_next_step:
      return self.reset()
    action = int(action)
    if not 0 <= action < catch.NUM_ACTIONS:
      raise ValueError(f"Catch action must be 0, 1 or 2, got {action}.")
    self._paddle_x = min(max(self._paddle_x + action - 1, 0), self._columns - 1)
    self._ball_y += 1
    obs = self._observation()
    if self._ball_y == self._rows - 1:
      self._reset_next_step = True
      caught = self._ball_x == self._paddle_x
      return dm_env.termination(reward=1.0 if caught else -1.0, observation=obs)
    return dm_env.transition(reward=0.0, observation=obs)

  def observation_spec(self) -> specs.Array:
    return specs.Array((self._rows, self._columns, 1), np.float32, name="board")

  def action_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray(
        (), np.int32, 0, catch.NUM_ACTIONS - 1, name="action"
    )

  def _observation(self) -> np.ndarray:
    board = np.zeros((self._rows, self._columns, 1), np.float32)
    board[self._ball_y, self._ball_x] = 1.0
    board[self._paddle_y, self._paddle_x] = 1.0
    return board


def stream_seeds(seed: int, batch_size: int) -> list[int]:
  """Per-stream seeds derived from ``seed`` (as the published batched env)."""
  max_seed = np.iinfo(np.int32).max
  seeds = jax.random.randint(
      jax.random.PRNGKey(seed), (batch_size,), 0, max_seed
  )
  return [int(s) for s in np.asarray(seeds)]


class BatchedDmEnv(base.Environment):
  """``B`` dm_env environments as one host ``Environment``.

  ``reset`` ignores its key, ``step`` its state; both return None as the
  state. Timesteps are numpy: observations ``[B, ...]`` float32, reward and
  discount ``[B]`` float32, step_type ``[B]`` int32.
  """

  is_jittable = False

  def __init__(self, envs: Sequence[dm_env.Environment]):
    if not envs:
      raise ValueError("BatchedDmEnv needs at least one environment.")
    self._envs = tuple(envs)
    self.batch_size = len(self._envs)

  def reset(
      self, rng: types.Array | None = None
  ) -> tuple[None, types.EnvTimestep]:
    """Starts a new episode in every stream; ``rng`` is ignored."""
    del rng
    return None, self._stack([env.reset() for env in self._envs])

  def step(self, state, actions) -> tuple[None, types.EnvTimestep]:
    """Steps stream ``i`` with ``actions[i]`` (numpy or jax ``[B]``)."""
    del state
    actions = np.asarray(actions)
    if actions.shape != (self.batch_size,):
      raise ValueError(
          f"Expected actions of shape ({self.batch_size},), got "
          f"{actions.shape}."
      )
    return None, self._stack(
        [
            self._step_stream(env, a)
            for env, a in zip(self._envs, actions, strict=True)
        ]
    )

  @staticmethod
  def _step_stream(env: dm_env.Environment, action) -> dm_env.TimeStep:
    timestep = env.step(action)
    if timestep.last():
      # Start the next episode now but report the end of the finished one.
      first = env.reset()
      timestep = timestep._replace(observation=first.observation)
    return timestep

  def _stack(self, timesteps: list[dm_env.TimeStep]) -> types.EnvTimestep:
    # dm_env leaves reward and discount as None on FIRST steps.
    return types.EnvTimestep(
        observation=np.asarray([t.observation for t in timesteps], np.float32),
        reward=np.asarray([t.reward or 0.0 for t in timesteps], np.float32),
        step_type=np.asarray([t.step_type for t in timesteps], np.int32),
        discount=np.asarray(
            [1.0 if t.discount is None else t.discount for t in timesteps],
            np.float32,
        ),
    )

  def observation_spec(self) -> specs.Array:
    return self._envs[0].observation_spec()

  def action_spec(self) -> specs.BoundedArray:
    return self._envs[0].action_spec()


def batched_catch(
    batch_size: int, rows: int = 8, columns: int = 8, seed: int = 1
) -> BatchedDmEnv:
  """``batch_size`` host Catch streams, each seeded from ``seed``."""
  catch.check_settings(rows, columns, batch_size)
  return BatchedDmEnv(
      [
          CatchDmEnv(rows, columns, seed=s)
          for s in stream_seeds(seed, batch_size)
      ]
  )
