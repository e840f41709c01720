"""Environments by name: ``make_env("catch", batch_size=32, rows=5)``.

One entry per environment: its factory ``(batch_size, **settings)``, the
settings it accepts with their defaults, and whether it is jittable.
Register your own with ``register_env``; the launchers then accept its name
(``disco-eval --config.env=<name>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
import difflib
from typing import Any

from disco.environments import base
from disco.environments import catch
from disco.environments import catch_dm_env


@dataclasses.dataclass(frozen=True)
class EnvEntry:
  """A registered environment.

  Attributes:
    name: the registry name.
    make: ``(batch_size, **settings) -> Environment``.
    settings: accepted settings and their defaults.
    jittable: whether ``reset``/``step`` are pure and jittable (meta-training
      and search-based rules need this).
    description: one line for listings.
  """

  name: str
  make: Callable[..., base.Environment]
  settings: Mapping[str, Any]
  jittable: bool = True
  description: str = ""


_REGISTRY: dict[str, EnvEntry] = {}


def register_env(
    name: str,
    make: Callable[..., base.Environment],
    settings: Mapping[str, Any],
    *,
    jittable: bool = True,
    description: str = "",
) -> EnvEntry:
  """Registers an environment under a new ``name``.

  Raises:
    ValueError: if the name is taken.
  """
  if name in _REGISTRY:
    raise ValueError(f"An environment named {name!r} is already registered.")
  entry = EnvEntry(
      name=name,
      make=make,
      settings=dict(settings),
      jittable=jittable,
      description=description,
  )
  _REGISTRY[name] = entry
  return entry


def unregister_env(name: str) -> None:
  """Removes a registered environment (e.g. one a test registered)."""
  _REGISTRY.pop(name, None)


def env_names() -> tuple[str, ...]:
  """Every registered name, in registration order."""
  return tuple(_REGISTRY)


def get_entry(name: str) -> EnvEntry:
  """The entry of ``name``.

  Raises:
    ValueError: naming close matches (``disco-eval --config.env=list`` lists
      every name).
  """
  if name not in _REGISTRY:
    close = difflib.get_close_matches(str(name), _REGISTRY, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"Unknown environment {name!r}.{hint} Valid names: "
        f"{', '.join(_REGISTRY)}."
    )
  return _REGISTRY[name]


def is_jittable(name: str) -> bool:
  """Whether environment ``name`` is a pure, jittable one."""
  return get_entry(name).jittable


def make_env(name: str, batch_size: int, **settings: Any) -> base.Environment:
  """Builds ``batch_size`` streams of environment ``name``.

  Args:
    name: a registered name (``env_names()``).
    batch_size: number of streams ``B`` (>= 1).
    **settings: the environment's settings (``get_entry(name).settings``
      lists them with their defaults).

  Returns:
    An ``Environment`` whose timesteps lead with ``[B]``.

  Raises:
    ValueError: for an unknown name or setting, or an invalid value.
  """
  entry = get_entry(name)
  unknown = sorted(set(settings) - set(entry.settings))
  if unknown:
    close = {
        k: difflib.get_close_matches(k, entry.settings, n=1) for k in unknown
    }
    hints = "".join(
        f" (did you mean {c[0]!r} for {k!r}?)" for k, c in close.items() if c
    )
    raise ValueError(
        f"Unknown setting(s) {unknown} for environment {name!r}{hints}; "
        f"valid settings: {', '.join(entry.settings) or 'none'}."
    )
  return entry.make(batch_size, **settings)


register_env(
    "catch",
    catch.Catch,
    dict(rows=8, columns=8),
    description="jittable Catch (the published DiscoRL benchmark)",
)
register_env(
    "catch_dm_env",
    catch_dm_env.batched_catch,
    dict(rows=8, columns=8, seed=0),
    jittable=False,
    description="dm_env Catch stepped from a host loop",
)
