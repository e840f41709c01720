"""Environments by name: ``make_env('catch', batch_size=32, rows=5)``."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from disco.environments import base
from disco.environments import catch
from disco.environments import catch_dm_env


@dataclasses.dataclass(frozen=True)
class _Entry:
  make: Callable[..., base.Environment]  # (batch_size, **settings)
  settings: tuple[str, ...]  # accepted keyword settings
  jittable: bool


_REGISTRY: dict[str, _Entry] = {
    'catch': _Entry(catch.Catch, ('rows', 'columns'), jittable=True),
    'catch_dm_env': _Entry(catch_dm_env.batched_catch,
                           ('rows', 'columns', 'seed'), jittable=False),
}

ENV_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def _entry(name: str) -> _Entry:
  if name not in _REGISTRY:
    raise ValueError(
        f'Unknown environment {name!r}; valid names are {list(ENV_NAMES)}.')
  return _REGISTRY[name]


def is_jittable(name: str) -> bool:
  """Whether environment ``name`` is a pure, jittable one."""
  return _entry(name).jittable


def make_env(name: str, batch_size: int, **settings: Any) -> base.Environment:
  """Builds ``batch_size`` streams of environment ``name``.

  Args:
    name: one of ``ENV_NAMES``.
    batch_size: number of streams ``B`` (>= 1).
    **settings: environment settings: ``rows`` and ``columns`` for both Catch
      versions (default 8 x 8), plus ``seed`` for ``catch_dm_env``.

  Returns:
    An ``Environment`` whose timesteps lead with ``[B]``.

  Raises:
    ValueError: for an unknown name or setting, or an invalid value.
  """
  entry = _entry(name)
  unknown = sorted(set(settings) - set(entry.settings))
  if unknown:
    raise ValueError(
        f'Unknown setting(s) {unknown} for environment {name!r}; remove them '
        f'or use only {list(entry.settings)}.')
  return entry.make(batch_size, **settings)
