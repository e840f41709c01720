"""Discrete Maximum a-posteriori Policy Optimisation (MPO).

The agent predicts a policy (``logits``) and one action value per action
(``q``, a flat output of shape ``[A]``). A Polyak-averaged copy of the agent
(the *target* network) supplies the prior policy ``pi_target`` and the action
values used by both steps of MPO:

* E-step (exact over all actions, weighted by the prior):
  ``q(a|s) ∝ pi_target(a|s) exp(Q_target(s, a) / eta)``. The temperature
  ``eta`` is a dual variable trained on
  ``eta * (epsilon + mean_s log sum_a pi_target(a|s) exp(Q(s, a) / eta))``,
  whose gradient is ``epsilon - KL(q || pi_target)``: ``eta`` grows when the
  realised KL exceeds ``epsilon``.
* M-step (categorical): the online policy minimises ``CE(q, pi_online)`` plus
  ``sg(alpha) * KL(pi_target || pi_online)``; the trust-region dual ``alpha``
  is trained on ``alpha * (epsilon_policy - sg(KL))``.

Both duals use a softplus parameterisation (``softplus(raw) + 1e-8``; raw
values are clamped at -18 after every step) and have their own optimiser
(global-norm clipping then Adam). The duals, their optimiser state and the
target parameters are the rule's state; the duals are updated inside
``unroll_meta_net`` from the rollout, with the pre-update values used in the
agent's loss, so the agent needs no knowledge of them. The target
parameters move (Polyak, ``target_update_tau``) towards the parameters the
learner step starts from, i.e. they lag the online ones by one step.

``q`` is regressed on lambda-returns or Retrace targets computed from the
target network, bootstrapping with ``V(s) = sum_a pi_target(a|s) Q_target(s,
a)`` (the exact expectation).

The loss building blocks below are shared with SPO (``disco.update_rules.spo``)
which uses the sample-based E-step.
"""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import rlax

from disco import types
from disco.update_rules import base
from disco.update_rules import input_transforms
from disco.value_fns import returns

# Discrete MPO's published defaults, adapted to a single shared network.
MPO_HYPER_PARAMS = dict(
    discount_factor=0.99,
    td_lambda=0.95,
    epsilon=0.01,
    epsilon_policy=1e-3,
    target_update_tau=0.005,
    q_cost=1.0,
)

DUAL_EPSILON = 1e-8
MIN_RAW_DUAL = -18.0
Q_TARGETS = ("lambda", "retrace")


# ------------------------------------------------------------------- duals
def init_duals(init_log_temperature: float, init_log_alpha: float
               ) -> dict[str, jax.Array]:
  """Raw (pre-softplus) dual variables, each ``[1]`` float32."""
  return dict(
      log_temperature=jnp.full([1], init_log_temperature, jnp.float32),
      log_alpha=jnp.full([1], init_log_alpha, jnp.float32))


def dual_value(raw: jax.Array) -> jax.Array:
  """Scalar ``softplus(raw) + 1e-8`` of a ``[1]`` raw dual."""
  return jax.nn.softplus(jnp.squeeze(raw)) + DUAL_EPSILON


def clamp_duals(duals: dict[str, jax.Array]) -> dict[str, jax.Array]:
  return jax.tree.map(lambda x: jnp.maximum(x, MIN_RAW_DUAL), duals)


def dual_optimizer(learning_rate: float, max_grad_norm: float
                   ) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                     optax.adam(learning_rate, eps=1e-5))


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


def polyak(target: types.Params, online: types.Params, tau: float
           ) -> types.Params:
  """``(1 - tau) * target + tau * online``."""
  return optax.incremental_update(online, target, tau)


