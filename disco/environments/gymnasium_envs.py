"""Gymnasium environments as batched host ``disco`` environments.

``GymnasiumEnv`` adapts any ``gymnasium.vector.VectorEnv`` that resets its
sub-environments in the same step (``AutoresetMode.SAME_STEP``, the
convention of every ``disco`` environment: the step ending an episode
returns LAST with its reward and the next episode's first observation):

```python
env = GymnasiumEnv(lambda seed: gymnasium.make_vec(
    "CartPole-v1", num_envs=8, vectorization_mode="sync",
    vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}))
```

Every id in gymnasium's registry is ``gymnasium/<id>`` for the launchers
and ``registry.make_env`` (``make``), including ids a user module registers
with ``gymnasium.register`` and passes with ``--config.imports``.

Termination and truncation stay apart: a terminated step is LAST with
discount 0, a truncated one (a time limit) LAST with discount 1.
Observations: a ``Box`` keeps its shape, as float32 (integer ``Box``
observations, e.g. image bytes, keep their dtype); a ``Discrete`` one is a
state index (int32, bounded). Actions: ``Discrete(n, start)`` as int32 in
``[0, n - 1]`` (``start`` added back), a ``Box`` as float32 ``[D]`` clipped
to its bounds.

Each ``reset(rng)`` builds a new vector environment seeded from ``rng`` and
returns a handle to it as the state, so one object trains several seeds
(one lifetime per handle; ``close`` ends them all).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dm_env import specs
import numpy as np

from disco import types
from disco.environments import base

PREFIX = "gymnasium/"
VECTORIZATION_MODES = ("sync", "async")
# The settings of a ``gymnasium/<id>`` environment and their defaults.
SETTINGS = dict(max_episode_steps=None, vectorization="sync")


class GymnasiumError(ValueError):
  """A Gymnasium environment ``disco`` cannot run."""


def seed_from_key(rng: types.Array) -> int:
  """A non-negative int31 seed from a JAX PRNG key, read on the host
  (nothing compiled)."""
  data = np.asarray(rng, dtype=np.uint32).reshape(-1)
  mixed = np.uint64(0)
  for word in data:
    mixed = np.uint64(mixed * np.uint64(0x9E3779B1) + np.uint64(word))
  return int(mixed % np.uint64(2**31 - 1))


def observation_spec(space: Any) -> specs.Array:
  """The ``disco`` spec of one observation of gymnasium ``space``.

  Raises:
    GymnasiumError: for spaces other than ``Box`` and ``Discrete``.
  """
  from gymnasium import spaces  # pylint: disable=g-import-not-at-top

  if isinstance(space, spaces.Discrete):
    return specs.BoundedArray((), np.int32, 0, int(space.n) - 1, "observation")
  if isinstance(space, spaces.Box):
    dtype = space.dtype if np.issubdtype(space.dtype, np.integer) else None
    return specs.Array(
        tuple(space.shape), dtype or np.float32, name="observation"
    )
  raise GymnasiumError(
      f"Observation space {space} is not a Box or Discrete: wrap the "
      "environment in gymnasium.wrappers.FlattenObservation."
  )


def action_spec(space: Any) -> specs.BoundedArray:
  """The ``disco`` spec of one action of gymnasium ``space``.

  Raises:
    GymnasiumError: for spaces other than ``Discrete`` and a 1-D ``Box``.
  """
  from gymnasium import spaces  # pylint: disable=g-import-not-at-top

  if isinstance(space, spaces.Discrete):
    return specs.BoundedArray((), np.int32, 0, int(space.n) - 1, "action")
  if isinstance(space, spaces.Box) and len(space.shape) == 1:
    low = np.broadcast_to(space.low, space.shape).astype(np.float32)
    high = np.broadcast_to(space.high, space.shape).astype(np.float32)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
      raise GymnasiumError(
          f"Action space {space} is unbounded: wrap the environment in "
          "gymnasium.wrappers.RescaleAction (or ClipAction) to bound it."
      )
    return specs.BoundedArray(space.shape, np.float32, low, high, "action")
  raise GymnasiumError(
      f"Action space {space} is not Discrete or a 1-D Box: disco's policies "
      "take one categorical or one real vector action."
  )


class GymnasiumEnv(base.Environment):
  """``batch_size`` streams of a Gymnasium vector environment.

  Args:
    make_vector: ``seed -> VectorEnv`` (same-step auto-reset); called once
      per ``reset``, the seed derived from its key.
    observation_transform: ``[B, ...] -> [B, ...]`` numpy, applied to every
      observation batch (e.g. channels last, as a view), or None.

  Raises:
    GymnasiumError: if the vector environment resets in its next step, or
      its spaces have no ``disco`` spec.
  """

  is_jittable = False
  keeps_lifetimes = True

  def __init__(
      self,
      make_vector: Callable[[int], Any],
      observation_transform: Callable[[np.ndarray], np.ndarray] | None = None,
  ):
    self._make_vector = make_vector
    self._transform = observation_transform
    self._vectors: dict[int, Any] = {}
    probe = make_vector(0)
    try:
      self._check(probe)
      self.batch_size = int(probe.num_envs)
      self._action_space = probe.single_action_space
      self._action_spec = action_spec(self._action_space)
      self._start = int(getattr(self._action_space, "start", 0))
      obs, _ = probe.reset(seed=0)
      obs = self._observations(obs)
      spec = observation_spec(probe.single_observation_space)
      self._observation_spec = spec.replace(shape=obs.shape[1:])
    finally:
      probe.close()

  @staticmethod
  def _check(vector: Any) -> None:
    mode = (getattr(vector, "metadata", None) or {}).get("autoreset_mode")
    if getattr(mode, "name", mode) != "SAME_STEP":
      raise GymnasiumError(
          f"The vector environment auto-resets in mode {mode}; disco needs "
          "the reset in the same step: make it with vector_kwargs="
          "{'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP}."
      )

  def _observations(self, obs: np.ndarray) -> np.ndarray:
    obs = np.asarray(obs)
    if self._transform is not None:
      obs = self._transform(obs)
    if not np.issubdtype(obs.dtype, np.integer):
      return obs.astype(np.float32, copy=False)
    if obs.ndim == 1:  # Discrete: state indices
      return obs.astype(np.int32, copy=False)
    return obs

  def reset(self, rng: types.Array) -> tuple[np.ndarray, types.EnvTimestep]:
    """New streams seeded from ``rng``; the state is their handle (int32)."""
    seed = seed_from_key(rng)
    vector = self._make_vector(seed)
    self._check(vector)
    handle = len(self._vectors)
    self._vectors[handle] = vector
    obs, _ = vector.reset(seed=seed)
    b = self.batch_size
    return np.int32(handle), types.EnvTimestep(
        observation=self._observations(obs),
        reward=np.zeros([b], np.float32),
        step_type=np.full([b], types.FIRST, np.int32),
        discount=np.ones([b], np.float32),
    )

  def step(
      self, state: np.ndarray, actions: types.Array
  ) -> tuple[np.ndarray, types.EnvTimestep]:
    """Steps the streams of handle ``state`` with ``actions`` ``[B]`` or
    ``[B, D]``."""
    vector = self._vectors[int(np.asarray(state))]
    actions = np.asarray(actions)
    if self._action_spec.dtype == np.int32:
      actions = actions.astype(np.int64) + self._start
    else:
      actions = np.clip(
          actions, self._action_spec.minimum, self._action_spec.maximum
      ).astype(self._action_space.dtype)
    obs, reward, terminated, truncated, _ = vector.step(actions)
    terminated = np.asarray(terminated, bool)
    last = terminated | np.asarray(truncated, bool)
    return state, types.EnvTimestep(
        observation=self._observations(obs),
        reward=np.asarray(reward, np.float32),
        step_type=np.where(last, types.LAST, types.MID).astype(np.int32),
        discount=np.where(terminated, 0.0, 1.0).astype(np.float32),
    )

  def close(self) -> None:
    """Closes every vector environment this object started."""
    for vector in self._vectors.values():
      vector.close()
    self._vectors.clear()

  def observation_spec(self) -> specs.Array:
    return self._observation_spec

  def action_spec(self) -> specs.BoundedArray:
    return self._action_spec


def gymnasium_ids() -> tuple[str, ...]:
  """The ids in gymnasium's registry (after the ALE's, where installed)."""
  gym = import_gymnasium()
  return tuple(gym.registry)


def import_gymnasium():
  """``gymnasium``, with the ALE's Atari ids registered where ``ale-py`` is
  installed.

  Raises:
    ImportError: one line naming the install, without gymnasium.
  """
  try:
    import gymnasium  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError(
        "Gymnasium environments need gymnasium: pip install -e '.[atari]' "
        "(or pip install gymnasium)."
    ) from None
  try:
    import ale_py  # pylint: disable=g-import-not-at-top

    gymnasium.register_envs(ale_py)
  except ImportError:
    pass
  return gymnasium


def make(
    env_id: str,
    batch_size: int,
    max_episode_steps: int | None = None,
    vectorization: str = "sync",
) -> GymnasiumEnv:
  """``batch_size`` streams of gymnasium id ``env_id``.

  Args:
    env_id: a gymnasium id (``gymnasium.registry``).
    batch_size: streams ``B`` (>= 1).
    max_episode_steps: the time limit (a truncation); None: the id's own.
    vectorization: ``"sync"`` (one process) or ``"async"`` (a process per
      stream).

  Raises:
    GymnasiumError: for an unknown id, bad settings or unsupported spaces.
  """
  gym = import_gymnasium()
  if env_id not in gym.registry:
    raise GymnasiumError(
        f"Unknown gymnasium id {env_id!r}: register it with "
        "gymnasium.register in a module passed with --config.imports."
    )
  if vectorization not in VECTORIZATION_MODES:
    raise GymnasiumError(
        f"vectorization={vectorization!r}: use one of "
        f"{', '.join(VECTORIZATION_MODES)}."
    )
  if int(batch_size) < 1:
    raise GymnasiumError(f"batch_size={batch_size} must be >= 1.")
  kwargs = {}
  if max_episode_steps is not None:
    if int(max_episode_steps) < 1:
      raise GymnasiumError(
          f"max_episode_steps={max_episode_steps} must be >= 1 (or None)."
      )
    kwargs["max_episode_steps"] = int(max_episode_steps)

  def make_vector(seed: int):
    del seed  # seeded by ``reset``
    return gym.make_vec(
        env_id,
        num_envs=int(batch_size),
        vectorization_mode=vectorization,
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **kwargs,
    )

  return GymnasiumEnv(make_vector)
