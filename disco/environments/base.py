"""The batched environment interface.

Every environment in this package is batched: ``reset`` and ``step`` act on
``B`` independent streams at once and return an ``EnvTimestep`` whose leaves
lead with ``[B]``. Episodes reset automatically: the step that ends an
episode returns ``step_type == LAST`` together with that step's reward and
discount, but already carries the first observation of the next episode.

Two kinds exist:
  * jittable environments (``is_jittable = True``): ``reset``/``step`` are pure
    functions of an explicit state pytree and may be used under
    ``jit``/``vmap``/``scan``; the state may be copied freely (search-based
    rules such as SPO rely on this);
  * host environments (``is_jittable = False``): Python objects that keep their
    own state (``state`` is ignored and may be ``None``); they are driven from
    a host loop.
"""

from __future__ import annotations

import abc
from typing import Any

from dm_env import specs

from disco import types

EnvState = Any


class Environment(abc.ABC):
  """A batch of ``batch_size`` environment streams."""

  batch_size: int
  is_jittable: bool = False

  @abc.abstractmethod
  def reset(self, rng: types.Array) -> tuple[EnvState, types.EnvTimestep]:
    """Starts new episodes in every stream; step_type is FIRST."""

  @abc.abstractmethod
  def step(
      self, state: EnvState, actions: types.Array
  ) -> tuple[EnvState, types.EnvTimestep]:
    """Advances every stream by one step with ``actions`` ``[B]``."""

  @abc.abstractmethod
  def observation_spec(self) -> specs.Array:
    """Spec of a single (unbatched) observation."""

  @abc.abstractmethod
  def action_spec(self) -> specs.BoundedArray:
    """Spec of a single (unbatched) discrete action: int32, shape ()."""

  @property
  def num_actions(self) -> int:
    spec = self.action_spec()
    return int(spec.maximum) - int(spec.minimum) + 1
