"""Running normalisation of observations and rewards for the training loop.

Observations: running mean and variance per element, merged batch by batch
(Chan et al.'s parallel update of count, mean and variance); the agent sees
``clip((obs - mean) / sqrt(var + EPSILON), -OBSERVATION_CLIP,
OBSERVATION_CLIP)``. Rewards: each environment keeps a running discounted
return ``G = discount * G + r``, restarted after every episode's last step
(terminated or truncated); the learner's reward is ``r / sqrt(var(G) +
EPSILON)``, clipped to ``REWARD_CLIP`` (no mean is subtracted). The
statistics start at mean 0, variance 1 and count 0 (the identity), in
float32, and are per seed.

``learner_rollout`` is the loop's one call per rollout: the learner's view of
a raw rollout and the statistics after it. ``save`` and ``load`` write and
read one seed's statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
import os
from pathlib import Path
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco import weights

# Added to the variance under the square root.
EPSILON = 1e-8
# Normalised observations and scaled rewards are clipped to +-these.
OBSERVATION_CLIP = 10.0
REWARD_CLIP = 10.0
# The discount of the running return whose spread scales the rewards.
DEFAULT_DISCOUNT = 0.99
# ``save``'s metadata kind.
FILE_KIND = "normalizer"


@chex.dataclass(frozen=True)
class RunningMoments:
  """Mean and (population) variance of everything seen so far.

  Attributes:
    mean: ``[...]`` float32, the shape of one sample.
    var: ``[...]`` float32.
    count: ``[]`` float32 samples seen.
  """

  mean: jax.Array
  var: jax.Array
  count: jax.Array


@chex.dataclass(frozen=True)
class NormalizerState:
  """One seed's statistics (None: that normalisation is off).

  Attributes:
    observations: moments of the observations ``[...]``.
    returns: moments of the discounted returns ``[]``.
    discounted_return: ``[B]`` each environment's running discounted return.
  """

  observations: RunningMoments | None = None
  returns: RunningMoments | None = None
  discounted_return: jax.Array | None = None


def init_moments(shape: tuple[int, ...]) -> RunningMoments:
  """The identity: mean 0, variance 1, count 0."""
  return RunningMoments(
      mean=jnp.zeros(shape, jnp.float32),
      var=jnp.ones(shape, jnp.float32),
      count=jnp.zeros([], jnp.float32),
  )


def update_moments(
    moments: RunningMoments, batch: jax.Array, batch_dims: int
) -> RunningMoments:
  """``moments`` merged with the samples of ``batch`` ``[N1, .., Nk, ...]``
  (``k = batch_dims`` leading sample axes); the result is the mean and
  variance of everything seen, whatever the batches' sizes."""
  x = batch.astype(jnp.float32)
  x = x.reshape((-1,) + x.shape[batch_dims:])
  n = jnp.asarray(x.shape[0], jnp.float32)
  batch_mean = x.mean(axis=0)
  batch_var = x.var(axis=0)
  total = moments.count + n
  delta = batch_mean - moments.mean
  mean = moments.mean + delta * (n / total)
  m2 = (
      moments.var * moments.count
      + batch_var * n
      + jnp.square(delta) * (moments.count * n / total)
  )
  return RunningMoments(mean=mean, var=m2 / total, count=total)


def normalize(moments: RunningMoments, x: jax.Array) -> jax.Array:
  """``x`` ``[..., *shape]`` standardised and clipped, in ``x``'s dtype."""
  scaled = (x.astype(jnp.float32) - moments.mean) / jnp.sqrt(
      moments.var + EPSILON
  )
  return jnp.clip(scaled, -OBSERVATION_CLIP, OBSERVATION_CLIP).astype(x.dtype)


def scale_rewards(moments: RunningMoments, rewards: jax.Array) -> jax.Array:
  """``rewards`` divided by the returns' standard deviation, clipped."""
  scaled = rewards.astype(jnp.float32) / jnp.sqrt(moments.var + EPSILON)
  return jnp.clip(scaled, -REWARD_CLIP, REWARD_CLIP).astype(rewards.dtype)


def discounted_returns(
    start: jax.Array,
    rewards: jax.Array,
    is_last: jax.Array,
    discount: float,
) -> tuple[jax.Array, jax.Array]:
  """Running discounted returns through a rollout.

  Args:
    start: ``[B]`` each environment's return before the rollout.
    rewards: ``[T, B]``, ``rewards[t]`` received on arriving at step ``t``.
    is_last: ``[T, B]`` step ``t`` ends an episode (its reward included,
      the return restarts from 0 after it).
    discount: the return's discount.

  Returns:
    The ``[B]`` returns after the rollout and the ``[T, B]`` return at each
    step.
  """

  def step(g, x):
    reward, last = x
    g = discount * g + reward.astype(jnp.float32)
    return jnp.where(last, 0.0, g), g

  return jax.lax.scan(step, start, (rewards, is_last))


