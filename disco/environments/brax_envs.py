"""Brax environments as batched, jittable ``disco`` environments.

The locomotion and manipulation environments of the ``brax`` package (0.14)
are available as ``brax/<id>`` (``ENV_NAMES``): ``brax/ant``,
``brax/halfcheetah``, ``brax/hopper``, ``brax/walker2d``, ``brax/humanoid``,
``brax/humanoidstandup``, ``brax/inverted_pendulum``,
``brax/inverted_double_pendulum``, ``brax/reacher`` and ``brax/pusher``.
(brax's ``swimmer`` is left out: its fluid forces call ``jnp.clip`` with
the ``a_min`` keyword, which JAX 0.10 no longer has; ``fast`` is brax's test
stub.)

  env = brax_envs.make("ant", batch_size=64, backend="positional",
                       episode_length=1000)

Settings:

  * ``backend``: brax's physics pipeline, one of ``BACKENDS``. The default,
    ``"positional"`` (position-based dynamics), is the backend of brax's
    own training notebook (``notebooks/training.ipynb``) and of purejaxrl's
    ``ppo_continuous_action.py`` (its ``BraxGymnaxWrapper``), so that returns
    compare with theirs; brax's notebook orders its pipelines from the most
    realistic and slowest to the least realistic and fastest as
    ``generalized``, ``positional``, ``spring``, and ``positional`` is a
    middle that suits a CPU. ``"mjx"`` runs MuJoCo's own solver in JAX
    (MuJoCo XLA), is written for accelerators and compiles the largest
    programs. The environments differ between backends (brax changes time
    steps, frame skips and gears per backend), so returns on one backend do
    not carry over to another (``reference_scores`` holds the default
    backend's).
  * ``episode_length`` (default 1000, as brax's training wrappers): the time
    limit. An episode that reaches it ends as a *truncation* (LAST with
    discount 1, as brax's ``EpisodeWrapper`` marks it in
    ``info["truncation"]``); an episode brax ends itself (``done``: a fallen
    hopper, walker or humanoid, a tipped pendulum) is a *termination* (LAST
    with discount 0), also at the time limit.
  * the constructor arguments of brax's environment class with simple
    defaults (booleans, finite numbers, pairs of them), e.g. ``ctrl_cost_weight``,
    ``healthy_reward``, ``terminate_when_unhealthy``, ``healthy_z_range`` and
    ``reset_noise_scale`` of ``brax/ant``; ``KWARG_DEFAULTS`` holds them with
    brax 0.14's defaults (tests check it against the installed brax), so that
    the settings are known without brax.

Actions are ``[B, D]`` float32 in ``[-1, 1]`` per dimension, ``D`` brax's
``action_size``; the adapter clips them to that box before brax sees them
(brax scales them to its actuators' ranges). Observations are brax's
``[obs_size]`` vectors, float32.

Resets are automatic and fresh: the step that ends an episode returns the
first observation of a new episode drawn with that step's key (brax's own
``AutoResetWrapper`` instead restarts every episode of a stream from the
state its first ``reset`` drew). Everything is determined by the keys:
``reset(rng)`` splits one key per stream and step ``t`` of a stream draws its
reset from ``fold_in(stream key, t)`` (``suite_utils``).

brax's maintainers no longer develop its physics pipelines and environments
actively (brax warns so at every build; the adapter silences that warning)
and point to MuJoCo Playground; brax 0.14 installs and runs beside disco's
JAX. brax is an optional dependency (``pip install -e '.[brax]'``); it is imported
only when an environment is built, so ``import disco``, listings and
settings need no brax, and its absence is one line naming the install
command (``MissingPackageError``, a ``ValueError`` too).
"""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import functools
import inspect
import io
import math
import numbers
from typing import Any
import warnings

import chex
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base
from disco.environments import suite_utils

