"""Action distributions: how a network's ``logits`` output ``[..., P]``
becomes actions.

  * ``Categorical(num_actions)``: int32 actions ``[...]``, ``P = A`` logits.
  * ``Gaussian(action_size, ...)``: float32 actions ``[..., D]``, ``P = 2
    D`` (mean, then log-std). With ``squash``, samples ``u`` map into the
    bounds by ``low + (tanh(u) + 1) (high - low) / 2``; without, the
    environment clips actions and rollouts keep the unclipped samples.

A policy is a frozen dataclass of static settings (a leafless pytree);
its functions broadcast over leading dimensions.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
import dataclasses
import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
  import distrax

LOG_STDS = ("state_independent", "state_dependent")
# Clip range of the log standard deviation (keeps exp(log_std) finite).
LOG_STD_RANGE = (-20.0, 2.0)
# Squashed actions are pulled this far inside (-1, 1) before atanh.
ATANH_MARGIN = 1e-6


class Policy(abc.ABC):
  """An action distribution family; see the module docstring."""

  is_continuous: bool

  @property
  @abc.abstractmethod
  def param_size(self) -> int:
    """``P``: the size of the network's ``logits`` output."""

  @property
  @abc.abstractmethod
  def action_shape(self) -> tuple[int, ...]:
    """Shape of one action: ``()`` or ``(D,)``."""

  @property
  @abc.abstractmethod
  def action_dtype(self) -> Any:
    """dtype of actions."""

  @abc.abstractmethod
  def sample(self, rng: jax.Array, params: jax.Array) -> jax.Array:
    """Actions ``[..., *action_shape]`` drawn from ``params`` ``[..., P]``."""

  @abc.abstractmethod
  def mode(self, params: jax.Array) -> jax.Array:
    """The most likely action ``[..., *action_shape]``."""

  @abc.abstractmethod
  def log_prob(self, params: jax.Array, actions: jax.Array) -> jax.Array:
    """``log pi(a)``: params ``[..., P]``, actions ``[..., *action_shape]``
    -> ``[...]``."""

  @abc.abstractmethod
  def entropy(self, params: jax.Array) -> jax.Array:
    """``[..., P]`` -> ``[...]``; see each family for what it is exactly."""

  @abc.abstractmethod
  def kl(self, params: jax.Array, other: jax.Array) -> jax.Array:
    """``KL(pi_params || pi_other)``, ``[...]``."""

  def tree_flatten(self):
    return (), self

  @classmethod
  def tree_unflatten(cls, aux, children):
    del children
    return aux


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Categorical(Policy):
  """A softmax over ``num_actions`` discrete actions."""

  num_actions: int
  is_continuous = False

  @property
  def param_size(self) -> int:
    return self.num_actions

  @property
  def action_shape(self) -> tuple[int, ...]:
    return ()

  @property
  def action_dtype(self) -> Any:
    return jnp.int32

  def sample(self, rng: jax.Array, params: jax.Array) -> jax.Array:
    import distrax  # pylint: disable=g-import-not-at-top

    return distrax.Softmax(logits=params).sample(seed=rng)

  def mode(self, params: jax.Array) -> jax.Array:
    return jnp.argmax(params, axis=-1).astype(jnp.int32)

  def log_prob(self, params: jax.Array, actions: jax.Array) -> jax.Array:
    import rlax  # pylint: disable=g-import-not-at-top

    return rlax.batched_index(jax.nn.log_softmax(params), actions)

  def entropy(self, params: jax.Array) -> jax.Array:
    """The exact entropy."""
    import distrax  # pylint: disable=g-import-not-at-top

    return distrax.Softmax(params).entropy()

  def kl(self, params: jax.Array, other: jax.Array) -> jax.Array:
    import rlax  # pylint: disable=g-import-not-at-top

    return rlax.categorical_kl_divergence(params, other)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Gaussian(Policy):
  """A diagonal Gaussian over ``action_size`` real action dimensions.

  Attributes:
    action_size: ``D``.
    minimum: ``D`` lower bounds (``-inf``: none).
    maximum: ``D`` upper bounds.
    squash: map samples into the bounds with ``tanh`` (finite bounds only).
    log_std: ``"state_independent"`` (one learnt vector, as purejaxrl's and
      Brax's PPO) or ``"state_dependent"`` (a network head).
    init_log_std: the initial log standard deviation.
  """

  action_size: int
  minimum: tuple[float, ...]
  maximum: tuple[float, ...]
  squash: bool = False
  log_std: str = LOG_STDS[0]
  init_log_std: float = 0.0
  is_continuous = True

  def __post_init__(self):
    if self.action_size < 1:
      raise ValueError(f"action_size must be >= 1, got {self.action_size}.")
    if len(self.minimum) != self.action_size or len(self.maximum) != (
        self.action_size
    ):
      raise ValueError(
          f"Gaussian bounds need {self.action_size} entries each, got "
          f"{len(self.minimum)} and {len(self.maximum)}."
      )
    if self.log_std not in LOG_STDS:
      raise ValueError(
          f"Unknown log_std {self.log_std!r}; use one of {', '.join(LOG_STDS)}."
      )
    if self.squash and not all(
        math.isfinite(lo) and math.isfinite(hi) and lo < hi
        for lo, hi in zip(self.minimum, self.maximum, strict=True)
    ):
      raise ValueError(
          "policy.squash=True maps actions into the environment's bounds, "
          f"which must be finite with minimum < maximum; got {self.minimum} "
          f"and {self.maximum}. Set policy.squash=False."
      )

  @property
  def param_size(self) -> int:
    return 2 * self.action_size

  @property
  def action_shape(self) -> tuple[int, ...]:
    return (self.action_size,)

  @property
  def action_dtype(self) -> Any:
    return jnp.float32

  def mean_and_log_std(self, params: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``[..., 2 D]`` -> the Gaussian's mean and log-std, ``[..., D]`` each."""
    mean, log_std = jnp.split(params, 2, axis=-1)
    return mean, jnp.clip(log_std, *LOG_STD_RANGE)

  def gaussian(self, params: jax.Array) -> distrax.MultivariateNormalDiag:
    """The Gaussian before any squashing."""
    mean, log_std = self.mean_and_log_std(params)
    import distrax  # pylint: disable=g-import-not-at-top

    return distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))

  def _half_range(self) -> tuple[jax.Array, jax.Array]:
    low = jnp.asarray(self.minimum, jnp.float32)
    high = jnp.asarray(self.maximum, jnp.float32)
    return (high + low) / 2.0, (high - low) / 2.0

  def _to_bounds(self, u: jax.Array) -> jax.Array:
    centre, half = self._half_range()
    return centre + half * jnp.tanh(u)

  def sample(self, rng: jax.Array, params: jax.Array) -> jax.Array:
    u = self.gaussian(params).sample(seed=rng)
    return self._to_bounds(u) if self.squash else u

  def mode(self, params: jax.Array) -> jax.Array:
    mean, _ = self.mean_and_log_std(params)
    return self._to_bounds(mean) if self.squash else mean

  def log_prob(self, params: jax.Array, actions: jax.Array) -> jax.Array:
    """The density of ``actions`` as sampled (with ``squash``: the Gaussian's at
    the ``atanh`` of the rescaled action, change-of-variables corrected)."""
    if not self.squash:
      return self.gaussian(params).log_prob(actions)
    centre, half = self._half_range()
    y = jnp.clip(
        (actions - centre) / half, -1.0 + ATANH_MARGIN, 1.0 - ATANH_MARGIN
    )
    u = jnp.arctanh(y)
    log_det = jnp.sum(
        jnp.log(half) + 2.0 * (np.log(2.0) - u - jax.nn.softplus(-2.0 * u)),
        axis=-1,
    )
    return self.gaussian(params).log_prob(u) - log_det

  def entropy(self, params: jax.Array) -> jax.Array:
    """The exact entropy of the Gaussian before any squashing."""
    return self.gaussian(params).entropy()

  def kl(self, params: jax.Array, other: jax.Array) -> jax.Array:
    """KL of the Gaussians before squashing (equal to the squashed ones')."""
    return self.gaussian(params).kl_divergence(self.gaussian(other))


