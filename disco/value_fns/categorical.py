"""Scalar <-> categorical ("2-hot") value representations.

A categorical head outputs logits over ``num_bins`` evenly spaced support
points in ``[-max_abs_value, max_abs_value]``. A scalar maps to the 2-hot
distribution on its two neighbouring points (clipped to the range), a
distribution back to its expectation. With ``nonlinear_transform`` the head
predicts ``h(v)``, ``h = rlax.SIGNED_HYPERBOLIC_PAIR[0]``, and decoding
applies its inverse.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from disco import types


def _check_max_abs_value(max_abs_value: float | None) -> None:
  if max_abs_value is None or max_abs_value <= 0.0:
    raise ValueError(
        "A categorical value representation needs `max_abs_value`, the "
        "largest absolute value its support can represent (> 0); got "
        f"{max_abs_value}."
    )


def logits_to_scalar(logits: types.Array, max_abs_value: float) -> types.Array:
  """Expected value of logits ``[..., num_bins]`` over the support.

  Args:
    logits: ``[..., num_bins]``.
    max_abs_value: half-width of the support (> 0).

  Returns:
    ``[...]`` expectations.

  Raises:
    ValueError: if ``max_abs_value`` is None or <= 0.
  """
  _check_max_abs_value(max_abs_value)
  import rlax  # pylint: disable=g-import-not-at-top

  return rlax.transform_from_2hot(
      jax.nn.softmax(logits),
      min_value=-max_abs_value,
      max_value=max_abs_value,
      num_bins=logits.shape[-1],
  )


def scalar_to_probs(
    value: types.Array, num_bins: int, max_abs_value: float
) -> types.Array:
  """2-hot distribution over the support whose mean is ``value``.

  Args:
    value: ``[...]`` floats, clipped to ``[-max_abs_value, max_abs_value]``.
    num_bins: number of support points.
    max_abs_value: half-width of the support (> 0).

  Returns:
    ``[..., num_bins]`` probabilities, non-zero on at most two adjacent bins.
  """
  _check_max_abs_value(max_abs_value)
  import rlax  # pylint: disable=g-import-not-at-top

  return rlax.transform_to_2hot(
      value,
      min_value=-max_abs_value,
      max_value=max_abs_value,
      num_bins=num_bins,
  )


@dataclasses.dataclass(frozen=True)
class ValueHead:
  """How a value head's outputs encode scalar values.

  Attributes:
    categorical: the head outputs ``num_bins`` logits (last axis), not a
      scalar.
    max_abs_value: half-width of the categorical support (> 0; required with
      ``categorical``).
    nonlinear_transform: the head predicts signed-hyperbolic squashed values.
  """

  categorical: bool = False
  max_abs_value: float | None = None
  nonlinear_transform: bool = False

  def __post_init__(self):
    if self.categorical:
      _check_max_abs_value(self.max_abs_value)

  def decode(self, net_out: types.Array) -> types.Array:
    """``[T, B, 1 or num_bins]`` head outputs -> ``[T, B]`` scalar values."""
    if net_out.ndim != 3:
      raise ValueError(
          "Expected value outputs of shape [T, B, 1 or num_bins], got shape "
          f"{net_out.shape}."
      )
    if self.categorical:
      values = logits_to_scalar(net_out, self.max_abs_value)
    else:
      values = jnp.squeeze(net_out, axis=2)
    if self.nonlinear_transform:
      import rlax  # pylint: disable=g-import-not-at-top

      values = rlax.SIGNED_HYPERBOLIC_PAIR[1](values)
    return values

  def decode_actions(self, net_out: types.Array) -> types.Array:
    """``[T, B, A, 1 or num_bins]`` per-action outputs -> ``[T, B, A]``."""
    if net_out.ndim != 4:
      raise ValueError(
          "Expected action-value outputs of shape [T, B, A, 1 or num_bins], "
          f"got shape {net_out.shape}."
      )
    return jax.vmap(self.decode, in_axes=2, out_axes=2)(net_out)

  def encode_target(self, target: types.Array) -> types.Array:
    """``[T, B]`` scalar targets in the space the head predicts in."""
    if self.nonlinear_transform:
      import rlax  # pylint: disable=g-import-not-at-top

      return rlax.SIGNED_HYPERBOLIC_PAIR[0](target)
    return target