PREFIX = "brax/"
# The environments of brax 0.14's registry that disco serves (tests build
# every one and check the list against the installed brax).
ENV_IDS: tuple[str, ...] = (
    "ant",
    "halfcheetah",
    "hopper",
    "walker2d",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "reacher",
    "pusher",
)
ENV_NAMES: tuple[str, ...] = tuple(PREFIX + i for i in ENV_IDS)
# brax's registry entries left out, and why (tests check the two lists
# cover brax's registry).
EXCLUDED_IDS: dict[str, str] = {
    "swimmer": "its fluid forces call jnp.clip(a_min=...), gone in JAX 0.10",
    "fast": "brax's test stub",
}
BACKENDS: tuple[str, ...] = ("positional", "generalized", "spring", "mjx")
DEFAULT_BACKEND = "positional"
DEFAULT_EPISODE_LENGTH = 1000
INSTALL = (
    "pip install -e '.[brax]' (from a checkout) or "
    "pip install 'disco-rl-harness[brax]'"
)
# Constructor arguments that are not settings of their own (ant's
# use_contact_forces=True raises NotImplementedError in brax 0.14).
_NOT_KWARGS = ("self", "backend", "use_contact_forces")
_EXCLUDE_POSITIONS = "exclude_current_positions_from_observation"
# brax 0.14's constructor arguments with simple defaults, per environment
# (package_kwarg_defaults reads them from the installed brax).
KWARG_DEFAULTS: dict[str, dict[str, Any]] = {
    "ant": {
        "ctrl_cost_weight": 0.5,
        "contact_cost_weight": 5e-4,
        "healthy_reward": 1.0,
        "terminate_when_unhealthy": True,
        "healthy_z_range": (0.2, 1.0),
        "contact_force_range": (-1.0, 1.0),
        "reset_noise_scale": 0.1,
        _EXCLUDE_POSITIONS: True,
    },
    "halfcheetah": {
        "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 0.1,
        "reset_noise_scale": 0.1,
        _EXCLUDE_POSITIONS: True,
    },
    "hopper": {
        "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 1e-3,
        "healthy_reward": 1.0,
        "terminate_when_unhealthy": True,
        "healthy_state_range": (-100.0, 100.0),
        # (healthy_z_range=(0.7, inf) is not a setting: no infinities.)
        "healthy_angle_range": (-0.2, 0.2),
        "reset_noise_scale": 5e-3,
        _EXCLUDE_POSITIONS: True,
    },
    "walker2d": {
        "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 1e-3,
        "healthy_reward": 1.0,
        "terminate_when_unhealthy": True,
        "healthy_z_range": (0.8, 2.0),
        "healthy_angle_range": (-1.0, 1.0),
        "reset_noise_scale": 5e-3,
        _EXCLUDE_POSITIONS: True,
    },
    "humanoid": {
        "forward_reward_weight": 1.25,
        "ctrl_cost_weight": 0.1,
        "healthy_reward": 5.0,
        "terminate_when_unhealthy": True,
        "healthy_z_range": (1.0, 2.0),
        "reset_noise_scale": 1e-2,
        _EXCLUDE_POSITIONS: True,
    },
    "humanoidstandup": {},
    "inverted_pendulum": {},
    "inverted_double_pendulum": {},
    "reacher": {},
    "pusher": {},
}


@chex.dataclass(frozen=True)
class BraxParams:
  """What ``step`` reads per stream (``[B]`` in a ``SuiteState``).

  Attributes:
    episode_length: int32 time limit (steps) of the stream's episodes.
  """

  episode_length: types.Array


@chex.dataclass(frozen=True)
class BraxStreamState:
  """One stream's state (``[B, ...]`` in a ``SuiteState``).

  Attributes:
    brax_state: brax's ``State`` (its physics state, observation, reward,
      done flag, metrics and info), every leaf a strongly typed array.
    time: int32 steps taken in the current episode.
  """

  brax_state: Any
  time: types.Array


