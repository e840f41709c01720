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

Actions. A discrete environment takes ``[B]`` int32 actions (its spec: int32,
shape ``()``); a continuous one takes ``[B, D]`` float32 actions (its spec:
float32, shape ``[D]``, with bounds ``minimum``/``maximum`` ``[D]``) and clips
what it is given to those bounds, so that an unbounded policy (a Gaussian) may
act on it and keep its unclipped samples for its log-probabilities.
``is_continuous`` tells the two apart.

Levels. A jittable environment may also expose *levels*: a level is a pytree
of arrays holding the parameters that one lifetime's ``reset`` fixes (a grid
world's size, walls and objects; a chain's length), with the same shapes and
dtypes for every level, so that levels can be stored in buffers, stacked and
passed through ``jit``/``vmap``. Such an environment sets ``has_levels =
True`` and implements ``sample_level(rng)`` (a random level of its
generator) and ``reset(rng, level)`` (a lifetime on that level; ``level=None``
draws one with ``sample_level``); ``level_features(level)`` names a few
scalars of a level for logs. Curricula (``disco.meta.level_samplers``) use
only this protocol. ``require_levels`` turns a missing protocol into one clear
error.
"""

from __future__ import annotations

import abc
from typing import Any

from dm_env import specs
import numpy as np

from disco import types

EnvState = Any
Level = Any


class LevelsUnsupportedError(ValueError):
  """An environment without levels was asked for levels."""


def require_levels(env: Environment, name: str = "") -> None:
  """Raises ``LevelsUnsupportedError`` unless ``env`` exposes levels."""
  if not getattr(env, "has_levels", False):
    label = name or type(env).__name__
    raise LevelsUnsupportedError(
        f"Environment {label!r} has no levels (it does not implement "
        "sample_level/reset(rng, level)); use one that does, e.g. "
        "lpg/random or delayed_chain, or set level_sampler.kind='none'."
    )


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
    """Spec of a single (unbatched) action: a discrete action is int32 of
    shape ``()`` in ``[minimum, maximum]``; a continuous one is float32 of
    shape ``[D]`` with per-dimension bounds (``step`` clips actions to them)."""

  has_levels: bool = False

  def sample_level(self, rng: types.Array) -> Level:
    """A random level (only where ``has_levels``)."""
    del rng
    require_levels(self)

  def level_features(self, level: Level) -> dict[str, types.Array]:
    """Scalars describing ``level`` (for logs); none by default."""
    del level
    return {}

  @property
  def is_continuous(self) -> bool:
    """Whether actions are real vectors ``[D]`` rather than indices."""
    return is_continuous(self.action_spec())

  @property
  def num_actions(self) -> int:
    """The number of discrete actions ``A``.

    Raises:
      ValueError: for a continuous action space (it has no such number).
    """
    spec = self.action_spec()
    if is_continuous(spec):
      raise ValueError(
          f"{type(self).__name__} has continuous actions of shape "
          f"{tuple(spec.shape)}; it has no number of discrete actions."
      )
    return int(spec.maximum) - int(spec.minimum) + 1


def is_continuous(action_spec: specs.Array) -> bool:
  """Whether ``action_spec`` describes continuous (floating) actions."""
  return bool(np.issubdtype(np.dtype(action_spec.dtype), np.floating))
