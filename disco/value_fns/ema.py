"""Exponential moving averages of first and second moments, debiased as in
Adam, for normalisation.

Each leaf of the tracked tree has a *scalar* moment, updated with the mean
over all its elements:

```python
state = ema_update(ema_init(), adv, decay=0.99)
normalized_adv = ema_normalize(adv, state)
```

Pass ``decay`` as a Python float for bit-level agreement with the published
DiscoRL implementation.
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
    example_tree: a tree with the structure of the values to track (only the
      structure matters); None: a single array.

  Returns:
    An ``EmaState`` of float32 scalar zeros per leaf, ``decay_product`` 1.
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
  """One EMA step of a scalar moment towards the mean of ``value``."""
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
  """Moves the moments towards the statistics of ``tree``: per leaf ``x``,
  ``m1 <- decay * m1 + (1 - decay) * mean(x)``, ``m2`` likewise with
  ``mean(x**2)``.

  Args:
    state: an ``EmaState`` with the tree structure of ``tree``.
    tree: arrays of any shape, e.g. ``[T, B]`` advantages.
    decay: the decay of the moments.
    axis_name: a mapped axis the means are averaged over, if any.

  Returns:
    The updated ``EmaState``.
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
  """Debiased ``(mean, var)`` trees of scalars.

  ``mean = m1 / (1 - decay_product)``, ``var = max(0, m2 / (1 -
  decay_product) - mean**2)``; infinite before the first update.
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
  """``(x - mean) / (sqrt(var + root_eps) + eps)`` per leaf.

  Args:
    tree: arrays to normalise, leaf for leaf with ``state``.
    state: an ``EmaState`` (normally already updated with ``tree``).
    eps: added to the standard deviation.
    subtract_mean: centre the values (else only scale them).
    root_eps: added to the variance, keeping the square root's gradient
      finite at zero variance.

  Returns:
    The normalised tree.
  """
  mean, var = ema_moments(state)

  def _normalize_leaf(m, v, x):
    scale = jnp.sqrt(v + root_eps) + eps
    if subtract_mean:
      return (x - m) / scale
    return x / scale

  return jax.tree.map(_normalize_leaf, mean, var, tree)
