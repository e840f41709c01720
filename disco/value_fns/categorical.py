"""Scalar <-> categorical ("2-hot") value representations and output decoding.

A categorical value head outputs logits over ``num_bins`` evenly spaced
support points spanning ``[-max_abs_value, max_abs_value]``; with
``num_bins = 2 * max_abs_value + 1`` the support points are the integers.
A scalar maps to the 2-hot distribution that puts its mass on the two
neighbouring support points (values outside the range are clipped), and a
distribution maps back to its expectation.

Value heads may also be trained in a squashed space: with
``nonlinear_transform`` the network predicts ``h(v)`` where ``h`` is the
signed hyperbolic transform (``rlax.SIGNED_HYPERBOLIC_PAIR[0]``), and decoding
applies its inverse (``rlax.SIGNED_HYPERBOLIC_PAIR[1]``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import rlax

from disco import types

Array = types.Array


def check_categorical_args(categorical: bool, max_abs_value: float | None):
  """Raises ValueError if a categorical head is requested without a range."""
  if categorical and max_abs_value is None:
    raise ValueError(
        'A categorical value representation needs `max_abs_value` (the '
        'largest absolute value its support can represent), got None.'
    )


def _check_max_abs_value(max_abs_value: float) -> None:
  if max_abs_value is None or max_abs_value <= 0.0:
    raise ValueError(
        f'`max_abs_value` must be a positive number, got {max_abs_value}.'
    )


def logits_to_scalar(logits: Array, max_abs_value: float) -> Array:
  """Expected value of a categorical distribution over the value support.

  Args:
    logits: ``[..., num_bins]`` unnormalised log-probabilities over support
      points evenly spaced in ``[-max_abs_value, max_abs_value]``.
    max_abs_value: half-width of the support (> 0).

  Returns:
    ``[...]`` expectations ``sum_i softmax(logits)_i * z_i``.
  """
  _check_max_abs_value(max_abs_value)
  return rlax.transform_from_2hot(
      jax.nn.softmax(logits),
      min_value=-max_abs_value,
      max_value=max_abs_value,
      num_bins=logits.shape[-1],
  )


def scalar_to_probs(value: Array, num_bins: int, max_abs_value: float) -> Array:
  """2-hot distribution over the value support whose mean is ``value``.

  Args:
    value: ``[...]`` float scalars; clipped to ``[-max_abs_value,
      max_abs_value]``.
    num_bins: number of support points.
    max_abs_value: half-width of the support (> 0).

  Returns:
    ``[..., num_bins]`` probabilities, non-zero on at most two adjacent bins.
  """
  _check_max_abs_value(max_abs_value)
  return rlax.transform_to_2hot(
      value,
      min_value=-max_abs_value,
      max_value=max_abs_value,
      num_bins=num_bins,
  )


def scalar_values(
    net_out: Array,
    categorical: bool = False,
    max_abs_value: float | None = None,
    nonlinear_transform: bool = False,
) -> Array:
  """Decodes value-head outputs into scalar values.

  Args:
    net_out: ``[T, B, 1]`` scalar outputs, or ``[T, B, num_bins]`` logits when
      ``categorical``.
    categorical: whether ``net_out`` holds logits over the value support.
    max_abs_value: half-width of the categorical support; required when
      ``categorical``.
    nonlinear_transform: whether the head predicts signed-hyperbolically
      squashed values (the inverse transform is then applied).

  Returns:
    ``[T, B]`` scalar values.
  """
  if net_out.ndim != 3:
    raise ValueError(
        f'Expected value outputs of shape [T, B, 1 or num_bins], got shape '
        f'{net_out.shape}.'
    )
  check_categorical_args(categorical, max_abs_value)
  if categorical:
    values = logits_to_scalar(net_out, max_abs_value)
  else:
    values = jnp.squeeze(net_out, axis=2)
  if nonlinear_transform:
    values = rlax.SIGNED_HYPERBOLIC_PAIR[1](values)
  return values


def scalar_action_values(
    net_out: Array,
    categorical: bool = False,
    max_abs_value: float | None = None,
    nonlinear_transform: bool = False,
) -> Array:
  """Per-action variant of `scalar_values`.

  Args:
    net_out: ``[T, B, A, 1]`` scalar outputs, or ``[T, B, A, num_bins]``
      logits when ``categorical``.
    categorical: whether ``net_out`` holds logits over the value support.
    max_abs_value: half-width of the categorical support; required when
      ``categorical``.
    nonlinear_transform: whether the head predicts squashed values.

  Returns:
    ``[T, B, A]`` scalar action values.
  """
  if net_out.ndim != 4:
    raise ValueError(
        f'Expected action-value outputs of shape [T, B, A, 1 or num_bins], '
        f'got shape {net_out.shape}.'
    )
  check_categorical_args(categorical, max_abs_value)

  def decode(x):
    return scalar_values(
        x,
        categorical=categorical,
        max_abs_value=max_abs_value,
        nonlinear_transform=nonlinear_transform,
    )

  return jax.vmap(decode, in_axes=2, out_axes=2)(net_out)
