"""What MPO and SPO share: dual variables, E-steps, the M-step's losses and
the rule skeleton (``DualRule``).

Both rules keep two dual variables in their rule state, each softplus
parameterised (``softplus(raw) + 1e-8``, raw values clamped at -18 after
every step) with its own optimiser (global-norm clipping, then Adam): the
temperature ``eta`` of the E-step and the trust-region weight ``alpha`` of the
M-step. MPO's E-step is exact over all actions (``exact_e_step``); SPO's
weighs actions sampled by its search (``sample_e_step``). Both keep a
Polyak-averaged target network for the prior policy and the critic targets.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import ops
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


def dual_value(raw: jax.Array) -> jax.Array:
  """Scalar ``softplus(raw) + 1e-8`` of a ``[1]`` raw dual."""
  return jax.nn.softplus(jnp.squeeze(raw)) + DUAL_EPSILON


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
  """Non-parametric weights over ``N`` actions sampled from the prior.

  Args:
    advantages: ``[..., N]`` values of the sampled actions (constants).
    temperature: scalar ``eta``.

  Returns:
    ``(weights [..., N], log_normaliser [...])``; ``weights`` sum to one and
    ``log_normaliser = logsumexp_n(adv / eta) - log N`` estimates
    ``log E_prior[exp(adv / eta)]``.
  """
  tempered = jax.lax.stop_gradient(advantages) / temperature
  num = advantages.shape[-1]
  log_normaliser = jax.nn.logsumexp(tempered, axis=-1) - np.log(num)
  return jax.nn.softmax(tempered, axis=-1), log_normaliser


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


class DualRule(base.UpdateRule):
  """The skeleton of MPO and SPO: target network, duals and M-step loss.

  The rule state holds the target parameters, the raw duals and their
  optimiser state. ``unroll_meta_net`` of a subclass calls ``target_out``,
  ``update_duals`` (with the pre-update duals going into its targets),
  ``dual_stats`` and ``next_rule_state``; it defines ``policy_loss``, the
  E-step part of the shared M-step ``agent_loss``.

  Args:
    hyper_params: overrides of the rule's ``default_hyper_params`` (which
      need ``target_update_tau``, ``epsilon`` and ``epsilon_policy``).
    init_log_temperature: initial raw temperature (softplus: 3.0 -> 3.05).
    init_log_alpha: initial raw trust-region dual.
    dual_optim: the optimiser of the duals (e.g. ``dual_optimizer``).
  """

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None,
      init_log_temperature: float,
      init_log_alpha: float,
      dual_optim: optax.GradientTransformation,
  ):
    super().__init__(hyper_params)
    self._init_log_temperature = init_log_temperature
    self._init_log_alpha = init_log_alpha
    self._dual_optimizer = dual_optim

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    del rng
    duals = init_duals(self._init_log_temperature, self._init_log_alpha)
    return dict(
        target_params=params,
        duals=duals,
        dual_opt_state=self._dual_optimizer.init(duals),
    )

  def target_out(
      self, inputs: base.Inputs, context: base.LearnerContext
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
    """The new duals, and the target network moved towards the parameters
    this step starts from (so it lags the online network by one step)."""
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
      inputs: base.Inputs,
      loss_eta: jax.Array,
      loss_alpha: jax.Array,
      kl_nonparametric: jax.Array,
      kl: jax.Array,
  ) -> dict[str, jax.Array]:
    """Logs of the duals (before their update) and of both KLs, relative to
    their bounds; per-transition arrays ``[T, B]`` are averaged over the
    loss's transitions (and ``context.axis_name``)."""
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

  @abc.abstractmethod
  def policy_loss(
      self, inputs: base.Inputs, meta_out: base.MetaOut, logits: jax.Array
  ) -> jax.Array:
    """``[T, B]`` cross-entropy from the E-step's policy to the online
    policy ``logits`` ``[T, B, A]``."""

  def agent_loss(
      self, inputs: base.Inputs, meta_out: base.MetaOut, backprop: bool
  ) -> base.LossAndLogs:
    """The M-step: ``policy_loss + sg(alpha) * KL(pi_target || pi_online)``
    ``[T, B]`` (``meta_out`` needs ``alpha``, ``target_logits``, ``stats``)."""
    del backprop  # No meta-parameters.
    inputs.check_shapes()
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
