"""Shared machinery of the adapters for third-party jittable suites:
``SuiteEnvironment``, which batches a package's pure single-stream
environment, and the adapters' shared errors."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
import contextlib
import difflib
import numbers
from typing import Any

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base


@chex.dataclass(frozen=True)
class SuiteState:
  """State of ``B`` streams (every leaf ``[B, ...]``: streams can be copied,
  gathered or given different parameters).

  Attributes:
    env_state: the package's state.
    params: the package's parameters, per stream; ``step`` uses these.
    rng: one PRNG key per stream.
    num_steps: ``[B]`` uint32 steps taken; step ``t`` draws from
      ``fold_in(rng, t)``.
  """

  env_state: Any
  params: Any
  rng: types.Array
  num_steps: types.Array


def canonical_params(params: Any) -> Any:
  """``params`` with every leaf a JAX array of canonical, strong dtype, so
  state dtypes match after ``reset`` and ``step``."""

  def convert(leaf):
    dtype = leaf.dtype if hasattr(leaf, "dtype") else np.result_type(leaf)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    return jnp.asarray(leaf, dtype=dtype)

  return jax.tree.map(convert, params)


def broadcast_leaves(tree: Any, batch_size: int) -> Any:
  """Every leaf ``[...]`` -> ``[batch_size, ...]`` (copies)."""
  return jax.tree.map(
      lambda x: jnp.broadcast_to(x, (batch_size,) + jnp.shape(x)), tree
  )


def transition_timestep(
    observation: types.Array,
    reward: types.Array,
    terminated: types.Array,
    truncated: types.Array,
) -> types.EnvTimestep:
  """One stream's ``EnvTimestep`` of a transition.

  Returns:
    LAST if ``terminated`` or ``truncated`` (time limit), else MID; discount
    0 if terminated (even if also truncated), else 1; float32 observation.
  """
  terminated = jnp.asarray(terminated).astype(bool)
  truncated = jnp.asarray(truncated).astype(bool)
  done = jnp.logical_or(terminated, truncated)
  return types.EnvTimestep(
      observation=jnp.asarray(observation, jnp.float32),
      reward=jnp.asarray(reward, jnp.float32),
      step_type=jnp.where(done, types.LAST, types.MID).astype(jnp.int32),
      discount=jnp.where(terminated, 0.0, 1.0).astype(jnp.float32),
  )


def first_timestep(observation: types.Array) -> types.EnvTimestep:
  """One stream's FIRST ``EnvTimestep``: reward 0, discount 1."""
  return types.EnvTimestep(
      observation=jnp.asarray(observation, jnp.float32),
      reward=jnp.zeros((), jnp.float32),
      step_type=jnp.asarray(types.FIRST, jnp.int32),
      discount=jnp.ones((), jnp.float32),
  )


