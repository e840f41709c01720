"""Small array operations shared by networks, value functions and rules.

Everything here is a pure function of arrays (or pytrees of arrays) and may
be used under ``jit``/``vmap``/``grad``. Policies are given by logits over the
last axis ``[..., A]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import rlax

from disco import types


def prng_seeds(seeds: Sequence[int]) -> np.ndarray:
  """``seeds`` as the integers ``jax.random.PRNGKey`` reads Python ints as
  (their low 32 bits, or 64 with ``jax_enable_x64``), so that a compiled
  program makes the same keys from them: ``PRNGKey(prng_seeds(s)[i])`` under
  ``jit`` equals ``PRNGKey(s[i])``.
  """
  if jax.config.jax_enable_x64:
    return np.asarray([int(s) for s in seeds], np.int64)
  return np.asarray([int(s) % 2**32 for s in seeds], np.uint32)


def softmax_entropy(logits: jax.Array) -> jax.Array:
  """Entropy of ``softmax(logits)``: ``[..., A]`` -> ``[...]``."""
  return distrax.Softmax(logits).entropy()


def categorical_kl(target_logits: jax.Array, logits: jax.Array) -> jax.Array:
  """``KL(softmax(target_logits) || softmax(logits))``: ``[..., A]`` -> ``[...]``.

  Gradients flow into both arguments; stop them on the target where it is a
  fixed target.
  """
  return rlax.categorical_kl_divergence(target_logits, logits)


def polyak(
    target: types.ArrayTree, online: types.ArrayTree, tau: float
) -> types.ArrayTree:
  """Moves ``target`` towards ``online``: ``(1 - tau) * target + tau * online``.

  (Written out rather than ``optax.incremental_update``, whose other order of
  the two products rounds differently from the published Disco update.)
  """
  return jax.tree.map(lambda t, o: t * (1.0 - tau) + tau * o, target, online)


def masked_mean(
    x: jax.Array, mask: jax.Array | None = None, axis_name: str | None = None
) -> jax.Array:
  """Mean of ``x`` ``[T, B, ...]`` over the entries where ``mask`` ``[T, B]``
  is 1 (all of them for None), and over ``axis_name`` if given."""
  if mask is None:
    return global_mean(x, axis_name)
  mask = jnp.broadcast_to(
      mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x.shape
  ).astype(x.dtype)
  total, count = jnp.sum(x * mask), jnp.sum(mask)
  if axis_name is not None:
    total, count = jax.lax.psum((total, count), axis_name)
  return total / jnp.maximum(count, 1e-8)


def all_finite(tree: types.ArrayTree) -> jax.Array:
  """Whether every floating-point entry of ``tree`` is finite: a scalar bool
  (True for a tree without floating-point leaves). Integer leaves (counters,
  RNG keys) are not checked.

  The per-leaf checks are combined by a dot product, not by ``jnp.all``:
  XLA rewrites an ``all`` over stacked scalars into a chain of ``and``s and
  then copies that whole chain into the fusion of every consumer, so a
  tree-wide select on the result (``tree_where``) grew the compiled program
  with leaves x leaves (three quarters of a meta-step's optimised HLO and
  compile time). XLA does not copy a dot into its consumers.
  """
  checks = [
      jnp.all(jnp.isfinite(x))
      for x in jax.tree.leaves(tree)
      if jnp.issubdtype(jnp.result_type(x), jnp.inexact)
  ]
  if not checks:
    return jnp.array(True)
  ones = jnp.stack(checks).astype(jnp.float32)  # 1 where finite, else 0
  # Exact: products of 0s and 1s summed in float32 (HIGHEST: no reduced
  # precision passes on any backend), far below 2**24.
  count = jnp.dot(ones, ones, precision=jax.lax.Precision.HIGHEST)
  return count == len(checks)


def tree_where(pred: jax.Array, on_true: types.ArrayTree, on_false):
  """``jnp.where(pred, a, b)`` for every pair of leaves of two trees of the
  same structure. ``pred`` is a scalar, or a prefix of every leaf's shape
  (``[N]`` picks rows of ``[N, ...]`` leaves)."""
  pred = jnp.asarray(pred)

  def select(a, b):
    p = pred.reshape(pred.shape + (1,) * (jnp.ndim(a) - pred.ndim))
    return jnp.where(p, a, b)

  return jax.tree.map(select, on_true, on_false)


def global_mean(x: jax.Array, axis_name: str | None = None) -> jax.Array:
  """Mean of all entries of ``x``, averaged over ``axis_name`` if given."""
  x = jnp.mean(x)
  return x if axis_name is None else jax.lax.pmean(x, axis_name)


@jax.custom_vjp
def _take_action(x: jax.Array, taken: jax.Array) -> jax.Array:
  """``[T, B, A, ...]``, one-hot bool ``[T, B, A, 1...]`` -> ``[T, B, ...]``."""
  idx = jnp.argmax(taken, axis=2, keepdims=True)
  return jnp.take_along_axis(x, idx, axis=2).squeeze(2)


def _take_action_fwd(x, taken):
  return _take_action(x, taken), taken


def _take_action_bwd(taken, cotangent):
  # The incoming gradient, masked: a gather's own gradient would scatter into
  # a zero-filled ``[T, B, A, ...]`` buffer (slow for wide outputs such as z).
  return jnp.where(taken, cotangent[:, :, None], 0.0), None


_take_action.defvjp(_take_action_fwd, _take_action_bwd)


def at_actions(x: jax.Array, actions: jax.Array) -> jax.Array:
  """``x[t, b, actions[t, b], ...]``: ``[T, B, A, ...]`` -> ``[T, B, ...]``.

  Raises:
    ValueError: if the leading axes of ``x`` are not ``actions.shape``.
  """
  if x.shape[:2] != actions.shape:
    raise ValueError(
        f"at_actions needs per-action inputs [T, B, A, ...] matching the "
        f"actions {actions.shape}; got {x.shape} (per-state inputs need their "
        "last state dropped first: the 'drop_last' transform of a "
        "meta-network input)."
    )
  taken = jax.nn.one_hot(actions, x.shape[2], dtype=bool)
  return _take_action(x, taken.reshape(taken.shape + (1,) * (x.ndim - 3)))
