"""The batched environment interface.

``reset`` and ``step`` act on ``B`` streams and return an ``EnvTimestep``
with ``[B, ...]`` leaves. Episodes reset automatically: the step ending an
episode returns LAST with its reward and discount but the next episode's
first observation.

Jittable environments (``is_jittable``) have pure ``reset``/``step`` on a
copyable state pytree (search-based rules need this); host environments
keep their own state (``state`` is ignored). Actions are ``[B]`` int32, or
``[B, D]`` float32 clipped by the environment to its spec's bounds. With
``has_levels``: ``sample_level(rng)`` and ``reset(rng, level)`` (None:
sampled), levels being pytrees of arrays of fixed shapes, one per lifetime.
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
    """Spec of one action: int32 shape ``()`` in ``[minimum, maximum]``, or
    float32 ``[D]`` with per-dimension bounds."""

  has_levels: bool = False
  # Host environments only: each ``reset`` starts new streams and returns a
  # state naming them, so one object trains several seeds side by side.
  keeps_lifetimes: bool = False

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
