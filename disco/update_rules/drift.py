"""Drift functions of mirror learning (Kuba et al. 2022) for PPO-style rules.

A mirror-learning update maximises ``r * A - f(r, A)`` per transition
(``r = pi(a|s) / mu(a|s)``, ``A`` the advantage) with a drift ``f >= 0``,
``f(1, A) = 0``, ``df/dr(1, A) = 0``. The drifts take ``log r`` and ``A`` of any
shape: ``ppo_drift`` (PPO's clipping), ``dpo_drift`` (DPO's closed form, Lu et
al. 2022) and ``lpo_drift`` (LPO's learned drift, Lu et al. 2022: a bias-free
``DriftNet`` over features vanishing at ``r = 1``, optionally plus PPO's,
through ``relu(. - offset)``, so the conditions hold for any parameters).

Feature layouts (``FEATURES``): ``lu2022`` (the LPO paper's: ``log r``,
``(log r)^2``, ``1 - r``, ``(1 - r)^2`` and each times ``A``), ``goldie2025``
(``r - 1``, ``(r - 1)^2``, ``log r``, ``(log r)^2`` and each times ``A``),
``signed`` (``lu2022``'s ratio features times ``1``, ``A``, ``|A|``).
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
  """PPO's clipping as a drift, ``relu((r - clip(r, 1-eps, 1+eps)) * A)``, the
  shape of ``log_r``.

  Args:
    log_r: ``log pi(a|s) - log mu(a|s)``, any shape.
    advs: advantages, the same shape.
    clip_epsilon: PPO's ``eps``.
  """
  r = jnp.exp(log_r)
  clipped = jnp.clip(r, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
  return jax.nn.relu((r - clipped) * advs)


def dpo_drift(
    log_r: jax.Array, advs: jax.Array, alpha: float, beta: float
) -> jax.Array:
  """DPO's drift (Lu et al. 2022), the shape of ``log_r`` (``log pi - log mu``):
  ``relu((r - 1) A - alpha tanh((r - 1) A / alpha))`` where ``A >= 0``,
  ``relu(log(r) A - beta tanh(log(r) A / beta))`` where ``A < 0`` (DPO:
  ``alpha`` 2.0, ``beta`` 0.6)."""
  pos = jnp.expm1(log_r) * advs
  neg = log_r * advs
  drift_pos = jax.nn.relu(pos - alpha * jnp.tanh(pos / alpha))
  drift_neg = jax.nn.relu(neg - beta * jnp.tanh(neg / beta))
  return jnp.where(advs >= 0, drift_pos, drift_neg)


class DriftNet(hk.Module):
  """The learned drift's network before its ReLU: features of ``(r, A)``, a tanh
  layer of ``hidden_size`` units and a linear output, no biases
  (``hidden_size=0``: linear in the features).

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
  """The learned drift ``relu(net_out + ppo_drift - offset)``, the shape of
  ``log_r`` (``net_out``: ``DriftNet``'s); ``clip_epsilon`` None drops the PPO
  term (with it, a zero network is PPO)."""
  pre = net_out - offset
  if clip_epsilon is not None:
    pre = pre + ppo_drift(log_r, advs, clip_epsilon)
  return jax.nn.relu(pre)