def init(
    observation: types.ArrayTree,
    observations: bool,
    rewards: bool,
) -> NormalizerState | None:
  """Fresh statistics for the ``[B, ...]`` reset ``observation`` (None if both
  options are off).

  Raises:
    ValueError: ``observations`` asked for and the observation is not one
      float array.
  """
  if not (observations or rewards):
    return None
  batch = jax.tree.leaves(observation)[0].shape[0]
  obs_moments = None
  if observations:
    check_observation(observation)
    obs_moments = init_moments(tuple(observation.shape[1:]))
  return NormalizerState(
      observations=obs_moments,
      returns=init_moments(()) if rewards else None,
      discounted_return=jnp.zeros([batch], jnp.float32) if rewards else None,
  )


def check_observation(observation: Any) -> None:
  """Raises ValueError unless ``observation`` is one floating-point array (not
  integer ids, not a tree of arrays)."""
  leaves = jax.tree.leaves(observation)
  if len(leaves) != 1 or leaves[0] is not observation:
    raise ValueError(
        "normalize_observations needs observations that are one float "
        f"array; this environment's are a tree of {len(leaves)} arrays: "
        "set normalize_observations=False."
    )
  dtype = np.dtype(observation.dtype)
  if not np.issubdtype(dtype, np.floating):
    raise ValueError(
        f"normalize_observations needs float observations; this "
        f"environment's are {dtype.name} (ids or indices, not measurements): "
        "set normalize_observations=False."
    )


def observe_actor(
    state: NormalizerState | None, observation: types.ArrayTree
) -> types.ArrayTree:
  """What the actor sees of ``[B, ...]`` observations (unchanged when
  observations are not normalised)."""
  if state is None or state.observations is None:
    return observation
  return normalize(state.observations, observation)


def learner_rollout(
    state: NormalizerState, rollout: types.ActorRollout, discount: float
) -> tuple[NormalizerState, types.ActorRollout]:
  """The statistics after a raw ``[T+1, B]`` rollout and what the learner
  sees of it.

  Observations are normalised with the statistics before the rollout (those
  the actor acted with, ``observe_actor``), rewards scaled with the return
  statistics that include it; then the observation statistics take in the
  rollout's raw observations.
  """
  obs_moments, returns, last_return = (
      state.observations,
      state.returns,
      state.discounted_return,
  )
  if obs_moments is not None:
    raw = rollout.observations
    rollout = rollout.replace(observations=normalize(obs_moments, raw))
    obs_moments = update_moments(obs_moments, raw, 2)
  if returns is not None:
    last_return, per_step = discounted_returns(
        last_return, rollout.rewards, rollout.is_last, discount
    )
    returns = update_moments(returns, per_step, 2)
    rollout = rollout.replace(rewards=scale_rewards(returns, rollout.rewards))
  new_state = NormalizerState(
      observations=obs_moments, returns=returns, discounted_return=last_return
  )
  return new_state, rollout


def learner_view(
    state: NormalizerState, rollout: types.ActorRollout
) -> types.ActorRollout:
  """What the learner sees of a raw ``[T+1, B]`` rollout with the statistics
  as they are (none updated)."""
  if state.observations is not None:
    rollout = rollout.replace(
        observations=normalize(state.observations, rollout.observations)
    )
  if state.returns is not None:
    rollout = rollout.replace(
        rewards=scale_rewards(state.returns, rollout.rewards)
    )
  return rollout


# ------------------------------------------------------------ files ----


def _moments_tree(state: NormalizerState) -> dict[str, dict[str, np.ndarray]]:
  tree = {}
  for name in ("observations", "returns"):
    moments = getattr(state, name)
    if moments is not None:
      tree[name] = {
          "mean": np.asarray(moments.mean, np.float32),
          "var": np.asarray(moments.var, np.float32),
          "count": np.asarray(moments.count, np.float32),
      }
  if state.discounted_return is not None:
    tree["returns"]["discounted_return"] = np.asarray(
        state.discounted_return, np.float32
    )
  return tree


def save(
    path: str | os.PathLike[str],
    state: NormalizerState,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
  """Writes one seed's statistics (unbatched) atomically as an ``.npz`` that
  ``load`` reads; ``metadata`` (JSON) goes with them.

  Raises:
    WeightsError: non-finite statistics or metadata that is not JSON.
  """
  return weights.save_meta_params(
      path, _moments_tree(state), dict(metadata or {}, kind=FILE_KIND)
  )


def load(path: str | os.PathLike[str]) -> NormalizerState:
  """The statistics ``save`` wrote to ``path``.

  Raises:
    WeightsError: a missing or damaged file, or one that holds no normaliser
      statistics.
  """
  metadata = weights.load_metadata(path)
  if metadata.get("kind") != FILE_KIND:
    raise weights.WeightsError(
        f"{path} holds no normaliser statistics (its metadata kind is "
        f"{metadata.get('kind')!r}, not {FILE_KIND!r})."
    )
  tree = weights.load_meta_params(path)

  def moments(name: str) -> RunningMoments | None:
    if name not in tree:
      return None
    return RunningMoments(
        mean=jnp.asarray(tree[name]["mean"]),
        var=jnp.asarray(tree[name]["var"]),
        count=jnp.asarray(tree[name]["count"]),
    )

  returns = tree.get("returns", {})
  discounted = returns.get("discounted_return")
  return NormalizerState(
      observations=moments("observations"),
      returns=moments("returns"),
      discounted_return=None if discounted is None else jnp.asarray(discounted),
  )
