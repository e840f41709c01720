"""Environments by name: ``make_env("catch", batch_size=32, rows=5)``.

Each entry: a factory ``(batch_size, **settings)``, the accepted settings
with defaults, and whether it is jittable. ``register_env`` adds one, which
the launchers then accept (``--config.env=<name>``; ``--config.env=list``
lists them). The optional suites (Brax, Craftax, Sokoban) are imported only
when one of their environments is built or its settings are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import dataclasses
import difflib
import functools
from typing import Any

from disco.environments import atari
from disco.environments import base
from disco.environments import brax_envs
from disco.environments import catch
from disco.environments import catch_dm_env
from disco.environments import craftax_envs
from disco.environments import delayed_chain
from disco.environments import gymnasium_envs
from disco.environments import gymnax_envs
from disco.environments import lpg_grid
from disco.environments import lpg_levels
from disco.environments import sokoban_envs
from disco.environments import xminigrid_envs


@dataclasses.dataclass(frozen=True)
class EnvEntry:
  """A registered environment.

  Attributes:
    name: the registry name.
    make: ``(batch_size, **settings) -> Environment``.
    defaults: accepted settings and defaults, or a function returning them
      (read on first use).
    jittable: ``reset``/``step`` are pure and jittable (meta-training and
      search-based rules need this).
    description: one line for listings.
  """

  name: str
  make: Callable[..., base.Environment]
  defaults: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
  jittable: bool = True
  description: str = ""

  @property
  def settings(self) -> dict[str, Any]:
    """Accepted settings and their defaults."""
    defaults = self.defaults() if callable(self.defaults) else self.defaults
    return dict(defaults)


_REGISTRY: dict[str, EnvEntry] = {}


@dataclasses.dataclass(frozen=True)
class EnvFamily:
  """Names ``<prefix><id>`` resolved when first asked for, for open-ended
  suites (e.g. every id of gymnasium's registry).

  Attributes:
    prefix: e.g. ``"gymnasium/"``.
    entry: ``name -> EnvEntry``, raising ``ValueError`` for an unknown id.
    description: one line for listings.
  """

  prefix: str
  entry: Callable[[str], EnvEntry]
  description: str = ""


_FAMILIES: dict[str, EnvFamily] = {}


def register_env_family(
    prefix: str, entry: Callable[[str], EnvEntry], description: str = ""
) -> EnvFamily:
  """Registers ``<prefix><id>`` names, each resolved by ``entry(name)`` on
  first use (and then registered like any environment).

  Raises:
    ValueError: if the prefix is taken.
  """
  if prefix in _FAMILIES:
    raise ValueError(f"An environment family {prefix!r} is already registered.")
  family = EnvFamily(prefix, entry, description)
  _FAMILIES[prefix] = family
  return family


def env_families() -> tuple[EnvFamily, ...]:
  """The registered families, in registration order."""
  return tuple(_FAMILIES.values())


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
      defaults=settings if callable(settings) else dict(settings),
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


def close_names(name: str, names: Iterable[str], n: int = 3) -> list[str]:
  """Up to ``n`` of ``names`` like ``name``: those containing it (any case),
  then close spellings of it or of its part after the family prefix."""
  names = list(names)
  found = [x for x in names if name.lower() in x.lower()]
  by_suffix = {x.split("/")[-1]: x for x in names}
  found += difflib.get_close_matches(name, names, n=n, cutoff=0.5)
  found += [
      by_suffix[x]
      for x in difflib.get_close_matches(
          name.split("/")[-1], by_suffix, n=n, cutoff=0.5
      )
  ]
  return list(dict.fromkeys(found))[:n]


def get_entry(name: str) -> EnvEntry:
  """The entry of ``name``.

  Raises:
    ValueError: for an unknown name, naming close matches.
  """
  if name not in _REGISTRY:
    family = next(
        (f for p, f in _FAMILIES.items() if str(name).startswith(p)), None
    )
    if family is not None:
      entry = family.entry(name)
      _REGISTRY[name] = entry
      return entry
    close = close_names(str(name), _REGISTRY)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    families = sorted(
        {n.split("/")[0] + "/..." if "/" in n else n for n in _REGISTRY}
        | {p + "<id>" for p in _FAMILIES}
    )
    raise ValueError(
        f"Unknown environment {name!r}.{hint} Registered: "
        f"{', '.join(families)} ({len(_REGISTRY)} names; env_names() lists "
        "them)."
    )
  return _REGISTRY[name]


def describe_settings(name: str, settings: Mapping[str, Any]) -> str:
  """``name`` with the entries of ``settings`` that differ from its registered
  defaults, for logs: ``"catch (rows=5)"``, or ``name`` alone when
  every setting is a default (gymnax's physics constants are not listed)."""
  try:
    defaults = get_entry(name).settings
  except ValueError:
    defaults = {}
  changed = []
  for key, value in sorted(settings.items()):
    try:
      same = key in defaults and bool(defaults[key] == value)
    except (TypeError, ValueError):  # arrays: compare them as changed
      same = False
    if not same:
      changed.append(f"{key}={value!r}")
  return f"{name} ({', '.join(changed)})" if changed else name


def is_jittable(name: str) -> bool:
  """Whether environment ``name`` is a pure, jittable one."""
  return get_entry(name).jittable


def level_env_names() -> tuple[str, ...]:
  """The registered environments known to expose levels (``has_levels``)."""
  return tuple(
      n for n, e in _REGISTRY.items() if getattr(e.make, "has_levels", False)
  )


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
  valid = entry.settings
  unknown = sorted(set(settings) - set(valid))
  if unknown:
    close = {k: difflib.get_close_matches(k, valid, n=1) for k in unknown}
    hints = "".join(
        f" (did you mean {c[0]!r} for {k!r}?)" for k, c in close.items() if c
    )
    raise ValueError(
        f"Unknown setting(s) {unknown} for environment {name!r}{hints}; "
        f"valid settings: {', '.join(valid) or 'none'}."
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
for _specs, _description in (
    (lpg_grid.ENV_SPECS, "LPG grid world (Oh et al. 2020, Appendix A.1)"),
    (
        lpg_levels.ENV_SPECS,
        "random LPG grid-world levels (GROOVE's random modes)",
    ),
    (
        delayed_chain.ENV_SPECS,
        "delayed chain MDP (Oh et al. 2020, Appendix A.3)",
    ),
):
  for _name, (_make, _settings) in _specs.items():
    register_env(_name, _make, _settings, description=_description)
for _suite, _description in (
    (gymnax_envs, "gymnax"),
    (xminigrid_envs, "XLand-MiniGrid"),
    (
        craftax_envs,
        "Craftax (achievements logged; pip install -e '.[craftax]')",
    ),
    (sokoban_envs, "Sokoban (jumanji; pip install -e '.[sokoban]')"),
):
  _specs = functools.cache(_suite.env_specs)
  for _name in _suite.ENV_NAMES:
    register_env(
        _name,
        functools.partial(_suite.make, _name),
        functools.partial(lambda specs, name: specs()[name][1], _specs, _name),
        description=_description,
    )
# Continuous-action environments: gymnax's Box-action ids (registered above)
# and Brax (an optional package, imported only when one of its environments
# is built; its settings are known without it).
for _name in gymnax_envs.CONTINUOUS_NAMES:
  _REGISTRY[_name] = dataclasses.replace(
      _REGISTRY[_name], description="gymnax (continuous actions)"
  )
for _name, (_make, _settings) in brax_envs.env_specs().items():
  register_env(
      _name,
      _make,
      _settings,
      description="Brax (continuous actions; pip install -e '.[brax]')",
  )


def _gymnasium_entry(name: str) -> EnvEntry:
  env_id = name[len(gymnasium_envs.PREFIX) :]
  ids = gymnasium_envs.gymnasium_ids()
  if env_id not in ids:
    close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"Unknown environment {name!r}: {env_id!r} is not in gymnasium's "
        f"registry.{hint} Register your own with gymnasium.register in a "
        "module passed with --config.imports."
    )
  return EnvEntry(
      name=name,
      make=functools.partial(gymnasium_envs.make, env_id),
      defaults=gymnasium_envs.SETTINGS,
      jittable=False,
      description="Gymnasium (host)",
  )


for _game in atari.GAMES:
  register_env(
      atari.PREFIX + _game,
      functools.partial(atari.make, _game),
      atari.SETTINGS,
      jittable=False,
      description="Atari 2600 (host; sticky actions; pip install -e '.[atari]')",
  )
register_env_family(
    gymnasium_envs.PREFIX,
    _gymnasium_entry,
    "any id of gymnasium's registry, stepped on the host (e.g. "
    "gymnasium/CartPole-v1; ALE/<Game>-v5 with ale-py)",
)