class SuiteEnvironment(base.Environment, abc.ABC):
  """``B`` streams of a package's pure single-stream environment.

  Subclasses implement ``_reset_stream``, ``_step_stream`` and
  ``_num_package_actions`` (discrete, ``[B]`` int32 actions) or
  ``_package_action_bounds`` (continuous, ``[B, D]`` float32 actions clipped
  to the bounds). Observations are float32.

  Attributes:
    name: the disco name, e.g. ``"gymnax/CartPole-v1"``.
    package_env: the package's environment.
    params: what ``reset`` gives every stream (canonical arrays).
    package_params: the parameters as the package built them.
  """

  is_jittable = True

  def __init__(self, batch_size: int, package_env: Any, params: Any, name: str):
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, numbers.Integral)
        or batch_size < 1
    ):
      raise ValueError(
          f"{name}: batch_size={batch_size!r} must be an integer >= 1."
      )
    self.batch_size = int(batch_size)
    self.name = name
    self.package_env = package_env
    self.package_params = params
    self.params = canonical_params(params)
    bounds = self._package_action_bounds()
    if bounds is None:
      self._num_actions = int(self._num_package_actions())
      self._action_bounds = None
    else:
      self._num_actions = None
      self._action_bounds = _check_bounds(name, *bounds)
    self._reset = jax.jit(jax.vmap(self._reset_one))
    self._step = jax.jit(jax.vmap(self._step_one))
    obs = jax.eval_shape(
        self._reset_stream, self.params, jax.random.PRNGKey(0)
    )[1]
    self._observation_shape = tuple(jnp.shape(obs))

  def _num_package_actions(self) -> int:
    """The number of discrete actions (asked only without action bounds)."""
    raise NotImplementedError(
        f"{type(self).__name__} implements neither _num_package_actions "
        "nor _package_action_bounds."
    )

  def _package_action_bounds(
      self,
  ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(minimum [D], maximum [D])`` of continuous actions, or None."""
    return None

  @abc.abstractmethod
  def _reset_stream(
      self, params: Any, key: types.Array
  ) -> tuple[Any, types.Array]:
    """One stream: ``(package state, first observation)`` from ``key``."""

  @abc.abstractmethod
  def _step_stream(
      self, params: Any, env_state: Any, action: types.Array, key: types.Array
  ) -> tuple[Any, types.Array, types.Array, types.Array, types.Array]:
    """One stream's step with automatic reset.

    Args:
      params: the stream's package parameters.
      env_state: the stream's package state.
      action: int32 scalar, or float32 ``[D]`` already clipped.
      key: a fresh PRNG key (for the step and a reset).

    Returns:
      ``(state, observation, reward, terminated, truncated)``, after a reset
      where the episode ended.
    """

  def _reset_one(self, params, rng):
    next_rng, key = jax.random.split(rng)
    env_state, obs = self._reset_stream(params, key)
    state = SuiteState(
        env_state=env_state,
        params=params,
        rng=next_rng,
        num_steps=jnp.zeros((), jnp.uint32),
    )
    return state, first_timestep(obs)

  def _step_one(self, state, action):
    if self._action_bounds is not None:
      action = jnp.clip(action, *self._action_bounds)
    key = jax.random.fold_in(state.rng, state.num_steps)
    env_state, obs, reward, terminated, truncated = self._step_stream(
        state.params, state.env_state, action, key
    )
    timestep = transition_timestep(obs, reward, terminated, truncated)
    return (
        state.replace(env_state=env_state, num_steps=state.num_steps + 1),
        timestep,
    )

  def reset(self, rng: types.Array) -> tuple[SuiteState, types.EnvTimestep]:
    """Starts ``B`` episodes from one key (split into ``B`` stream keys)."""
    params = broadcast_leaves(self.params, self.batch_size)
    return self._reset(params, jax.random.split(rng, self.batch_size))

  def step(
      self, state: SuiteState, actions: types.Array
  ) -> tuple[SuiteState, types.EnvTimestep]:
    """Applies ``[B]`` int actions in ``[0, num_actions)``, or ``[B, D]`` float
    actions (clipped to the spec's bounds)."""
    if self._action_bounds is not None:
      actions = jnp.asarray(actions, jnp.float32)
      chex.assert_shape(
          actions, (self.batch_size,) + self._action_bounds[0].shape
      )
      return self._step(state, actions)
    actions = jnp.asarray(actions, jnp.int32)
    chex.assert_shape(actions, (self.batch_size,))
    return self._step(state, actions)

  def observation_spec(self) -> specs.Array:
    return specs.Array(self._observation_shape, np.float32, name="observation")

  def action_spec(self) -> specs.BoundedArray:
    if self._action_bounds is not None:
      minimum, maximum = self._action_bounds
      return specs.BoundedArray(
          minimum.shape, np.float32, minimum, maximum, name="action"
      )
    return specs.BoundedArray(
        (), np.int32, 0, self._num_actions - 1, name="action"
    )

  def __repr__(self) -> str:
    return f"{type(self).__name__}({self.name!r}, batch_size={self.batch_size})"


def _check_bounds(
    name: str, minimum: Any, maximum: Any
) -> tuple[np.ndarray, np.ndarray]:
  """Action bounds as float32 ``[D]`` arrays (scalars broadcast).

  Raises:
    ValueError: unless finite with ``minimum <= maximum``.
  """
  minimum = np.asarray(minimum, np.float32)
  maximum = np.asarray(maximum, np.float32)
  minimum, maximum = np.broadcast_arrays(
      np.atleast_1d(minimum), np.atleast_1d(maximum)
  )
  if (
      minimum.ndim != 1
      or not np.all(np.isfinite(minimum))
      or not np.all(np.isfinite(maximum))
      or np.any(minimum > maximum)
  ):
    raise ValueError(
        f"{name}: continuous action bounds must be finite vectors [D] with "
        f"minimum <= maximum, got {minimum} and {maximum}."
    )
  return minimum.copy(), maximum.copy()


# ------------------------------------------------------------- errors ----


def unknown_name_error(
    kind: str, name: str, valid: Sequence[str]
) -> ValueError:
  """A ``ValueError`` for an unknown ``name``, naming close matches."""
  close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
  hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
  return ValueError(
      f"Unknown {kind} {name!r}.{hint} Valid ids: {', '.join(valid)}."
  )


def check_setting_names(
    env_name: str, settings: Mapping[str, Any], accepted: Iterable[str]
) -> None:
  """Raises ``ValueError`` naming unknown settings and the accepted ones."""
  accepted = sorted(accepted)
  unknown = sorted(set(settings) - set(accepted))
  if unknown:
    raise ValueError(
        f"Unknown setting(s) {unknown} for environment {env_name!r}; valid "
        f"settings are {accepted}."
    )


def check_setting_value(
    env_name: str, key: str, value: Any, default: Any
) -> None:
  """Raises ``ValueError`` unless ``value`` has the type of ``default`` (bool,
  integer, real, str, or an array of its shape; a None default accepts
  anything)."""
  if default is None:
    return
  if isinstance(default, (bool, np.bool_)):
    ok, what = isinstance(value, (bool, np.bool_)), "a bool"
  elif isinstance(default, numbers.Integral):
    ok = isinstance(value, numbers.Integral) and not isinstance(
        value, (bool, np.bool_)
    )
    what = "an integer"
  elif isinstance(default, numbers.Real):
    ok = isinstance(value, numbers.Real) and not isinstance(
        value, (bool, np.bool_)
    )
    what = "a real number"
  elif isinstance(default, str):
    ok, what = isinstance(value, str), "a string"
  elif hasattr(default, "shape") and np.ndim(default) > 0:
    try:
      ok = np.shape(np.asarray(value)) == tuple(default.shape)
    except (TypeError, ValueError):
      ok = False
    what = f"an array of shape {tuple(default.shape)}"
  else:
    return
  if not ok:
    raise ValueError(
        f"Setting {key}={value!r} of environment {env_name!r} must be "
        f"{what} (default {default!r})."
    )


class MissingPackageError(ImportError, ValueError):
  """An optional suite's package is not installed; also a ``ValueError``, so
  the launchers report it as bad input (one line, exit status 2)."""


@contextlib.contextmanager
def requires_package(
    env_name: str, package: str, install: str
) -> Iterator[None]:
  """Turns a ``ModuleNotFoundError`` inside into a ``MissingPackageError``
  naming ``install``."""
  try:
    yield
  except ModuleNotFoundError as e:
    missing = f"module {e.name!r} is missing" if e.name else str(e)
    raise MissingPackageError(
        f"Environment {env_name!r} needs the package {package!r} ({missing}):"
        f" {install}"
    ) from e
