"""Sequential Monte Carlo Policy Optimisation (SPO), after Stoix's ``ff_spo``.

Acting is an SMC search over copies of the (jittable) environment state: ``N``
particles per stream start from root actions ``a ~ pi(.|s)``; for
``search_depth`` steps each steps the environment (``env.step`` vmapped over
particles; copies share the stream's key), draws its next action from the policy
and adds ``r + gamma_s * d * V(s') - V(s)`` to its log-weight; particles are
resampled from ``softmax(w / eta)`` every ``resampling_period`` steps or when
the effective sample size falls under ``ess_threshold * N``. The action played
is a root action drawn from ``softmax(w / eta)``; root actions, weights and
advantages go into the rollout (``UpdateRuleInputs.actor_extras``).

Learning is MPO's (``mpo_common``): cross-entropy to the stored search weights
plus ``sg(alpha) * KL(pi_target || pi_online)``, the temperature ``eta`` trained
on the sample-based E-step loss, the critic ``v`` on GAE(lambda) targets of the
target network; continuous actions use the decoupled M-step and have no root
noise.

Unlike Stoix: a root action's advantage stops accumulating when its particle's
episode ends, step ``d`` weighted ``(gamma_s * lambda_s)^d``; next actions are
resampled with their particles; critic targets do not cross truncations; one
network and one learner step per rollout (larger learning rates and Polyak
step); every loss averages over the agent's loss mask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp

from disco import ops
from disco import policies
from disco import types
from disco.update_rules import base
from disco.update_rules import mpo_common as ml
from disco.value_fns import returns

# SPO's published (ff_spo.yaml) loss settings; epsilon_mean and
# epsilon_stddev are those of ff_spo_continuous.yaml.
SPO_HYPER_PARAMS = dict(
    discount_factor=0.99,
    td_lambda=0.95,
    vf_coef=1.0,
    epsilon=0.5,
    epsilon_policy=1e-3,
    epsilon_mean=0.05,
    epsilon_stddev=5e-4,
    target_update_tau=0.005,
)

RESAMPLING_MODES = ("period", "ess")
EXTRA_KEYS = ("search_actions", "search_weights", "search_advantages")


@chex.dataclass(frozen=True)
class Particles:
  """``N`` search particles for each of ``B`` streams (leaves ``[B, N, ...]``).

  Attributes:
    env_state: each particle's environment state.
    root_actions: the root action it descends from (int32, or ``[..., D]``
      float32).
    log_weights: accumulated advantages since the last resampling.
    value: ``V`` of its current state (0 after termination).
    terminal: whether its episode has ended.
    depth: steps taken.
    gae: this slot's root-action advantage,
      ``sum_d (gamma_s * lambda_s)^d delta_d`` while the episode lasts (not
      resampled).
    next_actions: actions taken next.
  """

  env_state: Any
  root_actions: jax.Array
  log_weights: jax.Array
  value: jax.Array
  terminal: jax.Array
  depth: jax.Array
  gae: jax.Array
  next_actions: jax.Array


def broadcast_streams(tree: Any, num: int) -> Any:
  """Leaves ``[B, ...]`` -> ``[B, num, ...]`` (copies along a new axis 1)."""
  return jax.tree.map(
      lambda x: jnp.broadcast_to(
          jnp.expand_dims(x, 1), (x.shape[0], num) + x.shape[1:]
      ),
      tree,
  )


def effective_sample_size(logits: jax.Array) -> jax.Array:
  """``1 / sum_n w_n^2`` with ``w = softmax(logits)``: ``[B, N]`` -> ``[B]``."""
  weights = jax.nn.softmax(logits, axis=-1)
  return 1.0 / jnp.sum(jnp.square(weights), axis=-1)


def resample(
    particles: Particles, rng: jax.Array, logits: jax.Array
) -> Particles:
  """Draws ``N`` particles per stream i.i.d. from ``softmax(logits)``.

  Every field is gathered except ``gae`` (it stays with its root-action slot);
  log-weights restart at zero.

  Args:
    particles: leaves ``[B, N, ...]``.
    rng: random key.
    logits: ``[B, N]`` resampling logits.
  """
  batch, num = logits.shape
  idx = jax.vmap(lambda k, x: jax.random.categorical(k, x, shape=(num,)))(
      jax.random.split(rng, batch), logits
  )
  gathered = jax.vmap(lambda p, i: jax.tree.map(lambda x: x[i], p))(
      particles, idx
  )
  return gathered.replace(
      log_weights=jnp.zeros_like(particles.log_weights), gae=particles.gae
  )


def _select_streams(
    cond: jax.Array, new: Particles, old: Particles
) -> Particles:
  """Per stream (``cond`` ``[B]``) picks ``new`` or ``old``."""
  return jax.tree.map(
      lambda n, o: jnp.where(
          cond.reshape(cond.shape + (1,) * (o.ndim - 1)), n, o
      ),
      new,
      old,
  )


def check_search_env(
    env: Any, env_state: Any = None, batch: int | None = None
) -> None:
  """Raises ValueError unless ``env`` is jittable and every leaf of
  ``env_state`` (if given) leads with the ``batch`` streams."""
  if env is None:
    raise ValueError(
        "SPO searches over copies of the environment state but the acting "
        "context has no environment: pass env= and env_state= to "
        "Agent.actor_step (EvalLoop does so for rules with "
        "needs_env_copies)."
    )
  if not getattr(env, "is_jittable", False):
    raise ValueError(
        f"SPO needs a jittable environment to copy and step during search; "
        f"got {type(env).__name__} (is_jittable=False). Use a jittable "
        "environment such as 'catch' instead of 'catch_dm_env'."
    )
  if env_state is None:
    return
  for path, leaf in jax.tree_util.tree_leaves_with_path(env_state):
    shape = tuple(getattr(leaf, "shape", jnp.shape(leaf)))
    if not shape or shape[0] != batch:
      raise ValueError(
          "SPO copies each stream's environment state, so every leaf of the "
          f"state must lead with the {batch} streams; "
          f"{type(env).__name__}'s {jax.tree_util.keystr(path)} has shape "
          f"{list(shape)} (keep per-stream state, e.g. one PRNG "
          "key per stream)."
      )


class SPO(ml.DualRule):
  """SPO: SMC search over environment copies for acting, MPO-style learning.

  Args:
    hyper_params: overrides of ``SPO_HYPER_PARAMS``.
    num_particles: particles ``N`` per stream.
    search_depth: environment steps per search.
    resampling_mode: ``"period"`` (every ``resampling_period`` steps) or
      ``"ess"`` (per stream, when the effective sample size is below
      ``ess_threshold * N``).
    resampling_period: steps between resamplings in period mode.
    ess_threshold: fraction of ``N`` that triggers resampling in ess mode.
    adaptive_temperature: use the temperature dual for resampling and read-out;
      otherwise ``fixed_temperature``.
    fixed_temperature: temperature when not adaptive.
    search_gamma: discount inside the search.
    search_gae_lambda: lambda of the per-root-action advantage estimate.
    root_dirichlet_alpha: Dirichlet concentration of the root noise.
    root_dirichlet_fraction: weight of the root noise (0 disables it; discrete
      actions only).
    init_log_temperature, init_log_alpha, dual_lr, dual_max_grad_norm: the duals
      (see ``mpo_common.DualRule``).
    per_dim_constraining: continuous actions: one KL bound per action dimension
      (else one on their sum).
    init_log_alpha_stddev: continuous actions: initial raw dual of the standard
      deviation's bound (``init_log_alpha`` is the mean's).
  """

  needs_env_copies = True
  default_hyper_params = SPO_HYPER_PARAMS

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      num_particles: int = 16,
      search_depth: int = 4,
      resampling_mode: str = "period",
      resampling_period: int = 4,
      ess_threshold: float = 0.5,
      adaptive_temperature: bool = True,
      fixed_temperature: float = 0.5,
      search_gamma: float = 1.0,
      search_gae_lambda: float = 1.0,
      root_dirichlet_alpha: float = 1.0,
      root_dirichlet_fraction: float = 0.0,
      init_log_temperature: float = 3.0,
      init_log_alpha: float = 3.0,
      dual_lr: float = 1e-3,
      dual_max_grad_norm: float = 0.5,
      per_dim_constraining: bool = True,
      init_log_alpha_stddev: float = 3.0,
  ):
    super().__init__(
        hyper_params,
        init_log_temperature,
        init_log_alpha,
        ml.dual_optimizer(dual_lr, dual_max_grad_norm),
        init_log_alpha_stddev=init_log_alpha_stddev,
        per_dim_constraining=per_dim_constraining,
    )
    if resampling_mode not in RESAMPLING_MODES:
      raise ValueError(
          f"Unknown resampling_mode {resampling_mode!r}; use "
          f"one of {', '.join(RESAMPLING_MODES)}."
      )
    for name, value in (
        ("num_particles", num_particles),
        ("search_depth", search_depth),
        ("resampling_period", resampling_period),
    ):
      if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value}.")
    self.num_particles = int(num_particles)
    self.search_depth = int(search_depth)
    self.resampling_mode = resampling_mode
    self.resampling_period = int(resampling_period)
    self.ess_threshold = float(ess_threshold)
    self.adaptive_temperature = bool(adaptive_temperature)
    self.fixed_temperature = float(fixed_temperature)
    self.search_gamma = float(search_gamma)
    self.search_gae_lambda = float(search_gae_lambda)
    self.root_dirichlet_alpha = float(root_dirichlet_alpha)
    self.root_dirichlet_fraction = float(root_dirichlet_fraction)

  def check_env(self, env: Any) -> None:
    """``check_search_env`` on the state shapes of a reset (nothing runs)."""
    state, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    check_search_env(env, state, env.batch_size)

  def for_policy(self, policy: policies.Policy) -> SPO:
    if policy.is_continuous and self.root_dirichlet_fraction > 0.0:
      raise ValueError(
          "SPO's root noise is Dirichlet noise over discrete actions: set "
          "rule_kwargs.root_dirichlet_fraction=0 for continuous actions."
      )
    return super().for_policy(policy)

  def flat_output_spec(self, num_actions: int) -> dict[str, types.ArraySpec]:
    return base.policy_value_spec(num_actions)

  # ------------------------------------------------------------- searching
  def search_temperature(self, rule_state: types.RuleState | None) -> jax.Array:
    if not self.adaptive_temperature:
      return jnp.asarray(self.fixed_temperature, jnp.float32)
    if rule_state is None:
      raise ValueError(
          "SPO with adaptive_temperature reads the temperature dual from the "
          "rule state: pass rule_state to Agent.actor_step, or set "
          "adaptive_temperature=False."
      )
    return ml.dual_value(rule_state["duals"]["log_temperature"])

  def _root_logits(self, rng, logits):
    if self.root_dirichlet_fraction <= 0.0:
      return logits
    noise = jax.random.dirichlet(
        rng,
        jnp.full(logits.shape[-1:], self.root_dirichlet_alpha),
        shape=logits.shape[:-1],
    )
    probs = (1.0 - self.root_dirichlet_fraction) * jax.nn.softmax(
        logits
    ) + self.root_dirichlet_fraction * noise
    return jnp.log(probs)

  def _acting_gaussian(
      self, context: base.ActingContext
  ) -> policies.Gaussian | None:
    """``gaussian``, checked against the acting context's policy."""
    policy = context.policy
    if policy is not None and policy.is_continuous != (
        self.gaussian is not None
    ):
      raise ValueError(
          f"SPO is set up for {'continuous' if self.gaussian else 'discrete'}"
          f" actions but acts with the policy {policy}: build it with the "
          "agent's policy (rule.for_policy(policy), as disco.agent.Agent "
          "does)."
      )
    return self.gaussian

  def _sample(self, rng: jax.Array, logits: jax.Array) -> jax.Array:
    """One action per row of ``logits`` ``[..., P]``."""
    if self.gaussian is None:
      return jax.random.categorical(rng, logits).astype(jnp.int32)
    return self.gaussian.sample(rng, logits)

  def _evaluate(self, context: base.ActingContext, observations):
    """Network on ``[B, N, ...]`` observations: (logits, value)."""
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), observations)
    out = context.apply_fn(context.params, flat)
    batch, num = jax.tree.leaves(observations)[0].shape[:2]
    logits = out["logits"].reshape((batch, num, -1))
    value = out["v"].reshape((batch, num))
    return logits, value

  def _search_step(self, context, temperature, particles, depth, rng):
    """Steps every particle once, updates weights, maybe resamples."""
    step_rng, resample_rng = jax.random.split(rng)
    # The environment acts on [B] streams; vmap it over the particle axis.
    env_state, timestep = jax.vmap(
        context.env.step, in_axes=(1, 1), out_axes=1
    )(particles.env_state, particles.next_actions)
    logits, value = self._evaluate(context, timestep.observation)
    next_actions = self._sample(step_rng, logits)
    env_discount = timestep.discount.astype(jnp.float32)
    # Episodes end at terminations and truncations; a truncated one still
    # bootstraps through its value.
    ended = timestep.step_type == types.LAST
    value = env_discount * self.search_gamma * value
    # Steps after the episode's end (the environment has reset) add nothing.
    alive = 1.0 - particles.terminal.astype(jnp.float32)
    delta = timestep.reward + value - particles.value
    log_weights = particles.log_weights + alive * delta
    scale = (self.search_gamma * self.search_gae_lambda) ** particles.depth
    stepped = Particles(
        env_state=env_state,
        root_actions=particles.root_actions,
        log_weights=log_weights,
        value=value,
        terminal=jnp.logical_or(particles.terminal, ended),
        depth=particles.depth + 1,
        gae=particles.gae + alive * scale * delta,
        next_actions=next_actions,
    )
    resample_logits = log_weights / temperature
    if self.resampling_mode == "period":
      should = jnp.full(
          log_weights.shape[:1], (depth + 1) % self.resampling_period == 0
      )
    else:
      should = (
          effective_sample_size(resample_logits)
          < self.ess_threshold * self.num_particles
      )
    resampled = resample(stepped, resample_rng, resample_logits)
    return _select_streams(should, resampled, stepped), should

  def search(
      self,
      rng: jax.Array,
      agent_out: types.AgentOuts,
      context: base.ActingContext,
  ) -> tuple[Particles, jax.Array]:
    """Runs the SMC search from ``context.env_state``.

    Returns:
      ``(particles, temperature)`` after ``search_depth`` steps.
    """
    batch = agent_out["logits"].shape[0]
    check_search_env(context.env, context.env_state, batch)
    gaussian = self._acting_gaussian(context)
    temperature = self.search_temperature(context.rule_state)
    root_rng, noise_rng, search_rng = jax.random.split(rng, 3)
    num = self.num_particles
    if gaussian is None:
      logits = self._root_logits(noise_rng, agent_out["logits"])
      root_actions = jax.random.categorical(
          root_rng, logits[:, None, :], shape=(batch, num)
      ).astype(jnp.int32)
    else:
      logits = agent_out["logits"]
      root_actions = gaussian.sample(
          root_rng,
          jnp.broadcast_to(logits[:, None], (batch, num, logits.shape[-1])),
      )
    zeros = jnp.zeros((batch, num), jnp.float32)
    particles = Particles(
        env_state=broadcast_streams(context.env_state, num),
        root_actions=root_actions,
        log_weights=zeros,
        value=broadcast_streams(agent_out["v"][:, 0], num),
        terminal=jnp.zeros((batch, num), bool),
        depth=jnp.zeros((batch, num), jnp.int32),
        gae=zeros,
        next_actions=root_actions,
    )

    def body(p, xs):
      depth, step_rng = xs
      return self._search_step(context, temperature, p, depth, step_rng)

    particles, _ = jax.lax.scan(
        body,
        particles,
        (
            jnp.arange(self.search_depth),
            jax.random.split(search_rng, self.search_depth),
        ),
    )
    return particles, temperature

  def select_action(
      self,
      rng: jax.Array,
      agent_out: types.AgentOuts,
      context: base.ActingContext,
  ) -> tuple[jax.Array, types.ArrayTree]:
    search_rng, pick_rng = jax.random.split(rng)
    particles, temperature = self.search(search_rng, agent_out, context)
    logits = particles.log_weights / temperature
    index = jax.random.categorical(pick_rng, logits)
    actions = jax.vmap(lambda roots, i: roots[i])(particles.root_actions, index)
    extras = dict(
        search_actions=particles.root_actions,
        search_weights=jax.nn.softmax(logits, axis=-1),
        search_advantages=particles.gae,
    )
    return actions, extras

  # -------------------------------------------------------------- learning
  def _check_extras(self, inputs):
    extras = inputs.actor_extras
    if not isinstance(extras, dict) or any(k not in extras for k in EXTRA_KEYS):
      raise ValueError(
          "SPO learns from its search statistics: the rollout must carry "
          f"actor_extras with {', '.join(EXTRA_KEYS)} (act with "
          "SPO.select_action)."
      )
    return extras

  def dual_loss(self, duals, advantages, target_logits, online_logits, mask):
    """Sample-based temperature loss plus the trust-region dual loss, averaged
    over ``mask`` (``[T, B]``, None: all), from the root actions' ``[T, B, N]``
    search advantages and ``[T, B, A]`` target and (constant) online logits;
    returns ``(loss, (weights, kl, loss_temperature, loss_alpha))``."""
    eta = ml.dual_value(duals["log_temperature"])
    alpha = ml.dual_value(duals["log_alpha"])
    weights, log_z = ml.sample_e_step(advantages, eta)
    kl = ops.categorical_kl(target_logits, online_logits)
    loss_eta = ml.temperature_loss(eta, log_z, self.hyper_params["epsilon"])
    loss_alpha = ml.alpha_loss(alpha, kl, self.hyper_params["epsilon_policy"])
    total = ops.masked_mean(loss_eta + loss_alpha, mask)
    return total, (weights, kl, loss_eta, loss_alpha)

  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    inputs.check_shapes()
    extras = self._check_extras(inputs)
    target_out = self.target_out(inputs, context)
    target_logits = target_out["logits"][:-1]
    advantages = extras["search_advantages"][:-1]
    if self.checked_gaussian(inputs) is None:
      meta_out, rule_state = self._categorical_duals(
          inputs, context, advantages, target_logits
      )
    else:
      meta_out, rule_state = self.gaussian_e_step(
          inputs, context, advantages, target_logits
      )
    # GAE(lambda) targets from the target critic (V-trace with rho = 1).
    critic = returns.vtrace(
        rewards=inputs.rewards,
        env_discounts=1.0 - inputs.is_terminal.astype(jnp.float32),
        rho=jnp.where(inputs.truncated, 0.0, 1.0),
        values=inputs.agent_out["v"][..., 0],
        target_values=target_out["v"][..., 0],
        discount=self.hyper_params["discount_factor"],
        lambda_=self.hyper_params["td_lambda"],
    )
    meta_out["value_target"] = jax.lax.stop_gradient(critic.value_target)
    meta_out["stats"]["search_advantage"] = ops.masked_mean(
        advantages, inputs.mask, context.axis_name
    )
    return meta_out, rule_state

  def _categorical_duals(self, inputs, context, advantages, target_logits):
    """The duals' step for discrete actions: ``(meta_out, rule_state)``."""
    online_logits = jax.lax.stop_gradient(inputs.agent_out["logits"][:-1])
    (weights, kl, loss_eta, loss_alpha), new_duals, dual_opt_state = (
        self.update_duals(
            self.dual_loss,
            context,
            advantages,
            target_logits,
            online_logits,
            inputs.mask,
        )
    )
    kl_sample = ml.nonparametric_kl(weights)
    meta_out = dict(
        target_logits=target_logits,
        alpha=ml.dual_value(context.rule_state["duals"]["log_alpha"]),
        stats=self.dual_stats(
            context, inputs, loss_eta, loss_alpha, kl_sample, kl
        ),
    )
    return meta_out, self.next_rule_state(context, new_duals, dual_opt_state)

  def policy_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      logits: jax.Array,
  ) -> jax.Array:
    del meta_out
    extras = self._check_extras(inputs)
    return ml.sampled_cross_entropy(
        logits,
        extras["search_actions"][:-1],
        jax.lax.stop_gradient(extras["search_weights"][:-1]),
    )

  def sampled_targets(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> tuple[jax.Array, jax.Array]:
    del meta_out
    extras = self._check_extras(inputs)
    return extras["search_actions"][:-1], extras["search_weights"][:-1]

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    inputs.check_shapes()
    values = inputs.agent_out["v"][:-1, ..., 0]
    td = meta_out["value_target"] - values
    value_loss = 0.5 * jnp.square(td)
    logs = dict(
        value_loss=value_loss,
        value_mean=values,
        value_target=meta_out["value_target"],
    )
    return self.hyper_params["vf_coef"] * value_loss, logs
