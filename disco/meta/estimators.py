"""The mathematics ES and PES share (``disco.meta.es``, ``disco.meta.pes``),
pure over any meta-parameter pytree: member noise (antithetic pairs ``2k``,
``2k + 1`` draw ``z``, ``-z``), perturbed meta-parameters, the ES and PES
gradients and evosax's rank-based fitness shaping. Gradients are of a loss
(lower is better)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from disco import ops


def tree_normal(key: jax.Array, tree: Any) -> Any:
  """Standard normal noise shaped like ``tree`` (one key per leaf)."""
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(key, max(len(leaves), 1))
  return jax.tree.unflatten(
      treedef,
      [
          jax.random.normal(k, jnp.shape(x), jnp.result_type(x))
          for k, x in zip(keys, leaves, strict=False)
      ],
  )


def member_noise(
    key: jax.Array, tree: Any, index: jax.Array, antithetic: bool = True
) -> Any:
  """Member ``index``'s unit noise ``z`` shaped like ``tree``: antithetic
  members ``2k`` and ``2k + 1`` draw ``z`` and ``-z`` from ``fold_in(key, k)``,
  otherwise each its own. It depends only on the global ``index`` (which may be
  traced), so any device can draw any member's noise."""
  if not antithetic:
    return tree_normal(jax.random.fold_in(key, index), tree)
  z = tree_normal(jax.random.fold_in(key, index // 2), tree)
  sign = 1 - 2 * (index % 2)
  return jax.tree.map(lambda x: x * sign.astype(x.dtype), z)


def perturb(params: Any, noise: Any, scale: float | jax.Array) -> Any:
  """``params + scale * noise`` leaf by leaf."""
  return jax.tree.map(lambda p, z: p + scale * z.astype(p.dtype), params, noise)


def weighted_sum(stacked: Any, weights: jax.Array) -> Any:
  """``sum_i weights[i] * stacked[i]`` for a tree of ``[N, ...]`` leaves."""
  return jax.tree.map(
      lambda x: jnp.tensordot(weights.astype(x.dtype), x, axes=1), stacked
  )


def centered_ranks(losses: jax.Array) -> jax.Array:
  """evosax's centred-rank shaping of ``[N]`` losses: ranks in ``[-0.5, 0.5]``,
  the best -0.5; a NaN (diverged member) ranks worst."""
  from evosax.core import fitness_shaping  # pylint: disable=g-import-not-at-top

  return fitness_shaping.centered_rank_fitness_shaping_fn(
      None, losses, None, None
  )


def es_gradient(
    noise: Any, weights: jax.Array, sigma: float, count: int | jax.Array
) -> Any:
  """OpenAI-ES: ``sum_i w_i z_i / (count * sigma)``, the gradient of the
  expected loss at the unperturbed parameters when ``w`` are the losses of
  ``params + sigma * z_i`` (or their shaped ranks). ``noise``: ``[N, ...]``;
  ``count``: the members over all devices when ``noise`` holds one device's
  share."""
  return jax.tree.map(
      lambda g: g / (count * sigma), weighted_sum(noise, weights)
  )


def pes_gradient(
    accumulated: Any, losses: jax.Array, sigma: float, count: int | jax.Array
) -> Any:
  """PES (Vicol et al. 2021, Algorithm 2):
  ``sum_i xi_i L_i / (count * sigma^2)``, with ``xi_i`` ``[N, ...]`` particle
  ``i``'s perturbations since its lifetime began (this truncation's included)
  and ``L_i`` its loss on this truncation."""
  return jax.tree.map(
      lambda g: g / (count * sigma**2), weighted_sum(accumulated, losses)
  )


def es_perturbations(
    meta_params: Any,
    key: jax.Array,
    index: jax.Array,
    sigma: float,
    antithetic: bool = True,
) -> tuple[Any, Any]:
  """ES members' meta-parameters for global indices ``index`` ``[N]``:
  ``(meta_params + sigma * z, z)``, both with leading ``[N]``."""

  def one(i):
    z = member_noise(key, meta_params, i, antithetic)
    return perturb(meta_params, z, sigma), z

  return jax.vmap(one)(index)


def pes_perturbations(
    meta_params: Any,
    accumulated: Any,
    key: jax.Array,
    index: jax.Array,
    sigma: float,
    antithetic: bool = True,
) -> tuple[Any, Any]:
  """PES particles' meta-parameters for one truncation: particle ``i`` (global
  ``index``) draws ``eps_i = sigma * z_i``; returns ``(meta_params + eps,
  accumulated + eps)``, leading ``[N]``."""

  def one(acc, i):
    z = member_noise(key, meta_params, i, antithetic)
    eps = jax.tree.map(lambda x: sigma * x, z)
    acc = jax.tree.map(jnp.add, acc, eps)
    return perturb(meta_params, eps, 1.0), acc

  return jax.vmap(one)(accumulated, index)


def pes_truncation(
    unroll: Any,
    meta_params: Any,
    states: Any,
    accumulated: Any,
    key: jax.Array,
    index: jax.Array,
    sigma: float,
    antithetic: bool = True,
) -> tuple[Any, Any, jax.Array, Any]:
  """One truncation of every particle: ``pes_perturbations``, then
  ``unroll(meta_params + eps_i, state_i) -> (state_i, loss_i, aux_i)``, vmapped
  over the ``[N]`` leading axis.

  Returns ``(states, accumulated, losses [N], aux)``; the gradient is
  ``pes_gradient(accumulated, losses, sigma, N)``.
  """
  thetas, accumulated = pes_perturbations(
      meta_params, accumulated, key, index, sigma, antithetic
  )
  states, losses, aux = jax.vmap(unroll)(thetas, states)
  return states, accumulated, losses, aux


def pair_all(mask: jax.Array) -> jax.Array:
  """``[N]``: whether both members of each antithetic pair ``2k, 2k + 1`` hold
  ``mask``, per member."""
  both = mask.reshape(-1, 2).all(axis=1)
  return jnp.repeat(both, 2)


def where_rows(mask: jax.Array, on: Any, off: Any) -> Any:
  """Per row ``i`` of ``[N, ...]`` trees: ``on[i]`` where ``mask[i]``, else
  ``off[i]`` (``off`` may be a scalar such as 0 for every leaf)."""

  if isinstance(off, (int, float)):
    off = jax.tree.map(lambda a: jnp.full_like(a, off), on)
  return ops.tree_where(mask, on, off)
