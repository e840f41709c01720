"""Craftax as batched, jittable ``disco`` environments (with achievements).

Four names (``ENV_NAMES``), the ids of ``craftax.craftax_env``:

  * ``craftax/Craftax-Classic-Symbolic-v1``: Crafter's rules in JAX, a
    ``[1345]`` observation (the local map's one-hot blocks and mobs, the
    inventory, intrinsics, light and direction), 17 actions, 22
    achievements;
  * ``craftax/Craftax-Symbolic-v1``: the full game (9 floors), a ``[8268]``
    observation, 43 actions, 67 achievements;
  * ``craftax/Craftax-Classic-Pixels-v1`` and ``craftax/Craftax-Pixels-v1``:
    the same games seen as ``[H, W, 3]`` images (slower: every step
    renders).

  env = craftax_envs.make("Craftax-Classic-Symbolic-v1", batch_size=64,
                          max_timesteps=1000, reset_ratio=16)

Needs the optional package (``pip install -e '.[craftax]'``); it is imported
only when an environment is built or its settings are read, and a missing
one gives one line naming that command (``suite_utils.MissingPackageError``).

Episode ends. Craftax ends an episode when the player dies (health 0; in
Classic also by walking into lava), when the full game's final boss is
beaten, or when ``state.timestep`` reaches ``max_timesteps``, and reports all
of them as ``done`` (with discount 0). Here the first ones are
*terminations* (LAST, discount 0) and the time limit a *truncation* (LAST,
discount 1): ``terminated`` is craftax's own ``is_terminal`` with the time
limit lifted, ``truncated`` the rest of its ``done``.

Achievements. Every timestep carries ``info`` (``types.EnvTimestep.info``)
``{"achievement/<name>": [B] float32}``, e.g. ``achievement/collect_wood``:
at a LAST step, 1.0 where the episode that ended unlocked it (craftax's own
``info["Achievements/<name>"]`` is the same in percent). ``episode_stats``
averages them over the episodes that end, so ``disco-eval``'s
``metrics.csv`` gets a column ``episode/achievement/<name>`` (the success
rate per iteration) and ``summary.json`` a ``final_episode_info``.

Resets (setting ``reset_ratio``). Craftax's own auto-reset generates a new
world in every stream at every step and keeps it only where the episode
ended, which dominates the cost of a step. Here finished streams take their
new worlds from a *reset pool* of ``ceil(B / reset_ratio)`` worlds,
generated once per batch step from one key (stream 0's) and only in steps
where some episode ends (a ``lax.cond``; under ``vmap`` both branches run):
the ``k``-th stream to finish in a step takes world ``k mod pool size``.
Worlds are fresh draws of craftax's generator, but two streams finishing in
the same step share one when more streams finish than the pool holds (rare
when episodes last hundreds of steps). ``reset_ratio=1`` gives every stream
its own world from its own key (exactly craftax's auto-reset, B worlds per
step that ends an episode). The default, 16, is the ratio of the Craftax
authors' optimistic-reset wrapper in their baselines. The pool's worlds are
generated with the parameters of stream 0 (streams share parameters unless
``state.params`` is replaced; with per-stream parameters use 1).

Settings: ``reset_ratio`` (int >= 1) and the fields of craftax's
``EnvParams`` (``max_timesteps``: 10000 in Classic, 100000 in the full game;
``day_length``, ``always_diamond``, mob settings, ...); ``env_specs()`` lists
them with their defaults (without importing craftax). Observations are
float32 (craftax's own dtype).
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
  """craftax's environment without auto-reset (this module resets)."""
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


# The fields of craftax 1.6's EnvParams with their defaults, but for the
# noise angles of world generation (tests check them against the installed
# craftax): static, so that listing settings (docs, the launchers' config)
# needs no craftax.
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
  """``batch_size`` streams of a Craftax game.

  ``reset(rng)`` -> ``(SuiteState, EnvTimestep)`` with observations
  ``[B, *obs shape]`` float32, step_type FIRST and ``info`` of zeros;
  ``step(state, actions [B] int32)`` steps every stream with craftax's
  ``step`` (no auto-reset), maps deaths to terminations and the time limit
  to truncations, and gives finished streams new worlds from the reset pool
  (module docstring).

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
    # craftax's new worlds hold weakly typed scalars, its stepped ones do
    # not: strong types keep ``step``'s input types the same after ``reset``
    # (no second compile) and in a ``lax.scan``.
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
    """One stream's step with a new world of its own where the episode
    ended: craftax's auto-reset, which ``step`` batches for
    ``reset_ratio=1`` (the base class's per-stream ``_step``, a vmap of
    this, is its reference in the tests)."""
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
    """``(env_state, obs)`` ``[B, ...]`` of the worlds finished streams get:
    their own (``reset_ratio=1``) or the pool's; generated only when some
    stream is ``done``."""
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
    env_id: one of ``ENV_IDS`` (with or without the ``"craftax/"`` prefix).
    batch_size: number of streams ``B`` (>= 1).
    **settings: ``reset_ratio`` and craftax's parameters (see the module
      docstring and ``env_specs()``).

  Returns:
    A jittable ``CraftaxEnvironment``.

  Raises:
    ValueError: for an unknown id or setting (naming the valid ones), an
      ill-typed or out-of-range value, or craftax not installed (a
      ``MissingPackageError`` naming the install command).
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
