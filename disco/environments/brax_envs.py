"""Brax environments as batched, jittable disco environments.

brax 0.14's environments are ``brax/<id>`` (``ENV_NAMES``;
``EXCLUDED_IDS`` says why others are not):

```python
env = brax_envs.make("ant", batch_size=64, backend="positional",
                     episode_length=1000)
```

Settings: ``backend`` (``BACKENDS``; the default ``"positional"`` is that of
brax's training notebook and purejaxrl's PPO; returns differ between
backends), ``episode_length`` (1000), and brax's constructor arguments with
simple defaults (``KWARG_DEFAULTS``). The time limit is a truncation (LAST,
discount 1); an episode brax ends (``done``) a termination (LAST, discount
0), also at the limit.

Actions: ``[B, D]`` float32, clipped to ``[-1, 1]``; observations ``[B,
obs_size]`` float32. A finished episode restarts from a fresh state drawn
with that step's key (not brax's ``AutoResetWrapper``'s replay of the first
start). brax is optional (``pip install -e '.[brax]'``), imported only when
built; without it ``make`` raises ``MissingPackageError``.
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
    brax_state: brax's ``State``, every leaf a strongly typed array.
    time: int32 steps taken in the current episode.
  """

  brax_state: Any
  time: types.Array


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
  """A bool, a finite number or a pair of them (settings are strict JSON)."""
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
  """Every leaf a strongly typed canonical array (brax returns some Python
  floats), so state types match after ``reset`` and ``step``."""
  return suite_utils.canonical_params(tree)


class BraxEnvironment(suite_utils.SuiteEnvironment):
  """``batch_size`` streams of a brax environment.

  Attributes:
    backend: brax's physics pipeline.
    episode_length: the time limit (``params`` holds it per stream).
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
    env_id: an id of ``ENV_IDS`` (``"brax/"`` prefix optional).
    batch_size: number of streams ``B`` (>= 1).
    **settings: ``backend``, ``episode_length`` and brax's constructor
      arguments (``env_specs()``).

  Raises:
    ValueError: for an unknown id, setting or backend, a bad value, or brax
      not installed (``MissingPackageError``).
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
    # brax warns at every build that it is no longer actively maintained.
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