MissingPackageError = suite_utils.MissingPackageError


def _import_envs(env_id: str):
  """``brax.envs``, or ``MissingPackageError`` naming the install command."""
  # MuJoCo's MJX prints a line to stdout when its optional NVIDIA Warp
  # backend is absent, on every import; it is not about disco's run.
  with suite_utils.requires_package(PREFIX + env_id, "brax", f"{INSTALL}."):
    with contextlib.redirect_stdout(io.StringIO()):
      from brax import envs  # pylint: disable=g-import-not-at-top
  return envs


def _strip(env_id: str) -> str:
  return env_id.removeprefix(PREFIX)


def _check_id(env_id: str) -> str:
  env_id = _strip(env_id)
  if env_id not in ENV_IDS:
    if env_id in EXCLUDED_IDS:
      raise ValueError(
          f"brax environment {env_id!r} is not served by disco: "
          f"{EXCLUDED_IDS[env_id]}. Valid ids: {', '.join(ENV_IDS)}."
      )
    raise suite_utils.unknown_name_error("brax environment", env_id, ENV_IDS)
  return env_id


def _is_simple(value: Any) -> bool:
  """A bool, a finite number or a pair of finite numbers (what a setting
  may be: run folders keep settings as strict JSON, without infinities)."""
  if isinstance(value, bool):
    return True
  if isinstance(value, tuple):
    return len(value) == 2 and all(
        not isinstance(v, bool) and _is_simple(v) for v in value
    )
  return isinstance(value, numbers.Real) and math.isfinite(value)


def package_kwarg_defaults(env_id: str) -> dict[str, Any]:
  """The installed brax's constructor arguments of ``env_id`` with simple
  defaults (what ``KWARG_DEFAULTS`` must hold)."""
  envs = _import_envs(env_id)
  cls = envs._envs[env_id]  # pylint: disable=protected-access
  params = inspect.signature(cls.__init__).parameters.values()
  return {
      p.name: p.default
      for p in params
      if p.name not in _NOT_KWARGS
      and p.kind
      in (
          inspect.Parameter.POSITIONAL_OR_KEYWORD,
          inspect.Parameter.KEYWORD_ONLY,
      )
      and _is_simple(p.default)
  }


def _defaults(env_id: str) -> dict[str, Any]:
  """Every setting of ``env_id`` with its default."""
  return {
      "backend": DEFAULT_BACKEND,
      "episode_length": DEFAULT_EPISODE_LENGTH,
      **KWARG_DEFAULTS[env_id],
  }