def make_policy(
    action_spec: Any, settings: Mapping[str, Any] | None = None
) -> Policy:
  """The policy for an environment's ``action_spec``.

  Args:
    action_spec: integer, shape ``()``: ``Categorical``; floating, shape
      ``[D]``: ``Gaussian`` with its bounds.
    settings: ``Gaussian``'s ``squash``, ``log_std`` and ``init_log_std``
      (none for discrete actions).

  Raises:
    ValueError: for an unknown setting or value, or settings for discrete
      actions.
  """
  settings = dict(settings or {})
  known = {"squash", "log_std", "init_log_std"}
  unknown = sorted(set(settings) - known)
  if unknown:
    raise ValueError(
        f"Unknown policy setting(s) {unknown}; valid: {', '.join(sorted(known))}."
    )
  dtype = np.dtype(action_spec.dtype)
  if not np.issubdtype(dtype, np.floating):
    if settings:
      raise ValueError(
          f"The policy settings {sorted(settings)} are for continuous "
          "actions; this environment's actions are discrete (a categorical "
          "policy, which has none): leave them unset."
      )
    return Categorical(int(action_spec.maximum) - int(action_spec.minimum) + 1)
  shape = tuple(action_spec.shape)
  if len(shape) != 1:
    raise ValueError(
        f"Continuous actions must be vectors [D]; got shape {shape}."
    )
  size = shape[0]
  low = np.broadcast_to(
      np.asarray(getattr(action_spec, "minimum", -np.inf), np.float64), shape
  )
  high = np.broadcast_to(
      np.asarray(getattr(action_spec, "maximum", np.inf), np.float64), shape
  )
  return Gaussian(
      action_size=size,
      minimum=tuple(float(x) for x in low),
      maximum=tuple(float(x) for x in high),
      squash=bool(settings.get("squash", False)),
      log_std=str(settings.get("log_std", LOG_STDS[0])),
      init_log_std=float(settings.get("init_log_std", 0.0)),
  )