# --------------------------------------------------------- loss pieces
def exact_e_step(q_values: jax.Array, prior_logits: jax.Array,
                 temperature: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Prior-weighted non-parametric policy over all actions.

  Args:
    q_values: ``[..., A]`` action values (treated as constants).
    prior_logits: ``[..., A]`` logits of the prior (target) policy.
    temperature: scalar ``eta``.

  Returns:
    ``(log_q [..., A], log_normaliser [...])`` with
    ``log_q = Q/eta + log pi_prior - log_normaliser``.
  """
  z = (jax.lax.stop_gradient(q_values) / temperature
       + jax.nn.log_softmax(prior_logits, axis=-1))
  log_normaliser = jax.nn.logsumexp(z, axis=-1)
  return z - log_normaliser[..., None], log_normaliser


def sample_e_step(advantages: jax.Array, temperature: jax.Array
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


def temperature_loss(temperature: jax.Array, log_normaliser: jax.Array,
                     epsilon: float) -> jax.Array:
  """Per-state dual loss of the E-step: ``eta * (epsilon + log Z)``."""
  return temperature * (epsilon + log_normaliser)


def categorical_cross_entropy(target_log_probs: jax.Array,
                              logits: jax.Array) -> jax.Array:
  """``-sum_a p(a) log pi(a)`` with ``p = exp(target_log_probs)``."""
  return -jnp.sum(jnp.exp(target_log_probs) * jax.nn.log_softmax(logits),
                  axis=-1)


def sampled_cross_entropy(logits: jax.Array, actions: jax.Array,
                          weights: jax.Array) -> jax.Array:
  """``-sum_n w_n log pi(a_n)``: logits ``[..., A]``, actions/weights
  ``[..., N]`` -> ``[...]``."""
  log_pi = jnp.take_along_axis(jax.nn.log_softmax(logits),
                               actions.astype(jnp.int32), axis=-1)
  return -jnp.sum(weights * log_pi, axis=-1)


def policy_kl(target_logits: jax.Array, online_logits: jax.Array
              ) -> jax.Array:
  """Trust-region KL ``KL(pi_target || pi_online)`` per state."""
  log_p = jax.nn.log_softmax(target_logits, axis=-1)
  log_q = jax.nn.log_softmax(online_logits, axis=-1)
  return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)


def alpha_loss(alpha: jax.Array, kl: jax.Array, epsilon_policy: float
               ) -> jax.Array:
  """Per-state dual loss of the M-step: ``alpha * (eps_pi - sg(KL))``."""
  return alpha * (epsilon_policy - jax.lax.stop_gradient(kl))


def entropy(logits: jax.Array) -> jax.Array:
  """Entropy of the softmax policy of ``logits`` ``[..., A]``."""
  return distrax.Softmax(logits).entropy()


def global_mean(x: jax.Array, axis_name: str | None) -> jax.Array:
  x = jnp.mean(x)
  return x if axis_name is None else jax.lax.pmean(x, axis_name)


# ------------------------------------------------------------------ rule
class MPO(base.UpdateRule):
  """Discrete MPO with an exact, prior-weighted E-step.

  Args:
    q_target: ``"lambda"`` (lambda-returns bootstrapping on the target
      network's ``V``) or ``"retrace"`` (Retrace with importance weights
      ``pi_target / mu`` clipped at 1).
    init_log_temperature: initial raw temperature (softplus: 3.0 -> 3.05).
    init_log_alpha: initial raw trust-region dual.
    dual_lr: Adam learning rate of the duals.
    dual_max_grad_norm: global-norm clip of the dual gradient.
  """

  def __init__(
      self,
      q_target: str = "lambda",
      init_log_temperature: float = 3.0,
      init_log_alpha: float = 3.0,
      dual_lr: float = 1e-2,
      dual_max_grad_norm: float = 40.0,
  ):
    if q_target not in Q_TARGETS:
      raise ValueError(
          f"Unknown q_target {q_target!r}; use one of {', '.join(Q_TARGETS)}.")
    self._q_target = q_target
    self._init_log_temperature = init_log_temperature
    self._init_log_alpha = init_log_alpha
    self._dual_optimizer = dual_optimizer(dual_lr, dual_max_grad_norm)

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return dict(logits=base.logits_spec(num_actions),
                q=types.ArraySpec((num_actions,), np.float32))

  def init_meta_state(self, rng, params):
    del rng
    duals = init_duals(self._init_log_temperature, self._init_log_alpha)
    return dict(target_params=params, duals=duals,
                dual_opt_state=self._dual_optimizer.init(duals))

  # ---------------------------------------------------------------- targets
  def _q_targets(self, inputs, target_out, hyper_params):
    """``[T, B]`` targets for ``Q(s_t, a_t)`` from the target network."""
    target_q = target_out["q"]
    target_v = jnp.sum(jax.nn.softmax(target_out["logits"]) * target_q, -1)
    env_discounts = 1.0 - inputs.is_terminal.astype(jnp.float32)
    gamma, lambda_ = hyper_params["discount_factor"], hyper_params["td_lambda"]
    if self._q_target == "lambda":
      per_sequence = jax.vmap(rlax.lambda_returns, in_axes=(1, 1, 1, None),
                              out_axes=1)
      return per_sequence(inputs.rewards, gamma * env_discounts,
                          target_v[1:], lambda_)
    actions = inputs.actions[:-1]
    rho = returns.importance_weights(
        target_out["logits"][:-1], inputs.behaviour_agent_out["logits"][:-1],
        actions)
    outs = returns.retrace(
        rewards=inputs.rewards, env_discounts=env_discounts, actions=actions,
        rho=rho, values=target_v, q_values=target_q, discount=gamma,
        lambda_=lambda_)
    return outs.q_target

  def dual_loss(self, duals, target_q, target_logits, online_logits,
                hyper_params):
    """The part of the MPO loss that depends on the duals (mean over states).

    Args:
      duals: raw duals (``init_duals``).
      target_q: ``[..., A]`` action values of the E-step.
      target_logits: ``[..., A]`` prior (target) policy logits.
      online_logits: ``[..., A]`` online policy logits (constants here).
      hyper_params: needs ``epsilon`` and ``epsilon_policy``.

    Returns:
      ``(loss, (log_q, kl, loss_temperature, loss_alpha))``; per-state
      entries are ``[...]``. The E-step weights depend on ``eta``, so the
      policy cross-entropy contributes to the temperature's gradient as well.
    """
    eta = dual_value(duals["log_temperature"])
    alpha = dual_value(duals["log_alpha"])
    log_q, log_z = exact_e_step(target_q, target_logits, eta)
    loss_policy = categorical_cross_entropy(log_q, online_logits)
    kl = policy_kl(target_logits, online_logits)
    loss_eta = temperature_loss(eta, log_z, hyper_params["epsilon"])
    loss_alpha = alpha_loss(alpha, kl, hyper_params["epsilon_policy"])
    total = jnp.mean(loss_policy + loss_eta + loss_alpha)
    return total, (log_q, kl, loss_eta, loss_alpha)

  def unroll_meta_net(self, meta_params, params, meta_state, inputs,
                      hyper_params, unroll_fn, rng, axis_name=None):
    del meta_params, rng
    target_out = jax.lax.stop_gradient(
        unroll_fn(meta_state["target_params"], inputs.observations))
    target_logits = target_out["logits"][:-1]
    target_q = target_out["q"][:-1]
    online_logits = jax.lax.stop_gradient(inputs.agent_out["logits"][:-1])
    epsilon = hyper_params["epsilon"]
    epsilon_policy = hyper_params["epsilon_policy"]

    duals = meta_state["duals"]
    grads, (log_q, kl, loss_eta, loss_alpha) = jax.grad(
        self.dual_loss, has_aux=True)(duals, target_q, target_logits,
                                      online_logits, hyper_params)
    new_duals, dual_opt_state = apply_dual_gradient(
        self._dual_optimizer, duals, meta_state["dual_opt_state"], grads,
        axis_name)

    q_target = self._q_targets(inputs, target_out, hyper_params)
    eta = dual_value(duals["log_temperature"])
    kl_q = jnp.sum(jnp.exp(log_q) * (log_q - jax.nn.log_softmax(
        target_logits)), axis=-1)
    meta_out = dict(
        e_step_log_probs=log_q,
        target_logits=target_logits,
        alpha=dual_value(duals["log_alpha"]),
        q_target=jax.lax.stop_gradient(q_target),
        stats=dict(
            temperature=eta,
            loss_temperature=global_mean(loss_eta, axis_name),
            loss_alpha=global_mean(loss_alpha, axis_name),
            kl_nonparametric=global_mean(kl_q, axis_name),
            kl_q_rel=global_mean(kl_q, axis_name) / epsilon,
            kl_mean_rel=global_mean(kl, axis_name) / epsilon_policy,
            entropy_target=global_mean(entropy(target_logits), axis_name),
            q_min=global_mean(jnp.min(target_q, -1), axis_name),
            q_max=global_mean(jnp.max(target_q, -1), axis_name)))
    new_state = dict(
        meta_state,
        duals=new_duals,
        dual_opt_state=dual_opt_state,
        target_params=polyak(meta_state["target_params"], params,
                             hyper_params["target_update_tau"]))
    return meta_out, new_state

  # ----------------------------------------------------------------- losses
  def agent_loss(self, inputs, meta_out, hyper_params, backprop):
    del hyper_params, backprop  # No meta-parameters.
    logits = inputs.agent_out["logits"][:-1]
    loss_policy = categorical_cross_entropy(
        jax.lax.stop_gradient(meta_out["e_step_log_probs"]), logits)
    kl = policy_kl(meta_out["target_logits"], logits)
    alpha = jax.lax.stop_gradient(meta_out["alpha"])
    loss_kl = alpha * kl
    logs = dict(meta_out["stats"],
                alpha=alpha,
                loss_policy=loss_policy,
                loss_kl=loss_kl,
                entropy_online=entropy(logits))
    return loss_policy + loss_kl, logs

  def agent_loss_no_meta(self, inputs, meta_out, hyper_params):
    q_a = input_transforms.select_action(
        inputs.agent_out["q"][:-1], inputs.actions[:-1])
    td = meta_out["q_target"] - q_a
    q_loss = 0.5 * jnp.square(td)
    logs = dict(q_loss=q_loss, q_target=meta_out["q_target"], q_td=td)
    return hyper_params["q_cost"] * q_loss, logs
