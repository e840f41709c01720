"""Level samplers by name (``--config.level_sampler.kind``):
``register_level_sampler(name, cls)`` adds a ``LevelSampler`` class, built as
``cls(config, env)`` per group from ``config.level_sampler``; ``none`` is no
sampler. Registered here: ``uniform``, ``plr``, ``groove``."""

from __future__ import annotations

import dataclasses

from disco.environments import base as env_base
from disco.meta import level_samplers


@dataclasses.dataclass(frozen=True)
class LevelSamplerEntry:
  """A registered level sampler.

  Attributes:
    name: the registry name (``config.level_sampler.kind``).
    cls: its class, ``(config, env) -> LevelSampler``.
    description: one line for listings.
  """

  name: str
  cls: type[level_samplers.LevelSampler]
  description: str = ""


_REGISTRY: dict[str, LevelSamplerEntry] = {}


def register_level_sampler(
    name: str, cls: type[level_samplers.LevelSampler], description: str = ""
) -> LevelSamplerEntry:
  """Registers the sampler ``cls`` under ``name``.

  Raises:
    ValueError: the name is taken or is ``none``, or ``cls`` is not a
      ``LevelSampler``.
  """
  if name in _REGISTRY or name == level_samplers.NONE:
    raise ValueError(f"A level sampler named {name!r} is already registered.")
  if not (
      isinstance(cls, type) and issubclass(cls, level_samplers.LevelSampler)
  ):
    raise ValueError(
        f"Level sampler {name!r} must be a subclass of "
        f"disco.meta.level_samplers.LevelSampler, got {cls!r}."
    )
  entry = LevelSamplerEntry(name=name, cls=cls, description=description)
  _REGISTRY[name] = entry
  return entry


def unregister_level_sampler(name: str) -> None:
  """Removes a registered sampler (e.g. one a test registered)."""
  _REGISTRY.pop(name, None)


def level_sampler_names() -> tuple[str, ...]:
  """Every registered name, in registration order."""
  return tuple(_REGISTRY)


def get_entry(name: str) -> LevelSamplerEntry:
  """The entry of ``name``; ValueError naming the valid kinds."""
  if name not in _REGISTRY:
    valid = ", ".join((level_samplers.NONE, *_REGISTRY))
    raise ValueError(f"level_sampler.kind={name!r} is unknown; valid: {valid}.")
  return _REGISTRY[name]


def make_level_sampler(
    config: level_samplers.SamplerConfig, env: env_base.Environment
) -> level_samplers.LevelSampler:
  """The sampler ``config.kind`` names over ``env``'s levels.

  Raises:
    ValueError: an unknown kind (or ``none``).
    base.LevelsUnsupportedError: if ``env`` has no levels.
  """
  return get_entry(config.kind).cls(config, env)


register_level_sampler(
    "uniform",
    level_samplers.LevelSampler,
    "a fresh level of the environment's generator every lifetime",
)
register_level_sampler(
    "plr",
    level_samplers.PLRSampler,
    "Prioritized Level Replay (a buffer scored by value loss)",
)
register_level_sampler(
    "groove",
    level_samplers.GrooveSampler,
    "GROOVE (a buffer scored by regret against a reference rule)",
)
