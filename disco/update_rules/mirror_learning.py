"""Mirror-learning rules on PPO's machinery: DPO and LPO (Lu et al. 2022).

Both are ``disco.update_rules.ppo.PPO`` with its clipped surrogate replaced by
``r A - f(r, A)``, ``f`` a drift of ``disco.update_rules.drift`` (the gradient
flows through ``r`` inside ``f``); ``DriftRule`` with ``f = ppo_drift`` is PPO.
``DPO``: the closed form, ``dpo_alpha`` (2.0) and ``dpo_beta`` (0.6) as
hyper-parameters. ``LPO``: a learned drift, the ``DriftNet``'s parameters as
meta-parameters (passed to the loss in ``meta_out["drift_params"]``);
``init="zero_output"`` starts it at PPO's (with ``ppo_base``). Its parameters
must not be all zero: the network is even in them there, so ES's antithetic
pairs around 0 would give a zero gradient.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from disco import types
from disco.update_rules import base
from disco.update_rules import drift as drift_lib
from disco.update_rules import ppo

DPO_HYPER_PARAMS = dict(ppo.PPO_HYPER_PARAMS, dpo_alpha=2.0, dpo_beta=0.6)
LPO_INITS = ("zero_output", "random")


class DriftRule(ppo.PPO):
  """PPO with its clipped surrogate written as ``r A - f(r, A)``; subclasses set
  ``drift`` (here PPO's).

  Args:
    hyper_params: overrides of the class's ``default_hyper_params``.
    normalize_advantages: normalise the advantages over each learner step's
      batch.
    clip_value: clip the value loss around the behaviour values.
  """

  def drift(
      self, log_r: jax.Array, advs: jax.Array, meta_out: base.MetaOut
  ) -> jax.Array:
    """``f(r, A)`` per transition ``[T, B]``."""
    del meta_out
    return drift_lib.ppo_drift(log_r, advs, self.hyper_params["clip_epsilon"])

  def surrogate(
      self, log_r: jax.Array, advs: jax.Array, meta_out: base.MetaOut
  ) -> tuple[jax.Array, types.Logs]:
    """``r A - f(r, A)``, ``[T, B]``, and the mean drift."""
    drift = self.drift(log_r, advs, meta_out)
    return jnp.exp(log_r) * advs - drift, dict(drift=jnp.mean(drift))


class DPO(DriftRule):
  """Discovered Policy Optimisation: ``drift.dpo_drift`` with the
  hyper-parameters ``dpo_alpha`` and ``dpo_beta`` (and PPO's others).

  Args:
    hyper_params: overrides of ``DPO_HYPER_PARAMS``.
    normalize_advantages: normalise the advantages over each learner step's
      batch.
    clip_value: clip the value loss around the behaviour values.
  """

  default_hyper_params = DPO_HYPER_PARAMS

  def drift(
      self, log_r: jax.Array, advs: jax.Array, meta_out: base.MetaOut
  ) -> jax.Array:
    del meta_out
    return drift_lib.dpo_drift(
        log_r,
        advs,
        self.hyper_params["dpo_alpha"],
        self.hyper_params["dpo_beta"],
    )


class LPO(DriftRule):
  """Learned Policy Optimisation: a meta-learned drift network.

  Args:
    hyper_params: overrides of PPO's (``clip_epsilon`` also sets the PPO
      term of the drift).
    features: the drift network's input layout (``drift.FEATURES``).
    hidden_size: its hidden units (0: linear in the features).
    ppo_base: add PPO's drift inside the ReLU.
    init: ``zero_output`` (the drift starts at PPO's with ``ppo_base``) or
      ``random``.
    normalize_advantages: normalise the advantages over each learner step's
      batch.
    clip_value: clip the value loss around the behaviour values.
  """

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      features: str = "lu2022",
      hidden_size: int = 128,
      ppo_base: bool = True,
      init: str = "zero_output",
      normalize_advantages: bool = True,
      clip_value: bool = True,
  ):
    super().__init__(hyper_params, normalize_advantages, clip_value)
    if init not in LPO_INITS:
      raise ValueError(
          f"Unknown LPO init {init!r}; use one of {', '.join(LPO_INITS)}."
      )
    self.features = drift_lib.check_features(str(features))
    self.hidden_size = int(hidden_size)
    self.ppo_base = bool(ppo_base)
    self.init = init
    self._net = drift_lib.make_drift_net(self.features, self.hidden_size)

  def init_meta_params(self, rng: jax.Array) -> types.MetaParams:
    example = jnp.zeros([1])
    params = self._net.init(rng, example, example)
    if self.init == "zero_output":
      output = drift_lib.output_layer_name(params)
      params = dict(params)
      params[output] = jax.tree.map(jnp.zeros_like, params[output])
    return params

  def drift_net(
      self, meta_params: types.MetaParams, log_r: jax.Array, advs: jax.Array
  ) -> jax.Array:
    """The drift network's output (before the ReLU), the shape of
    ``log_r``."""
    return self._net.apply(meta_params, None, log_r, advs)

  def drift_from_params(
      self, meta_params: types.MetaParams, log_r: jax.Array, advs: jax.Array
  ) -> jax.Array:
    """The learned drift ``f(r, A)`` of ``meta_params``, any shape."""
    eps = self.hyper_params["clip_epsilon"] if self.ppo_base else None
    return drift_lib.lpo_drift(
        self.drift_net(meta_params, log_r, advs), log_r, advs, eps
    )

  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    meta_out, rule_state = super().unroll_meta_net(inputs, context)
    return dict(meta_out, drift_params=context.meta_params), rule_state

  def drift(
      self, log_r: jax.Array, advs: jax.Array, meta_out: base.MetaOut
  ) -> jax.Array:
    return self.drift_from_params(meta_out["drift_params"], log_r, advs)
