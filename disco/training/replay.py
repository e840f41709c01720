"""An on-device FIFO replay of trajectories, as pure jittable functions
(vmappable: one buffer per seed).

Holds up to ``capacity`` ``[T+1, ...]`` trajectories in preallocated
arrays; inserts overwrite the oldest, samples are uniform with replacement.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from disco import types


@chex.dataclass(frozen=True)
class ReplayState:
  """Attributes:
  items: pytree of ``[capacity, T+1, ...]`` arrays (batch-major storage).
  next_index: int32 slot the next trajectory goes to.
  size: int32 number of stored trajectories (<= capacity).
  """

  items: types.ArrayTree
  next_index: jax.Array
  size: jax.Array


def init(example_rollout: types.ArrayTree, capacity: int) -> ReplayState:
  """Empty buffer for rollouts shaped like ``example_rollout`` ``[T+1, B, ...]``."""
  if capacity < 1:
    raise ValueError(f"Replay capacity must be >= 1, got {capacity}.")
  items = jax.tree.map(
      lambda x: jnp.zeros((capacity, x.shape[0]) + x.shape[2:], x.dtype),
      example_rollout,
  )
  return ReplayState(
      items=items,
      next_index=jnp.zeros([], jnp.int32),
      size=jnp.zeros([], jnp.int32),
  )


def capacity_of(state: ReplayState) -> int:
  return jax.tree.leaves(state.items)[0].shape[0]


def add(state: ReplayState, rollout: types.ArrayTree) -> ReplayState:
  """Appends the ``B`` trajectories of a ``[T+1, B, ...]`` rollout (FIFO)."""
  capacity = capacity_of(state)
  batch = jax.tree.leaves(rollout)[0].shape[1]
  slots = (state.next_index + jnp.arange(batch)) % capacity
  items = jax.tree.map(
      lambda store, x: store.at[slots].set(jnp.swapaxes(x, 0, 1)),
      state.items,
      rollout,
  )
  return ReplayState(
      items=items,
      next_index=(state.next_index + batch) % capacity,
      size=jnp.minimum(state.size + batch, capacity),
  )


def sample(
    state: ReplayState, rng: jax.Array, batch_size: int
) -> types.ArrayTree:
  """``batch_size`` stored trajectories, uniform with replacement, as a
  ``[T+1, batch_size, ...]`` rollout. The buffer must not be empty."""
  idx = jax.random.randint(rng, (batch_size,), 0, jnp.maximum(state.size, 1))
  return jax.tree.map(lambda store: jnp.swapaxes(store[idx], 0, 1), state.items)
