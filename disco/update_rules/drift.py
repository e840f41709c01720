"""Drift functions of mirror learning (Kuba et al. 2022) for PPO-style rules.

A mirror-learning policy update maximises, per sampled transition,

  ``r * A - f(r, A)``

where ``r = pi(a|s) / mu(a|s)`` is the probability ratio of the taken action
against the behaviour policy, ``A`` its (normalised) advantage and ``f`` a
*drift*: ``f >= 0`` everywhere, ``f(1, A) = 0`` and ``df/dr(1, A) = 0`` for
every ``A``. Any such drift gives an update with monotonic improvement
guarantees. This module holds three drifts, all over per-sample arrays of
any shape (``[T, B]`` in the rules) and taking ``log r`` (the difference of
log-probabilities, never the log of an exponentiated ratio):

  * ``ppo_drift``: PPO's clipped surrogate as a drift,
    ``relu((r - clip(r, 1 - eps, 1 + eps)) * A)``; ``r * A - ppo_drift`` is
    PPO's ``min(r A, clip(r) A)``;
  * ``dpo_drift``: the closed form of Discovered Policy Optimisation (Lu et
    al. 2022): ``relu((r - 1) A - alpha tanh((r - 1) A / alpha))`` where
    ``A >= 0`` and ``relu(log(r) A - beta tanh(log(r) A / beta))`` where
    ``A < 0``;
  * ``DriftNet``: the learned drift of LPO (Lu et al. 2022), a network over
    features of ``r`` and ``A`` with no biases whose features all vanish at
    ``r = 1``, so the network is 0 there; ``lpo_drift`` adds PPO's drift
    (optionally) and passes the sum through ``relu(. - offset)``, which is
    identically 0 in a neighbourhood of ``r = 1`` (zero value and slope) and
    non-negative everywhere: the conditions hold for any parameters.

Feature layouts (``FEATURES``): ``lu2022`` (the LPO paper's: ``log r``,
``(log r)^2``, ``1 - r``, ``(1 - r)^2`` and each times ``A``), ``goldie2025``
(``r - 1``, ``(r - 1)^2``, ``log r``, ``(log r)^2`` and each times ``A``) and
``signed`` (the ``lu2022`` ratio features times ``1``, ``A`` and ``|A|``: a
drift that can shape positive and negative advantages differently even with
``hidden_size=0``). Parameters of one layout do not carry over to another.
"""

from __future__ import annotations

from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp

# The ReLU offset that makes a learned drift exactly 0 near r = 1.
LPO_OFFSET = 1e-4


def _lu2022(log_r: jax.Array, advs: jax.Array) -> jax.Array:
  r_feats = _lu_ratio_features(log_r)
  return jnp.stack(r_feats + [f * advs for f in r_feats], axis=-1)


def _lu_ratio_features(log_r: jax.Array) -> list[jax.Array]:
  one_minus_r = -jnp.expm1(log_r)
  return [log_r, jnp.square(log_r), one_minus_r, jnp.square(one_minus_r)]


def _goldie2025(log_r: jax.Array, advs: jax.Array) -> jax.Array:
  r_minus_1 = jnp.expm1(log_r)
  r_feats = [r_minus_1, jnp.square(r_minus_1), log_r, jnp.square(log_r)]
  return jnp.stack(r_feats + [f * advs for f in r_feats], axis=-1)


def _signed(log_r: jax.Array, advs: jax.Array) -> jax.Array:
  r_feats = _lu_ratio_features(log_r)
  abs_advs = jnp.abs(advs)
  return jnp.stack(
      r_feats + [f * advs for f in r_feats] + [f * abs_advs for f in r_feats],
      axis=-1,
  )


# name -> (features(log_r [...], advs [...]) -> [..., F], F)
FEATURES: dict[str, tuple[Callable[..., jax.Array], int]] = {
    "lu2022": (_lu2022, 8),
    "goldie2025": (_goldie2025, 8),
    "signed": (_signed, 12),
}


def check_features(name: str) -> str:
  """``name`` if it is a feature layout; ``ValueError`` naming them if not."""
  if name not in FEATURES:
    raise ValueError(
        f"Unknown drift features {name!r}; use one of {', '.join(FEATURES)}."
    )
  return name


