"""Exponential moving averages of first and second moments, for normalisation.

The moments start at zero and are debiased as in Adam: after ``n`` updates
with decay ``d`` the raw moments are divided by ``1 - d**n`` (the running
product of decays is kept in ``EmaState.decay_product``).

Every leaf of the tracked tree is summarised by a *scalar* moment: an update
uses the mean over all elements of the corresponding array (optionally also
averaged over a named ``pmap``/``vmap`` axis).

Typical use::

  state = ema_init()                       # scalar moments
  state = ema_update(state, adv, decay=0.99, axis_name=None)
  normalized_adv = ema_normalize(adv, state)

For bit-level agreement with the published DiscoRL implementation pass
``decay`` as a Python float: ``1 - decay`` is then formed in double precision
before meeting the float32 moments.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from disco import types

DEFAULT_DECAY = 0.99
DEFAULT_EPS = 1e-6
DEFAULT_ROOT_EPS = 1e-12


def ema_init(example_tree: types.ArrayTree = None) -> types.EmaState:
  """Zero-initialised EMA state.

  Args:
    example_tree: a tree with the structure of the values that will later be
      passed to `ema_update`; only its structure matters (each leaf gets a
      scalar moment). ``None`` means a single array, i.e. scalar moments.

  Returns:
    An `EmaState` with float32 scalar zeros per leaf for both moments and a
    float32 ``decay_product`` of 1.
  """
  if example_tree is None:
    example_tree = jnp.zeros((), jnp.float32)
  zeros = jax.tree.map(lambda _: jnp.zeros((), jnp.float32), example_tree)
  return types.EmaState(
      moment1=zeros,
      moment2=zeros,
      decay_product=jnp.ones((), jnp.float32),
  )


def _leaf_moment_update(moment, value, decay, axis_name):
  """One EMA step for a scalar moment towards the mean of ``value``."""
  value_mean = jnp.mean(value)
  if axis_name is not None:
    value_mean = jax.lax.pmean(value_mean, axis_name=axis_name)
  return decay * moment + (1.0 - decay) * value_mean


def ema_update(
    state: types.EmaState,
    tree: types.ArrayTree,
    decay: float = DEFAULT_DECAY,
    axis_name: str | None = None,
) -> types.EmaState:
  """Moves the moments towards the statistics of ``tree``.

  For each leaf ``x``: ``m1 <- decay * m1 + (1 - decay) * mean(x)`` and
  ``m2 <- decay * m2 + (1 - decay) * mean(x**2)``, where ``mean`` averages
  over all elements of ``x`` (and over ``axis_name`` when given).

  Args:
    state: the current `EmaState` (same tree structure as ``tree``).
    tree: arrays of any shape, e.g. ``[T, B]`` advantages.
    decay: the decay of the moments (the step size is ``1 - decay``).
    axis_name: optional name of a mapped axis (``pmap``/``vmap``) across which
      the per-leaf means are averaged with ``jax.lax.pmean``.

  Returns:
    The updated `EmaState`.
  """
  squares = jax.tree.map(jnp.square, tree)
  update = lambda m, x: _leaf_moment_update(m, x, decay, axis_name)
  return types.EmaState(
      moment1=jax.tree.map(update, state.moment1, tree),
      moment2=jax.tree.map(update, state.moment2, squares),
      decay_product=state.decay_product * decay,
  )


def ema_moments(
    state: types.EmaState,
) -> tuple[types.ArrayTree, types.ArrayTree]:
  """Debiased mean and variance of the tracked values.

  Args:
    state: an `EmaState` that has received at least one update (before any
      update the debiasing factor is infinite).

  Returns:
    ``(mean, var)`` trees of scalars, with ``mean = m1 / (1 - decay_product)``
    and ``var = max(0, m2 / (1 - decay_product) - mean**2)``.
  """
  debias = 1.0 / (1 - state.decay_product)
  mean = jax.tree.map(lambda m1: m1 * debias, state.moment1)
  var = jax.tree.map(
      lambda m2, m: jnp.maximum(0.0, m2 * debias - jnp.square(m)),
      state.moment2,
      mean,
  )
  return mean, var


def ema_normalize(
    tree: types.ArrayTree,
    state: types.EmaState,
    eps: float = DEFAULT_EPS,
    subtract_mean: bool = True,
    root_eps: float = DEFAULT_ROOT_EPS,
) -> types.ArrayTree:
  """Standardises ``tree`` with the debiased EMA statistics in ``state``.

  Computes ``(x - mean) / (sqrt(var + root_eps) + eps)`` per leaf (without the
  ``- mean`` when ``subtract_mean`` is False). ``root_eps`` keeps the gradient
  of the square root finite at zero variance.

  Args:
    tree: arrays to normalise; each leaf is paired with the scalar moments of
      the matching leaf of ``state``.
    state: an `EmaState` (normally already updated with ``tree``).
    eps: added to the standard deviation.
    subtract_mean: whether to centre the values.
    root_eps: added to the variance inside the square root.

  Returns:
    A tree shaped like ``tree`` with the normalised values.
  """
  mean, var = ema_moments(state)

  def _normalize_leaf(m, v, x):
    scale = jnp.sqrt(v + root_eps) + eps
    if subtract_mean:
      return (x - m) / scale
    return x / scale

  return jax.tree.map(_normalize_leaf, mean, var, tree)