def _check_settings(name: str, env_id: str, settings: dict[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad setting and the fix."""
  defaults = _defaults(env_id)
  suite_utils.check_setting_names(name, settings, defaults)
  backend = settings.get("backend", DEFAULT_BACKEND)
  if backend not in BACKENDS:
    raise ValueError(
        f"Setting backend={backend!r} of environment {name!r} must be one "
        f"of brax's backends {', '.join(BACKENDS)}."
    )
  length = settings.get("episode_length", DEFAULT_EPISODE_LENGTH)
  if (
      isinstance(length, bool)
      or not isinstance(length, numbers.Integral)
      or length < 1
  ):
    raise ValueError(
        f"Setting episode_length={length!r} of environment {name!r} must be "
        "an integer >= 1."
    )
  for key, value in settings.items():
    default = defaults[key]
    if isinstance(default, tuple):
      if not isinstance(value, (tuple, list)) or not _is_simple(tuple(value)):
        raise ValueError(
            f"Setting {key}={value!r} of environment {name!r} must be a "
            f"pair of numbers (default {default!r})."
        )
    elif key not in ("backend", "episode_length"):
      suite_utils.check_setting_value(name, key, value, default)


def _strong(tree: Any) -> Any:
  """Every leaf a strongly typed array of a canonical dtype (brax returns
  some rewards and flags as Python floats), so that the state's types are
  the same after ``reset`` and after ``step``."""
  return suite_utils.canonical_params(tree)


class BraxEnvironment(suite_utils.SuiteEnvironment):
  """``batch_size`` streams of a brax environment.

  ``reset(rng)`` -> ``(SuiteState, EnvTimestep)`` with observations
  ``[B, obs_size]`` float32 and step_type FIRST; ``step(state, actions
  [B, D] float32)`` clips the actions to ``[-1, 1]``, steps every stream
  with brax's ``step``, ends episodes that brax ends (LAST, discount 0) or
  that reach ``episode_length`` (LAST, discount 1) and starts fresh ones.

  Attributes:
    backend: brax's physics pipeline.
    episode_length: the time limit of every stream's episodes (``params``
      holds it per stream).
  """

  def __init__(
      self,
      batch_size: int,
      package_env: Any,
      params: BraxParams,
      name: str,
  ):
    self.backend = package_env.backend
    self.episode_length = int(params.episode_length)
    super().__init__(batch_size, package_env, params, name)

  def _package_action_bounds(self):
    size = int(self.package_env.action_size)
    return -np.ones(size, np.float32), np.ones(size, np.float32)

  def _reset_stream(self, params, key):
    del params
    brax_state = _strong(self.package_env.reset(key))
    state = BraxStreamState(
        brax_state=brax_state, time=jnp.zeros((), jnp.int32)
    )
    return state, brax_state.obs

  def _step_stream(self, params, env_state, action, key):
    stepped = _strong(self.package_env.step(env_state.brax_state, action))
    time = env_state.time + 1
    terminated = stepped.done > 0.5
    truncated = time >= params.episode_length
    fresh, _ = self._reset_stream(params, key)
    after = BraxStreamState(brax_state=stepped, time=time)
    state = jax.tree.map(
        lambda new, old: jnp.where(terminated | truncated, new, old),
        fresh,
        after,
    )
    return (
        state,
        state.brax_state.obs,
        stepped.reward,
        terminated,
        truncated,
    )


def make(env_id: str, batch_size: int, **settings: Any) -> BraxEnvironment:
  """Builds ``batch_size`` streams of brax environment ``env_id``.

  Args:
    env_id: a brax id such as ``"ant"`` (with or without the ``"brax/"``
      prefix); ``ENV_IDS`` lists them.
    batch_size: number of streams ``B`` (>= 1).
    **settings: ``backend``, ``episode_length`` and brax's constructor
      arguments (see ``env_specs()``).

  Returns:
    A jittable ``BraxEnvironment``.

  Raises:
    ValueError: for an unknown id, setting or backend (naming the valid
      ones), an ill-typed value, or a missing ``brax`` package
      (``MissingPackageError``, naming the install command).
  """
  env_id = _check_id(env_id)
  name = PREFIX + env_id
  _check_settings(name, env_id, settings)
  envs = _import_envs(env_id)
  kwargs = {
      k: tuple(v) if isinstance(v, list) else v
      for k, v in settings.items()
      if k not in ("backend", "episode_length")
  }
  with warnings.catch_warnings():
    # brax warns at every build that it is no longer actively maintained
    # (the module docstring says so once).
    warnings.filterwarnings("ignore", "Brax System", UserWarning)
    package_env = envs.get_environment(
        env_id, backend=settings.get("backend", DEFAULT_BACKEND), **kwargs
    )
  params = BraxParams(
      episode_length=np.int32(
          settings.get("episode_length", DEFAULT_EPISODE_LENGTH)
      )
  )
  return BraxEnvironment(batch_size, package_env, params, name)


def env_specs() -> (
    dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]]
):
  """``"brax/<id>"`` -> ``(factory(batch_size, **settings), defaults)``
  (without importing brax)."""
  return {
      PREFIX + env_id: (functools.partial(make, env_id), _defaults(env_id))
      for env_id in ENV_IDS
  }
