"""Tiny Gymnasium environments of a user's own, registered on import (the
tests pass this module with ``--config.imports=gymnasium_toy``)."""

from __future__ import annotations

import gymnasium
from gymnasium import spaces
import numpy as np

DISCRETE_ID = "DiscoToyDiscrete-v0"
TRUNCATED_ID = "DiscoToyTruncated-v0"
CONTINUOUS_ID = "DiscoToyContinuous-v0"


class ToyDiscrete(gymnasium.Env):
  """``length`` steps, then terminated. Observation: (steps / length, a draw
  made at reset). Actions -1, 0, 1 (``Discrete(3, start=-1)``); the reward is
  the action taken."""

  def __init__(self, length: int = 5):
    self.length = length
    self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    self.action_space = spaces.Discrete(3, start=-1)
    self._t, self._draw = 0, 0.0

  def _obs(self):
    return np.array([self._t / self.length, self._draw], np.float32)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._t, self._draw = 0, float(self.np_random.uniform())
    return self._obs(), {}

  def step(self, action):
    self._t += 1
    return self._obs(), float(action), self._t >= self.length, False, {}


class ToyContinuous(gymnasium.Env):
  """Observations are the (clipped) action received; terminated after 4
  steps; reward ``-|a|^2``."""

  def __init__(self):
    self.observation_space = spaces.Box(-2.0, 2.0, (2,), np.float32)
    self.action_space = spaces.Box(-2.0, 2.0, (2,), np.float32)
    self._t = 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._t = 0
    return np.zeros(2, np.float32), {}

  def step(self, action):
    self._t += 1
    a = np.asarray(action, np.float32)
    return a, -float(np.sum(a**2)), self._t >= 4, False, {}


for _id, _entry, _kwargs in (
    (DISCRETE_ID, ToyDiscrete, dict()),
    (
        TRUNCATED_ID,
        ToyDiscrete,
        dict(kwargs=dict(length=10), max_episode_steps=3),
    ),
    (CONTINUOUS_ID, ToyContinuous, dict()),
):
  if _id not in gymnasium.registry:
    gymnasium.register(_id, entry_point=_entry, **_kwargs)
