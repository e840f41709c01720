"""Craftax as batched, jittable disco environments, with achievements.

``ENV_NAMES``: ``craftax/Craftax-Classic-Symbolic-v1`` (``[1345]``
observations, 17 actions, 22 achievements), ``craftax/Craftax-Symbolic-v1``
(the full game: ``[8268]``, 43, 67) and their ``-Pixels-v1`` versions
(``[H, W, 3]``). Needs ``pip install -e '.[craftax]'``.

Death and beating the final boss are terminations (LAST, discount 0),
``max_timesteps`` a truncation (LAST, discount 1). ``info`` is
``{"achievement/<name>": [B] float32}``, at a LAST step 1.0 where the
ended episode unlocked it.

Resets (``reset_ratio``, default 16 as the Craftax authors' optimistic
resets): finished streams take new worlds from a pool of ``ceil(B /
reset_ratio)`` worlds drawn with stream 0's key and parameters; the
``k``-th stream finishing in a step takes world ``k mod pool size``, so
streams may share one. ``reset_ratio=1``: a world per stream (craftax's
auto-reset; needed with per-stream parameters). Other settings: craftax's
``EnvParams`` fields (``env_specs()``).
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import math
from typing import Any

import chex
import jax
import jax.numpy as jnp

from disco import types
from disco.environments import base
from disco.environments import suite_utils

PREFIX = "craftax/"
SYMBOLIC_IDS: tuple[str, ...] = (
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Symbolic-v1",
)
PIXEL_IDS: tuple[str, ...] = ("Craftax-Classic-Pixels-v1", "Craftax-Pixels-v1")
ENV_IDS: tuple[str, ...] = SYMBOLIC_IDS + PIXEL_IDS
ENV_NAMES: tuple[str, ...] = tuple(PREFIX + i for i in ENV_IDS)
INSTALL = (
    "pip install -e '.[craftax]' (from a checkout) or "
    "pip install 'disco-rl-harness[craftax]'"
)
DEFAULT_RESET_RATIO = 16
ACHIEVEMENT_PREFIX = "achievement/"
_NO_TIME_LIMIT = jnp.iinfo(jnp.int32).max


def _strip(env_id: str) -> str:
  return env_id.removeprefix(PREFIX)


def _check_id(env_id: str) -> str:
  env_id = _strip(env_id)
  if env_id not in ENV_IDS:
    raise suite_utils.unknown_name_error(
        "craftax environment", env_id, list(ENV_IDS)
    )
  return env_id


def _package_env(env_id: str) -> Any:
  """craftax's environment without auto-reset."""
  with suite_utils.requires_package(PREFIX + env_id, "craftax", INSTALL):
    # pylint: disable-next=g-import-not-at-top
    from craftax import craftax_env

    return craftax_env.make_craftax_env_from_name(env_id, auto_reset=False)


def _achievement_names(env_id: str) -> tuple[str, ...]:
  """Achievement names in the order of ``state.achievements``."""
  with suite_utils.requires_package(PREFIX + env_id, "craftax", INSTALL):
    if "Classic" in env_id:
      # pylint: disable-next=g-import-not-at-top
      from craftax.craftax_classic import constants
    else:
      # pylint: disable-next=g-import-not-at-top
      from craftax.craftax import constants
  ordered = sorted(constants.Achievement, key=lambda a: a.value)
  return tuple(a.name.lower() for a in ordered)


# craftax 1.6's EnvParams fields and defaults (but the world-generation
# noise angles), static so that listing settings needs no craftax.
CLASSIC_PARAMS: dict[str, Any] = dict(
    max_timesteps=10000,
    day_length=300,
    always_diamond=True,
    zombie_health=5,
    cow_health=3,
    skeleton_health=3,
    mob_despawn_distance=14,
    spawn_cow_chance=0.1,
    spawn_zombie_base_chance=0.02,
    spawn_zombie_night_chance=0.1,
    spawn_skeleton_chance=0.05,
)
FULL_PARAMS: dict[str, Any] = dict(
    max_timesteps=100000,
    day_length=300,
    always_diamond=False,
    mob_despawn_distance=14,
    max_attribute=5,
    god_mode=False,
)


def _defaults(env_id: str) -> dict[str, Any]:
  """Accepted settings of ``env_id`` with their defaults."""
  params = CLASSIC_PARAMS if "Classic" in env_id else FULL_PARAMS
  return {**params, "reset_ratio": DEFAULT_RESET_RATIO}


