"""What MPO and SPO share: dual variables, E-steps, M-step losses and the rule
skeleton ``DualRule``.

The duals (temperature ``eta``, trust-region weight ``alpha``) are
``softplus(raw) + 1e-8``, raw values clamped at -18, with their own optimiser.
The E-step is exact over all actions (``exact_e_step``: MPO, discrete) or over
sampled ones (``sample_e_step``). Continuous actions use Acme's and Stoix's
decoupled M-step (``decoupled_m_step``): the online mean and the online std are
fitted separately, under ``KL(pi_target || pi_fixed_stddev) <= epsilon_mean``
and ``KL(pi_target || pi_fixed_mean) <= epsilon_stddev``, per action dimension
or summed.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
import copy
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import ops
from disco import policies
from disco import types
from disco.update_rules import base

DUAL_EPSILON = 1e-8
MIN_RAW_DUAL = -18.0


# ------------------------------------------------------------------- duals
def init_duals(
    init_log_temperature: float, init_log_alpha: float
) -> dict[str, jax.Array]:
  """Raw (pre-softplus) dual variables, each ``[1]`` float32."""
  return dict(
      log_temperature=jnp.full([1], init_log_temperature, jnp.float32),
      log_alpha=jnp.full([1], init_log_alpha, jnp.float32),
  )


def init_gaussian_duals(
    init_log_temperature: float,
    init_log_alpha_mean: float,
    init_log_alpha_stddev: float,
    size: int,
) -> dict[str, jax.Array]:
  """Raw duals of the decoupled Gaussian M-step: ``log_temperature`` ``[1]``,
  ``log_alpha_mean`` and ``log_alpha_stddev`` ``[size]``, float32."""
  return dict(
      log_temperature=jnp.full([1], init_log_temperature, jnp.float32),
      log_alpha_mean=jnp.full([size], init_log_alpha_mean, jnp.float32),
      log_alpha_stddev=jnp.full([size], init_log_alpha_stddev, jnp.float32),
  )


def dual_value(raw: jax.Array) -> jax.Array:
  """Scalar ``softplus(raw) + 1e-8`` of a ``[1]`` raw dual."""
  return jax.nn.softplus(jnp.squeeze(raw)) + DUAL_EPSILON


def dual_values(raw: jax.Array) -> jax.Array:
  """``softplus(raw) + 1e-8`` of a ``[K]`` raw dual, elementwise (``[K]``)."""
  return jax.nn.softplus(raw) + DUAL_EPSILON


def clamp_duals(duals: dict[str, jax.Array]) -> dict[str, jax.Array]:
  return jax.tree.map(lambda x: jnp.maximum(x, MIN_RAW_DUAL), duals)


def dual_optimizer(
    learning_rate: float, max_grad_norm: float
) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(max_grad_norm),
      optax.adam(learning_rate, eps=1e-5),
  )


def apply_dual_gradient(
    optimizer: optax.GradientTransformation,
    duals: dict[str, jax.Array],
    opt_state: optax.OptState,
    grads: dict[str, jax.Array],
    axis_name: str | None = None,
) -> tuple[dict[str, jax.Array], optax.OptState]:
  """One optimiser step on the duals, followed by the clamp."""
  if axis_name is not None:
    grads = jax.lax.pmean(grads, axis_name)
  updates, opt_state = optimizer.update(grads, opt_state, duals)
  return clamp_duals(optax.apply_updates(duals, updates)), opt_state


# --------------------------------------------------------- loss pieces
def exact_e_step(
    q_values: jax.Array, prior_logits: jax.Array, temperature: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Prior-weighted non-parametric policy over all actions.

  Args:
    q_values: ``[..., A]`` action values (treated as constants).
    prior_logits: ``[..., A]`` logits of the prior (target) policy.
    temperature: scalar ``eta``.

  Returns:
    ``(log_q [..., A], log_normaliser [...])`` with
    ``log_q = Q/eta + log pi_prior - log_normaliser``.
  """
  z = jax.lax.stop_gradient(q_values) / temperature + jax.nn.log_softmax(
      prior_logits, axis=-1
  )
  log_normaliser = jax.nn.logsumexp(z, axis=-1)
  return z - log_normaliser[..., None], log_normaliser


