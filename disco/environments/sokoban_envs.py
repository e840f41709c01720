"""jumanji's Sokoban as a batched, jittable disco environment.

``jumanji/Sokoban-v0``: push the 4 boxes of a 10x10 Boxoban level onto its
4 targets. Needs ``pip install -e '.[sokoban]'``.

Levels (``generator``; disco downloads none): ``"toy"`` (default),
jumanji's two fixed levels, the second unsolvable; ``"simple"``, one
trivial level; ``"boxoban"``, uniform draws from ``boxoban_levels``: a
folder of the ``*.txt`` files of github.com/google-deepmind/boxoban-levels,
one such file, or a ``.npy`` of the Hugging Face dataset
``InstaDeepAI/boxoban-levels``.

Solving is a termination (LAST, discount 0), ``time_limit`` (120) a
truncation (LAST, discount 1). Rewards (jumanji's): -0.1 per step, +1 per
box onto a target (-1 off), +10 for solving. Observations: ``[10, 10, 4]``
float32 one-hot (wall, target, box, agent); 4 actions. ``info``: ``solved``
and ``boxes_on_targets`` (fraction at the end).
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base
from disco.environments import suite_utils

PREFIX = "jumanji/"
ENV_ID = "Sokoban-v0"
ENV_NAMES: tuple[str, ...] = (PREFIX + ENV_ID,)
INSTALL = (
    "pip install -e '.[sokoban]' (from a checkout) or "
    "pip install 'disco-rl-harness[sokoban]'"
)
GENERATORS = ("toy", "simple", "boxoban")
DEFAULTS: dict[str, Any] = dict(
    generator="toy", boxoban_levels="", time_limit=120
)
GRID = 10
# jumanji's cell codes (jumanji.environments.routing.sokoban.constants).
WALL, TARGET, AGENT, BOX = 1, 2, 3, 4
# Boxoban's level characters -> (fixed grid, variable grid) codes.
_CHARS = {
    "#": (WALL, 0),
    ".": (TARGET, 0),
    "@": (0, AGENT),
    "$": (0, BOX),
    "*": (TARGET, BOX),
    "+": (TARGET, AGENT),
    " ": (0, 0),
}
_LEVELS_HELP = (
    "a folder of Boxoban level files (git clone "
    "https://github.com/google-deepmind/boxoban-levels, then e.g. "
    "boxoban-levels/unfiltered/train), one such .txt file, or the .npy file "
    "of the Hugging Face dataset InstaDeepAI/boxoban-levels; disco never "
    "downloads levels"
)


def _check_id(env_id: str) -> str:
  env_id = env_id.removeprefix(PREFIX)
  if env_id != ENV_ID:
    raise suite_utils.unknown_name_error(
        "jumanji environment", env_id, [ENV_ID]
    )
  return env_id


# ------------------------------------------------------------- levels ----


def parse_boxoban_text(text: str, source: str = "") -> np.ndarray:
  """The levels of one Boxoban text file: ``[N, 10, 10, 2]`` uint8 (fixed,
  variable grid; jumanji's codes).

  Levels are ``; <number>`` then 10 rows of 10 characters (``#`` wall, ``.``
  target, ``$`` box, ``@`` agent, ``*`` box on target, ``+`` agent on target,
  space floor).

  Raises:
    ValueError: for a level not 10x10 or an unknown character.
  """
  levels, rows = [], None
  for line in text.splitlines() + [";"]:
    line = line.rstrip("\n")
    if line.startswith(";"):
      if rows:
        levels.append(rows)
      rows = []
    elif line.strip() and rows is not None:
      rows.append(line)
  grids = []
  for k, rows in enumerate(levels):
    if len(rows) != GRID or any(len(r) != GRID for r in rows):
      raise ValueError(f"{source}: level {k} is not {GRID}x{GRID} characters.")
    unknown = set("".join(rows)) - set(_CHARS)
    if unknown:
      raise ValueError(
          f"{source}: level {k} has unknown characters {sorted(unknown)}."
      )
    grids.append([[_CHARS[c] for c in r] for r in rows])
  return np.asarray(grids, np.uint8).reshape(-1, GRID, GRID, 2)


def load_boxoban_levels(path: str | os.PathLike[str]) -> np.ndarray:
  """``[N, 10, 10, 2]`` uint8 Boxoban levels from a folder of text files, one
  text file or a ``.npy`` file.

  Raises:
    ValueError: naming the path, the problem and how to get the levels.
  """
  path = Path(path)
  if path.is_dir():
    files = sorted(p for p in path.iterdir() if p.suffix == ".txt")
  elif path.is_file():
    files = [path]
  else:
    files = []
  if not files:
    raise ValueError(
        f"Setting boxoban_levels={str(path)!r} of {PREFIX}{ENV_ID}: no level "
        f"files there; it must be {_LEVELS_HELP}."
    )
  if files[0].suffix == ".npy":
    try:
      levels = np.load(files[0], allow_pickle=False)
    except (OSError, ValueError) as e:
      raise ValueError(f"{files[0]}: not a readable .npy file ({e}).") from e
    if levels.shape[1:] != (GRID, GRID, 2) or levels.dtype != np.uint8:
      raise ValueError(
          f"{files[0]} holds {levels.dtype} {levels.shape}; Boxoban levels "
          f"are uint8 [N, {GRID}, {GRID}, 2]."
      )
  else:
    levels = np.concatenate(
        [parse_boxoban_text(f.read_text(), str(f)) for f in files]
    )
  if not len(levels):
    raise ValueError(f"{path} holds no Boxoban level.")
  return levels


def _levels_generator(levels: np.ndarray) -> Any:
  """A jumanji ``Generator`` drawing one of ``levels`` uniformly per reset."""
  # pylint: disable-next=g-import-not-at-top
  from jumanji.environments.routing.sokoban import generator as generator_lib
  from jumanji.environments.routing.sokoban import types as sokoban_types  # pylint: disable=g-import-not-at-top

  fixed = jnp.asarray(levels[..., 0])
  variable = jnp.asarray(levels[..., 1])

  class LevelsGenerator(generator_lib.Generator):
    """Uniform draws from a fixed array of levels."""

    def __call__(self, rng_key):
      key, pick = jax.random.split(rng_key)
      k = jax.random.randint(pick, (), 0, fixed.shape[0])
      return sokoban_types.State(
          key=key,
          fixed_grid=fixed[k],
          variable_grid=variable[k],
          agent_location=self.get_agent_coordinates(variable[k]),
          step_count=jnp.zeros((), jnp.int32),
      )

  return LevelsGenerator()


def _generator(kind: str, boxoban_levels: str) -> Any:
  # pylint: disable-next=g-import-not-at-top
  from jumanji.environments.routing.sokoban import generator as generator_lib

  if kind == "toy":
    return generator_lib.ToyGenerator()
  if kind == "simple":
    return generator_lib.SimpleSolveGenerator()
  if not boxoban_levels:
    raise ValueError(
        f"{PREFIX}{ENV_ID} with generator='boxoban' needs the setting "
        f"boxoban_levels=<{_LEVELS_HELP}>."
    )
  return _levels_generator(load_boxoban_levels(boxoban_levels))


# -------------------------------------------------------- environment ----


def observe(grid: types.Array) -> types.Array:
  """jumanji's ``[10, 10, 2]`` (variable, fixed) grid -> ``[10, 10, 4]``
  float32 one-hot (wall, target, box, agent)."""
  variable, fixed = grid[..., 0], grid[..., 1]
  return jnp.stack(
      [fixed == WALL, fixed == TARGET, variable == BOX, variable == AGENT],
      axis=-1,
  ).astype(jnp.float32)


class SokobanEnvironment(suite_utils.SuiteEnvironment):
  """``batch_size`` streams of jumanji's Sokoban; the package state is
  jumanji's ``State`` and ``state.params`` is None."""

  def _num_package_actions(self) -> int:
    return self.package_env.action_spec.num_values

  def _reset_stream(self, params, key):
    del params
    env_state, timestep = self.package_env.reset(key)
    return env_state, observe(timestep.observation.grid)

  def _transition(self, env_state, action, key):
    """One stream's ``(state, observation, reward, terminated, truncated,
    info)``, reset where the episode ended."""
    stepped, timestep = self.package_env.step(env_state, action)
    done = timestep.last()
    terminated = jnp.logical_and(done, timestep.extras["solved"])
    truncated = jnp.logical_and(done, jnp.logical_not(terminated))
    fresh = self._reset_stream(None, key)
    env_state, obs = jax.tree.map(
        lambda new, old: jnp.where(done, new, old),
        fresh,
        (stepped, observe(timestep.observation.grid)),
    )
    info = dict(
        solved=terminated.astype(jnp.float32),
        boxes_on_targets=jnp.asarray(
            timestep.extras["prop_correct_boxes"], jnp.float32
        ),
    )
    return env_state, obs, timestep.reward, terminated, truncated, info

  def _step_stream(self, params, env_state, action, key):
    del params
    return self._transition(env_state, action, key)[:5]

  def _reset_one(self, params, rng):
    state, timestep = super()._reset_one(params, rng)
    zero = jnp.zeros((), jnp.float32)
    return state, timestep.replace(
        info=dict(solved=zero, boxes_on_targets=zero)
    )

  def _step_one(self, state, action):
    key = jax.random.fold_in(state.rng, state.num_steps)
    env_state, obs, reward, terminated, truncated, info = self._transition(
        state.env_state, action, key
    )
    timestep = suite_utils.transition_timestep(
        obs, reward, terminated, truncated
    ).replace(info=info)
    return (
        state.replace(env_state=env_state, num_steps=state.num_steps + 1),
        timestep,
    )


def make(env_id: str, batch_size: int, **settings: Any) -> SokobanEnvironment:
  """Builds ``batch_size`` streams of jumanji's Sokoban.

  Args:
    env_id: ``"Sokoban-v0"`` (``"jumanji/"`` prefix optional).
    batch_size: number of streams ``B`` (>= 1).
    **settings: ``generator``, ``boxoban_levels`` and ``time_limit``.

  Raises:
    ValueError: for an unknown id or setting, a bad value, unreadable
      levels, or jumanji not installed (``MissingPackageError``).
  """
  env_id = _check_id(env_id)
  name = PREFIX + env_id
  suite_utils.check_setting_names(name, settings, DEFAULTS)
  for key, value in settings.items():
    suite_utils.check_setting_value(name, key, value, DEFAULTS[key])
  settings = {**DEFAULTS, **settings}
  if settings["generator"] not in GENERATORS:
    raise ValueError(
        f"Setting generator={settings['generator']!r} of {name!r} must be "
        f"one of {', '.join(map(repr, GENERATORS))}."
    )
  if settings["time_limit"] < 1:
    raise ValueError(
        f"Setting time_limit={settings['time_limit']!r} of {name!r} must be "
        ">= 1."
    )
  with suite_utils.requires_package(name, "jumanji", INSTALL):
    # pylint: disable-next=g-import-not-at-top
    from jumanji.environments.routing.sokoban import env as sokoban_env

    generator = _generator(settings["generator"], settings["boxoban_levels"])
  package_env = sokoban_env.Sokoban(
      generator=generator, time_limit=settings["time_limit"]
  )
  return SokobanEnvironment(batch_size, package_env, None, name)


def env_specs() -> (
    dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]]
):
  """``"jumanji/Sokoban-v0"`` -> ``(factory, defaults)`` (imports nothing)."""
  return {PREFIX + ENV_ID: (functools.partial(make, ENV_ID), dict(DEFAULTS))}