class CraftaxEnvironment(suite_utils.SuiteEnvironment):
  """``batch_size`` streams of a Craftax game (see the module docstring).

  Attributes:
    reset_ratio: streams per world of the reset pool (1: a world per
      stream).
    achievements: the achievement names, in craftax's order.
  """

  def __init__(
      self,
      batch_size: int,
      package_env: Any,
      params: Any,
      name: str,
      reset_ratio: int,
      achievements: tuple[str, ...],
  ):
    self.reset_ratio = int(reset_ratio)
    self.achievements = tuple(achievements)
    super().__init__(batch_size, package_env, params, name)
    self.pool_size = (
        0
        if self.reset_ratio == 1
        else math.ceil(self.batch_size / self.reset_ratio)
    )
    self._batch_step = jax.jit(self._step_batch)

  def _num_package_actions(self) -> int:
    return self.package_env.action_space(self.package_params).n

  def _reset_stream(self, params, key):
    obs, env_state = self.package_env.reset(key, params)
    # Strong types: the state's types must match after reset and step.
    strong = lambda x: jnp.asarray(x, dtype=jnp.result_type(x))
    return jax.tree.map(strong, env_state), obs

  def _info(self, env_state) -> dict[str, types.Array]:
    """``achievement/<name>`` -> float32 scalar: unlocked so far."""
    unlocked = env_state.achievements.astype(jnp.float32)
    return {
        ACHIEVEMENT_PREFIX + name: unlocked[i]
        for i, name in enumerate(self.achievements)
    }

  def _advance(self, params, env_state, action, key):
    """One stream's step without a reset: ``(state, observation, reward,
    terminated, truncated, info)``."""
    obs, env_state, reward, done, _ = self.package_env.step(
        key, env_state, action, params
    )
    untimed = params.replace(max_timesteps=_NO_TIME_LIMIT)
    terminated = self.package_env.is_terminal(env_state, untimed)
    truncated = jnp.logical_and(done, jnp.logical_not(terminated))
    return env_state, obs, reward, terminated, truncated, self._info(env_state)

  def _step_stream(self, params, env_state, action, key):
    """One stream's step with its own new world where the episode ended
    (craftax's auto-reset; the reference for ``reset_ratio=1`` in the tests)."""
    step_key, reset_key = jax.random.split(key)
    stepped, obs, reward, terminated, truncated, _ = self._advance(
        params, env_state, action, step_key
    )
    fresh = self._reset_stream(params, reset_key)
    done = jnp.logical_or(terminated, truncated)
    env_state, obs = jax.tree.map(
        lambda new, old: jnp.where(done, new, old), fresh, (stepped, obs)
    )
    return env_state, obs, reward, terminated, truncated

  def _reset_one(self, params, rng):
    state, timestep = super()._reset_one(params, rng)
    info = jax.tree.map(jnp.zeros_like, self._info(state.env_state))
    return state, timestep.replace(info=info)

  def _new_worlds(self, state: suite_utils.SuiteState, keys, done):
    """``(env_state, obs)`` ``[B, ...]`` of the worlds finished streams get
    (their own, or the pool's), generated only when some stream is ``done``."""
    if self.pool_size:
      params = jax.tree.map(lambda x: x[0], state.params)
      pool_keys = jax.random.split(keys[0], self.pool_size)
      generate = lambda: jax.vmap(self._reset_stream, in_axes=(None, 0))(
          params, pool_keys
      )
    else:
      generate = lambda: jax.vmap(self._reset_stream)(state.params, keys)
    shapes = jax.eval_shape(generate)
    worlds = jax.lax.cond(
        jnp.any(done),
        generate,
        lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes),
    )
    if not self.pool_size:
      return worlds
    slot = (jnp.cumsum(done) - 1) % self.pool_size
    return jax.tree.map(lambda x: x[slot], worlds)

  def _step_batch(self, state: suite_utils.SuiteState, actions):
    keys = jax.vmap(jax.random.fold_in)(state.rng, state.num_steps)
    step_keys, reset_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
    stepped, obs, reward, terminated, truncated, info = jax.vmap(self._advance)(
        state.params, state.env_state, actions, step_keys
    )
    done = jnp.logical_or(terminated, truncated)
    worlds = self._new_worlds(state, reset_keys, done)

    def where_done(new, old):
      return jnp.where(
          done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old
      )

    env_state, obs = jax.tree.map(where_done, worlds, (stepped, obs))
    timestep = suite_utils.transition_timestep(
        obs, reward, terminated, truncated
    ).replace(info=info)
    new_state = state.replace(
        env_state=env_state, num_steps=state.num_steps + 1
    )
    return new_state, timestep

  def step(
      self, state: suite_utils.SuiteState, actions: types.Array
  ) -> tuple[suite_utils.SuiteState, types.EnvTimestep]:
    """Applies ``actions`` ``[B]`` (ints in ``[0, num_actions)``)."""
    actions = jnp.asarray(actions, jnp.int32)
    chex.assert_shape(actions, (self.batch_size,))
    return self._batch_step(state, actions)

  def __repr__(self) -> str:
    return (
        f"{type(self).__name__}({self.name!r}, batch_size={self.batch_size}, "
        f"reset_ratio={self.reset_ratio})"
    )


def make(env_id: str, batch_size: int, **settings: Any) -> CraftaxEnvironment:
  """Builds ``batch_size`` streams of Craftax game ``env_id``.

  Args:
    env_id: one of ``ENV_IDS`` (``"craftax/"`` prefix optional).
    batch_size: number of streams ``B`` (>= 1).
    **settings: ``reset_ratio`` and craftax's parameters.

  Raises:
    ValueError: for an unknown id or setting, a bad value, or craftax not
      installed (``MissingPackageError``).
  """
  env_id = _check_id(env_id)
  name = PREFIX + env_id
  defaults = _defaults(env_id)
  suite_utils.check_setting_names(name, settings, defaults)
  for key, value in settings.items():
    suite_utils.check_setting_value(name, key, value, defaults[key])
  settings = {**defaults, **settings}
  for key in ("reset_ratio", "max_timesteps"):
    if settings[key] < 1:
      raise ValueError(
          f"Setting {key}={settings[key]!r} of environment {name!r} must be "
          ">= 1."
      )
  reset_ratio = settings.pop("reset_ratio")
  package_env = _package_env(env_id)
  params = package_env.default_params.replace(**settings)
  return CraftaxEnvironment(
      batch_size,
      package_env,
      params,
      name,
      reset_ratio=reset_ratio,
      achievements=_achievement_names(env_id),
  )


@functools.cache
def env_specs() -> (
    dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]]
):
  """``"craftax/<id>"`` -> ``(factory(batch_size, **settings), defaults)``
  (imports nothing)."""
  return {
      PREFIX + i: (functools.partial(make, i), dict(_defaults(i)))
      for i in ENV_IDS
  }