def sample_e_step(
    advantages: jax.Array, temperature: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """``(weights [..., N], log_normaliser [...])`` over ``N`` prior samples with
  constant ``[..., N]`` ``advantages``: ``softmax(adv / eta)`` and
  ``logsumexp_n(adv / eta) - log N``, an estimate of
  ``log E_prior[exp(adv / eta)]``."""
  tempered = jax.lax.stop_gradient(advantages) / temperature
  num = advantages.shape[-1]
  log_normaliser = jax.nn.logsumexp(tempered, axis=-1) - np.log(num)
  return jax.nn.softmax(tempered, axis=-1), log_normaliser


def nonparametric_kl(weights: jax.Array) -> jax.Array:
  """``KL(q || prior)`` estimated from the E-step's ``[..., N]`` weights over
  ``N`` actions sampled from the prior: ``sum_n w_n log(N w_n)`` (``[...]``)."""
  num = weights.shape[-1]
  return jnp.sum(weights * jnp.log(num * weights + 1e-8), axis=-1)


def temperature_loss(
    temperature: jax.Array, log_normaliser: jax.Array, epsilon: float
) -> jax.Array:
  """Per-state dual loss of the E-step: ``eta * (epsilon + log Z)``."""
  return temperature * (epsilon + log_normaliser)


def categorical_cross_entropy(
    target_log_probs: jax.Array, logits: jax.Array
) -> jax.Array:
  """``-sum_a p(a) log pi(a)`` with ``p = exp(target_log_probs)``."""
  return -jnp.sum(
      jnp.exp(target_log_probs) * jax.nn.log_softmax(logits), axis=-1
  )


def sampled_cross_entropy(
    logits: jax.Array, actions: jax.Array, weights: jax.Array
) -> jax.Array:
  """``-sum_n w_n log pi(a_n)``: logits ``[..., A]``, actions/weights
  ``[..., N]`` -> ``[...]``."""
  log_pi = jnp.take_along_axis(
      jax.nn.log_softmax(logits), actions.astype(jnp.int32), axis=-1
  )
  return -jnp.sum(weights * log_pi, axis=-1)


def alpha_loss(
    alpha: jax.Array, kl: jax.Array, epsilon_policy: float
) -> jax.Array:
  """Per-state dual loss of the M-step: ``alpha * (eps_pi - sg(KL))``."""
  return alpha * (epsilon_policy - jax.lax.stop_gradient(kl))


# ------------------------------------------------- the Gaussian M-step
def gaussian_kl_per_dim(
    policy: policies.Gaussian, params: jax.Array, other: jax.Array
) -> jax.Array:
  """``[..., D]`` ``KL(N(params) || N(other))`` per action dimension of
  ``[..., 2 D]`` parameters (also the squashed policies' KL)."""
  mean, log_std = policy.mean_and_log_std(params)
  other_mean, other_log_std = policy.mean_and_log_std(other)
  ratio = jnp.exp(2.0 * (log_std - other_log_std))
  gap = jnp.square(mean - other_mean) * jnp.exp(-2.0 * other_log_std)
  return other_log_std - log_std + 0.5 * (ratio + gap - 1.0)


def decoupled_params(
    policy: policies.Gaussian, online: jax.Array, target: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """The two halves of the online Gaussian ``[..., 2 D]``: ``(online mean
  with the target's log-std, the target's mean with the online log-std)``."""
  online_mean, online_log_std = policy.mean_and_log_std(online)
  target_mean, target_log_std = policy.mean_and_log_std(target)
  return (
      jnp.concatenate([online_mean, target_log_std], axis=-1),
      jnp.concatenate([target_mean, online_log_std], axis=-1),
  )


def sampled_log_probs(
    policy: policies.Policy, params: jax.Array, actions: jax.Array
) -> jax.Array:
  """``log pi(a_n)`` of ``N`` actions per state: params ``[..., P]``,
  actions ``[..., N, D]`` -> ``[..., N]``."""
  return policy.log_prob(params[..., None, :], actions)


def decoupled_kls(
    policy: policies.Gaussian,
    online: jax.Array,
    target: jax.Array,
    per_dim: bool,
) -> tuple[jax.Array, jax.Array]:
  """``(KL(pi_target || pi_fixed_stddev), KL(pi_target || pi_fixed_mean))``,
  each ``[..., D]`` (``per_dim``) or summed, ``[..., 1]``."""
  fixed_stddev, fixed_mean = decoupled_params(policy, online, target)
  kl_mean = gaussian_kl_per_dim(policy, target, fixed_stddev)
  kl_stddev = gaussian_kl_per_dim(policy, target, fixed_mean)
  if not per_dim:
    kl_mean = jnp.sum(kl_mean, axis=-1, keepdims=True)
    kl_stddev = jnp.sum(kl_stddev, axis=-1, keepdims=True)
  return kl_mean, kl_stddev


def decoupled_m_step(
    policy: policies.Gaussian,
    online: jax.Array,
    target: jax.Array,
    actions: jax.Array,
    weights: jax.Array,
    per_dim: bool,
) -> dict[str, jax.Array]:
  """The decoupled Gaussian M-step's per-state terms.

  Args:
    policy: the Gaussian policy family.
    online: ``[..., 2 D]`` online parameters (differentiated).
    target: ``[..., 2 D]`` target parameters.
    actions: ``[..., N, D]`` sampled actions.
    weights: ``[..., N]`` their E-step weights (summing to one).
    per_dim: one KL per action dimension (else their sum).

  Returns:
    ``loss_policy_mean``, ``loss_policy_stddev`` ``[...]``
      (``-sum_n w_n log pi(a_n)`` under the online mean, resp. std) and
      ``kl_mean``, ``kl_stddev`` ``[..., K]`` (``K``: ``D`` or 1).
  """
  target = jax.lax.stop_gradient(target)
  weights = jax.lax.stop_gradient(weights)
  fixed_stddev, fixed_mean = decoupled_params(policy, online, target)
  ce = lambda params: -jnp.sum(
      weights * sampled_log_probs(policy, params, actions), axis=-1
  )
  kl_mean, kl_stddev = decoupled_kls(policy, online, target, per_dim)
  return dict(
      loss_policy_mean=ce(fixed_stddev),
      loss_policy_stddev=ce(fixed_mean),
      kl_mean=kl_mean,
      kl_stddev=kl_stddev,
  )


def kl_penalty(alpha: jax.Array, kl: jax.Array) -> jax.Array:
  """``sum_k sg(alpha_k) KL_k``: ``[K]`` duals, ``[..., K]`` KLs -> ``[...]``."""
  return jnp.sum(jax.lax.stop_gradient(alpha) * kl, axis=-1)


def alphas_loss(alpha: jax.Array, kl: jax.Array, epsilon: float) -> jax.Array:
  """``sum_k alpha_k (epsilon - sg(KL_k))`` (``[...]``): the dual loss of
  per-dimension bounds (its gradient in ``alpha_k`` is ``epsilon - KL_k``)."""
  return jnp.sum(alpha * (epsilon - jax.lax.stop_gradient(kl)), axis=-1)


class DualRule(base.UpdateRule):
  """The skeleton of MPO and SPO: target network, duals and the M-step loss.

  The rule state holds the target parameters and the raw duals with their
  optimiser state. A subclass's ``unroll_meta_net`` calls ``target_out``,
  ``update_duals``, ``dual_stats`` and ``next_rule_state`` (or
  ``gaussian_e_step`` for a Gaussian policy, set up by ``for_policy``), and
  defines ``policy_loss`` and ``sampled_targets``.

  Args:
    hyper_params: overrides of ``default_hyper_params`` (``target_update_tau``,
      ``epsilon``, ``epsilon_policy``; continuous actions: ``epsilon_mean``,
      ``epsilon_stddev``).
    init_log_temperature: initial raw temperature (softplus: 3.0 -> 3.05).
    init_log_alpha: initial raw trust-region dual (continuous actions: the
      mean's).
    dual_optim: the duals' optimiser (e.g. ``dual_optimizer``).
    init_log_alpha_stddev: continuous actions: initial raw dual of the std's
      bound.
    per_dim_constraining: continuous actions: a KL bound per action dimension
      (duals ``[D]``), else on their sum (``[1]``).
  """

  supports_continuous_actions = True

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None,
      init_log_temperature: float,
      init_log_alpha: float,
      dual_optim: optax.GradientTransformation,
      init_log_alpha_stddev: float = 3.0,
      per_dim_constraining: bool = True,
  ):
    super().__init__(hyper_params)
    self._init_log_temperature = init_log_temperature
    self._init_log_alpha = init_log_alpha
    self._init_log_alpha_stddev = init_log_alpha_stddev
    self.per_dim_constraining = bool(per_dim_constraining)
    self._dual_optimizer = dual_optim
    self._gaussian: policies.Gaussian | None = None

  def for_policy(self, policy: policies.Policy) -> DualRule:
    """This rule for a categorical policy (itself) or a continuous one (a
    copy with Gaussian duals and the decoupled M-step)."""
    if not policy.is_continuous:
      return self
    rule = copy.copy(self)
    rule._gaussian = policy  # pylint: disable=protected-access
    return rule

  @property
  def gaussian(self) -> policies.Gaussian | None:
    """The continuous policy the rule is set up for, or None (discrete)."""
    return self._gaussian

  def checked_gaussian(
      self, inputs: types.UpdateRuleInputs
  ) -> policies.Gaussian | None:
    """``gaussian``, after checking at trace time that the rollout's actions are
    of the kind the rule was set up for (ValueError otherwise)."""
    continuous = inputs.action_policy.is_continuous
    if continuous != (self._gaussian is not None):
      kinds = ("discrete", "continuous")
      raise ValueError(
          f"{type(self).__name__} is set up for "
          f"{kinds[self._gaussian is not None]} actions but the rollout's are "
          f"{kinds[continuous]}: build it with the agent's policy "
          "(rule.for_policy(policy), as disco.agent.Agent does)."
      )
    return self._gaussian

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    del rng
    if self._gaussian is None:
      duals = init_duals(self._init_log_temperature, self._init_log_alpha)
    else:
      size = self._gaussian.action_size if self.per_dim_constraining else 1
      duals = init_gaussian_duals(
          self._init_log_temperature,
          self._init_log_alpha,
          self._init_log_alpha_stddev,
          size,
      )
    return dict(
        target_params=params,
        duals=duals,
        dual_opt_state=self._dual_optimizer.init(duals),
    )

  def target_out(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> types.AgentOuts:
    """The target network's outputs ``[T+1, B, ...]`` (no gradient)."""
    target_params = context.rule_state["target_params"]
    return jax.lax.stop_gradient(
        context.unroll_fn(target_params, inputs.observations)
    )

  def update_duals(
      self,
      dual_loss: Callable[..., tuple[jax.Array, Any]],
      context: base.LearnerContext,
      *args: Any,
  ) -> tuple[Any, dict[str, jax.Array], optax.OptState]:
    """One optimiser step on ``dual_loss(duals, *args)``.

    Returns:
      ``(aux, new_duals, new_dual_opt_state)`` where ``aux`` is the loss's
      auxiliary output at the current duals.
    """
    duals = context.rule_state["duals"]
    grads, aux = jax.grad(dual_loss, has_aux=True)(duals, *args)
    new_duals, opt_state = apply_dual_gradient(
        self._dual_optimizer,
        duals,
        context.rule_state["dual_opt_state"],
        grads,
        context.axis_name,
    )
    return aux, new_duals, opt_state

  def next_rule_state(
      self,
      context: base.LearnerContext,
      duals: dict[str, jax.Array],
      dual_opt_state: optax.OptState,
  ) -> types.RuleState:
    """The new duals, and the target network moved towards the parameters this
    step starts from (it lags the online network by one step)."""
    return dict(
        context.rule_state,
        duals=duals,
        dual_opt_state=dual_opt_state,
        target_params=context.moved_target_params(
            self.hyper_params["target_update_tau"]
        ),
    )

  def dual_stats(
      self,
      context: base.LearnerContext,
      inputs: types.UpdateRuleInputs,
      loss_eta: jax.Array,
      loss_alpha: jax.Array,
      kl_nonparametric: jax.Array,
      kl: jax.Array,
  ) -> dict[str, jax.Array]:
    """Logs of the duals (before their update) and of both KLs relative to their
    bounds; ``[T, B]`` terms are averaged over the loss's transitions."""
    duals = context.rule_state["duals"]
    mean = lambda x: ops.masked_mean(x, inputs.mask, context.axis_name)
    return dict(
        temperature=dual_value(duals["log_temperature"]),
        loss_temperature=mean(loss_eta),
        loss_alpha=mean(loss_alpha),
        kl_nonparametric=mean(kl_nonparametric),
        kl_nonparametric_rel=mean(kl_nonparametric)
        / self.hyper_params["epsilon"],
        kl_mean_rel=mean(kl) / self.hyper_params["epsilon_policy"],
    )

  # ------------------------------------------------ continuous actions
  def gaussian_dual_loss(self, duals, values, target, online, mask):
    """The sample-based temperature loss plus the decoupled M-step's dual
    losses, averaged over ``mask``.

    Args:
      duals: raw duals (``init_gaussian_duals``).
      values: ``[T, B, N]`` values of ``N`` prior samples per state (MPO:
        ``Q_target``; SPO: search advantages).
      target, online: ``[T, B, 2 D]`` target and (constant) online parameters.
      mask: ``[T, B]`` transitions to average over (None: all).

    Returns:
      ``(loss, (weights, kl_mean, kl_stddev, loss_temperature, loss_alpha_mean,
        loss_alpha_stddev))``.
    """
    hp = self.hyper_params
    eta = dual_value(duals["log_temperature"])
    weights, log_z = sample_e_step(values, eta)
    kl_mean, kl_stddev = decoupled_kls(
        self._gaussian, online, target, self.per_dim_constraining
    )
    loss_eta = temperature_loss(eta, log_z, hp["epsilon"])
    loss_mean = alphas_loss(
        dual_values(duals["log_alpha_mean"]), kl_mean, hp["epsilon_mean"]
    )
    loss_stddev = alphas_loss(
        dual_values(duals["log_alpha_stddev"]),
        kl_stddev,
        hp["epsilon_stddev"],
    )
    total = ops.masked_mean(loss_eta + loss_mean + loss_stddev, mask)
    return total, (
        weights,
        kl_mean,
        kl_stddev,
        loss_eta,
        loss_mean,
        loss_stddev,
    )

  def gaussian_e_step(
      self,
      inputs: types.UpdateRuleInputs,
      context: base.LearnerContext,
      values: jax.Array,
      target_logits: jax.Array,
  ) -> tuple[base.MetaOut, types.RuleState]:
    """The duals' step for continuous actions (``values``, ``target_logits``: as
    ``gaussian_dual_loss``).

    Returns:
      ``(meta_out, new_rule_state)``; ``meta_out`` holds ``target_logits``,
        ``e_step_weights`` ``[T, B, N]``, ``alpha_mean`` and ``alpha_stddev``
        ``[K]`` (pre-update duals) and ``stats``.
    """
    online = jax.lax.stop_gradient(inputs.agent_out["logits"][:-1])
    aux, new_duals, dual_opt_state = self.update_duals(
        self.gaussian_dual_loss,
        context,
        values,
        target_logits,
        online,
        inputs.mask,
    )
    weights, kl_mean, kl_stddev, loss_eta, loss_mean, loss_stddev = aux
    duals = context.rule_state["duals"]
    alpha_mean = dual_values(duals["log_alpha_mean"])
    alpha_stddev = dual_values(duals["log_alpha_stddev"])
    hp = self.hyper_params
    mean = lambda x: ops.masked_mean(x, inputs.mask, context.axis_name)
    kl_q = mean(nonparametric_kl(weights))
    stats = dict(
        temperature=dual_value(duals["log_temperature"]),
        alpha_mean=jnp.mean(alpha_mean),
        alpha_stddev=jnp.mean(alpha_stddev),
        loss_temperature=mean(loss_eta),
        loss_alpha_mean=mean(loss_mean),
        loss_alpha_stddev=mean(loss_stddev),
        kl_nonparametric=kl_q,
        kl_nonparametric_rel=kl_q / hp["epsilon"],
        kl_mean_rel=mean(kl_mean) / hp["epsilon_mean"],
        kl_stddev_rel=mean(kl_stddev) / hp["epsilon_stddev"],
        entropy_target=mean(self._gaussian.entropy(target_logits)),
    )
    meta_out = dict(
        target_logits=target_logits,
        e_step_weights=jax.lax.stop_gradient(weights),
        alpha_mean=alpha_mean,
        alpha_stddev=alpha_stddev,
        stats=stats,
    )
    return meta_out, self.next_rule_state(context, new_duals, dual_opt_state)

  @abc.abstractmethod
  def sampled_targets(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> tuple[jax.Array, jax.Array]:
    """Continuous actions: the M-step's ``[T, B, N, D]`` sampled actions
    and their ``[T, B, N]`` weights (constants)."""

  def gaussian_agent_loss(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    """The decoupled M-step ``[T, B]``: ``CE_mean + CE_stddev + sum_k
    sg(alpha_mean_k) KL_mean_k + sum_k sg(alpha_stddev_k) KL_stddev_k``."""
    logits = inputs.agent_out["logits"][:-1]
    actions, weights = self.sampled_targets(inputs, meta_out)
    terms = decoupled_m_step(
        self._gaussian,
        logits,
        meta_out["target_logits"],
        actions,
        weights,
        self.per_dim_constraining,
    )
    loss_kl_mean = kl_penalty(meta_out["alpha_mean"], terms["kl_mean"])
    loss_kl_stddev = kl_penalty(meta_out["alpha_stddev"], terms["kl_stddev"])
    loss_policy = terms["loss_policy_mean"] + terms["loss_policy_stddev"]
    logs = dict(
        meta_out["stats"],
        **terms,
        loss_policy=loss_policy,
        loss_kl_mean=loss_kl_mean,
        loss_kl_stddev=loss_kl_stddev,
        entropy_online=self._gaussian.entropy(logits),
    )
    return loss_policy + loss_kl_mean + loss_kl_stddev, logs

  # -------------------------------------------------------- the M-step
  @abc.abstractmethod
  def policy_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      logits: jax.Array,
  ) -> jax.Array:
    """``[T, B]`` cross-entropy from the E-step's policy to the online
    policy ``logits`` ``[T, B, A]`` (discrete actions)."""

  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    """The M-step: ``policy_loss + sg(alpha) * KL(pi_target || pi_online)``
    ``[T, B]`` (``meta_out`` needs ``alpha``, ``target_logits``, ``stats``);
    for continuous actions ``gaussian_agent_loss``."""
    del backprop  # No meta-parameters.
    inputs.check_shapes()
    if self.checked_gaussian(inputs) is not None:
      return self.gaussian_agent_loss(inputs, meta_out)
    logits = inputs.agent_out["logits"][:-1]
    loss_policy = self.policy_loss(inputs, meta_out, logits)
    alpha = jax.lax.stop_gradient(meta_out["alpha"])
    loss_kl = alpha * ops.categorical_kl(meta_out["target_logits"], logits)
    logs = dict(
        meta_out["stats"],
        alpha=alpha,
        loss_policy=loss_policy,
        loss_kl=loss_kl,
        entropy_online=ops.softmax_entropy(logits),
    )
    return loss_policy + loss_kl, logs
