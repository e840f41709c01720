"""A one-step continuous-action task for tests: reach the target.

Each episode is one step: the observation is a target ``[D]`` drawn
uniformly from ``[-1, 1]``; the reward of action ``a`` is ``-|a - target|^2``
(after the clip to the bounds ``[-2, 2]``), and the episode terminates.
A policy that outputs the target earns 0; the initial Gaussian policy (mean
about 0, standard deviation 1) earns about ``-D (1 + 1/3)``.
"""

from __future__ import annotations

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base
from disco.environments import registry

BOUND = 2.0


@chex.dataclass(frozen=True)
class ToyState:
  target: jax.Array  # [B, D]
  rng: jax.Array


class ReachTarget(base.Environment):
  """``batch_size`` streams of the one-step reaching task in ``size`` dims."""

  is_jittable = True

  def __init__(self, batch_size: int, size: int = 2):
    self.batch_size = batch_size
    self.size = size

  def _draw(self, rng):
    rng, key = jax.random.split(rng)
    target = jax.random.uniform(key, (self.batch_size, self.size), minval=-1.0)
    return ToyState(target=target, rng=rng)

  def reset(self, rng):
    state = self._draw(rng)
    b = self.batch_size
    return state, types.EnvTimestep(
        observation=state.target,
        reward=jnp.zeros([b]),
        step_type=jnp.full([b], types.FIRST, jnp.int32),
        discount=jnp.ones([b]),
    )

  def step(self, state, actions):
    actions = jnp.clip(jnp.asarray(actions, jnp.float32), -BOUND, BOUND)
    reward = -jnp.sum(jnp.square(actions - state.target), axis=-1)
    new_state = self._draw(state.rng)
    b = self.batch_size
    return new_state, types.EnvTimestep(
        observation=new_state.target,
        reward=reward,
        step_type=jnp.full([b], types.LAST, jnp.int32),
        discount=jnp.zeros([b]),
    )

  def observation_spec(self):
    return specs.Array((self.size,), np.float32)

  def action_spec(self):
    return specs.BoundedArray(
        (self.size,),
        np.float32,
        np.full(self.size, -BOUND, np.float32),
        np.full(self.size, BOUND, np.float32),
    )


NAME = "test/reach_target"


def register() -> str:
  """Registers ``ReachTarget`` as ``NAME`` (once); returns the name."""
  if NAME not in registry.env_names():
    registry.register_env(NAME, ReachTarget, dict(size=2))
  return NAME