def ppo_drift(
    log_r: jax.Array, advs: jax.Array, clip_epsilon: float
) -> jax.Array:
  """PPO's clipping as a drift, ``relu((r - clip(r, 1-eps, 1+eps)) * A)``.

  Args:
    log_r: ``log pi(a|s) - log mu(a|s)``, any shape.
    advs: advantages, the same shape.
    clip_epsilon: PPO's ``eps``.

  Returns:
    The drift, the shape of ``log_r``.
  """
  r = jnp.exp(log_r)
  clipped = jnp.clip(r, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
  return jax.nn.relu((r - clipped) * advs)


def dpo_drift(
    log_r: jax.Array, advs: jax.Array, alpha: float, beta: float
) -> jax.Array:
  """DPO's drift (Lu et al. 2022): a smooth clip for ``A >= 0`` and a
  rollback towards ``r = 1`` for ``A < 0``.

  Args:
    log_r: ``log pi(a|s) - log mu(a|s)``, any shape.
    advs: advantages, the same shape (the branch follows their sign).
    alpha: the scale of the positive-advantage branch (2.0 in DPO).
    beta: the scale of the negative-advantage branch (0.6 in DPO).

  Returns:
    The drift, the shape of ``log_r``.
  """
  pos = jnp.expm1(log_r) * advs
  neg = log_r * advs
  drift_pos = jax.nn.relu(pos - alpha * jnp.tanh(pos / alpha))
  drift_neg = jax.nn.relu(neg - beta * jnp.tanh(neg / beta))
  return jnp.where(advs >= 0, drift_pos, drift_neg)


class DriftNet(hk.Module):
  """The learned drift's network before its ReLU: features of ``(r, A)``,
  a tanh layer of ``hidden_size`` units and a linear output, no biases
  (``hidden_size=0``: linear in the features, a closed form).

  Args:
    features: a ``FEATURES`` layout.
    hidden_size: units of the hidden layer (0: none).
    name: module name.
  """

  def __init__(self, features: str, hidden_size: int, name: str = "drift"):
    super().__init__(name=name)
    self._features = FEATURES[check_features(features)][0]
    self._hidden_size = hidden_size

  def __call__(self, log_r: jax.Array, advs: jax.Array) -> jax.Array:
    """``log_r``, ``advs``: any shape ``S``; returns ``[*S]``."""
    x = self._features(log_r, advs)
    if self._hidden_size:
      x = jnp.tanh(hk.Linear(self._hidden_size, with_bias=False)(x))
    return hk.Linear(1, with_bias=False)(x)[..., 0]


def make_drift_net(features: str, hidden_size: int) -> hk.Transformed:
  """``init(rng, log_r, advs)`` and ``apply(params, None, log_r, advs)`` of
  a ``DriftNet``."""
  if int(hidden_size) < 0:
    raise ValueError(f"LPO hidden_size must be >= 0, got {hidden_size}.")
  return hk.transform(
      lambda log_r, advs: DriftNet(features, int(hidden_size))(log_r, advs)
  )


def output_layer_name(params: hk.Params) -> str:
  """The module name of a ``DriftNet``'s output layer in ``params``."""
  return sorted(params)[-1]


def lpo_drift(
    net_out: jax.Array,
    log_r: jax.Array,
    advs: jax.Array,
    clip_epsilon: float | None,
    offset: float = LPO_OFFSET,
) -> jax.Array:
  """The learned drift from its network's output.

  Args:
    net_out: ``DriftNet`` outputs, the shape of ``log_r``.
    log_r: ``log pi(a|s) - log mu(a|s)``.
    advs: advantages.
    clip_epsilon: adds ``ppo_drift`` with this ``eps`` inside the ReLU (LPO's
      "PPO init": a zero network is PPO); None: no PPO term.
    offset: subtracted inside the ReLU.

  Returns:
    ``relu(net_out + [ppo_drift] - offset)``.
  """
  pre = net_out - offset
  if clip_epsilon is not None:
    pre = pre + ppo_drift(log_r, advs, clip_epsilon)
  return jax.nn.relu(pre)
