"""Meta-training with persistent evolution strategies (``--config.estimator=pes``).

PES (Vicol, Metz and Sohl-Dickstein, ICML 2021, Algorithm 2) estimates the
gradient of a whole lifetime's loss from truncated unrolls, without bias.
Every group's ``num_agents`` agents are *particles* in antithetic pairs
(particles ``2k`` and ``2k + 1``). One meta-step is one compiled program in
which every particle

1. draws this truncation's perturbation ``eps = sigma * z`` (``-eps`` for
   the second of a pair) and adds it to its *accumulated* perturbation
   ``xi`` (zero when its lifetime began);
2. trains its agent for ``inner_steps`` learner updates (one on-policy
   rollout of ``rollout_len`` actor steps each) with the rule's
   meta-parameters ``theta + eps``;
3. scores the truncation: the loss ``L`` is minus the mean reward per actor
   step of those rollouts, so a lifetime's loss is minus the area under its
   learning curve.

The meta-gradient is ``sum_i xi_i L_i / (N sigma^2)`` over the ``N``
particles (per group; groups weighted as in ``disco.meta.population``), and
the run's meta-optimiser applies it. A particle keeps its agent, its key
chain and ``xi`` across meta-steps until its lifetime of
``lifetime_meta_steps`` truncations ends; then both particles of its pair
restart with the same fresh agent (ages are staggered over the pairs, as in
``disco.meta.population``). Both particles of a pair share their keys, so
they see the same environments and acting keys: antithetic task sampling.

A pair in which a particle diverges (non-finite parameters or loss) is left
out of the meta-gradient and restarts; a non-finite meta-gradient or update
leaves the meta-parameters and the optimiser state unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax

from disco import ops
from disco import types
from disco.meta import divergence
from disco.meta import estimators
from disco.meta import population as population_lib
from disco.training import acting

AXIS = population_lib.AXIS


@dataclasses.dataclass(frozen=True)
class PESConfig:
  """Attributes:
  sigma: standard deviation of the perturbations.
  antithetic: antithetic pairs of particles (False: independent
    perturbations; the pairs still share agents and keys).
  """

  sigma: float = 0.01
  antithetic: bool = True

  def __post_init__(self):
    if not self.sigma > 0:
      raise ValueError(f"PES sigma must be > 0, got {self.sigma}.")


@chex.dataclass(frozen=True)
class Particle:
  """One particle: an agent part-way through its lifetime.

  ``perturbation`` is the sum of the perturbations it has trained with
  since its lifetime began (the meta-parameters' tree).
  """

  learner: types.LearnerState
  actor: acting.ActorCarry
  age: jax.Array
  rng: jax.Array
  perturbation: types.MetaParams


class PESPopulation(population_lib.MetaStepProgram):
  """Builds and runs the PES meta-step.

  Args:
    groups: agent groups (``num_agents``: particles; on every device an even
      number, so that pairs stay on one device).
    config: the population settings (``rollout_len``, ``inner_steps``,
      ``lifetime_meta_steps`` >= 1).
    pes_config: PES settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard particles across (default: ``jax.devices()``).
  """

  def __init__(
      self,
      groups: Sequence[population_lib.AgentGroup],
      config: population_lib.PopulationConfig,
      pes_config: PESConfig,
      meta_optimizer: optax.GradientTransformation,
      devices: Sequence[jax.Device] | None = None,
  ):
    self.groups = tuple(groups)
    self.config = config
    self.pes_config = pes_config
    self.meta_optimizer = meta_optimizer
    self.devices = tuple(devices or jax.devices())
    if config.lifetime_meta_steps < 1:
      raise ValueError(
          "PES accumulates each particle's perturbations until its lifetime "
          "ends: set lifetime_meta_steps >= 1 (truncations per lifetime)."
      )
    for g in self.groups:
      if g.num_agents % (2 * len(self.devices)):
        raise ValueError(
            f"PES needs antithetic pairs of particles on every device: group "
            f"{g.name!r} has {g.num_agents} agents over {len(self.devices)} "
            f"device(s); use a multiple of {2 * len(self.devices)}."
        )
    self.num_agents = sum(g.num_agents for g in self.groups)
    self.mesh = Mesh(np.asarray(self.devices), (AXIS,))
    self._step = self._build_step()

  # ------------------------------------------------------------------ init
  def _fresh(self, group, rng, meta_params) -> Particle:
    env_rng, learner_rng, rng = jax.random.split(rng, 3)
    actor = acting.init_actor(group.env, env_rng)
    obs = jax.tree.map(lambda x: x[0], actor.timestep.observation)
    return Particle(
        learner=group.agent.initial_learner_state(learner_rng, obs),
        actor=actor,
        age=jnp.zeros([], jnp.int32),
        rng=rng,
        perturbation=jax.tree.map(jnp.zeros_like, meta_params),
    )

  def _init_group(self, group, rng, meta_params) -> Particle:
    pairs = group.num_agents // 2
    keys = jnp.repeat(jax.random.split(rng, pairs), 2, axis=0)  # pairs share
    stacked = jax.vmap(lambda k: self._fresh(group, k, meta_params))(keys)
    lifetime = self.config.lifetime_meta_steps
    ages = np.repeat(np.arange(pairs) * lifetime // pairs, 2)
    return stacked.replace(age=jnp.asarray(ages, jnp.int32))

  def init(
      self, rng: jax.Array, meta_params: types.MetaParams
  ) -> population_lib.MetaTrainState:
    sharded = NamedSharding(self.mesh, P(AXIS))
    loop_rng, *group_rngs = jax.random.split(rng, len(self.groups) + 1)
    agents = tuple(
        jax.jit(functools.partial(self._init_group, g), out_shardings=sharded)(
            r, meta_params
        )
        for g, r in zip(self.groups, group_rngs, strict=True)
    )
    state = population_lib.MetaTrainState(
        meta_params=meta_params,
        meta_opt_state=self.meta_optimizer.init(meta_params),
        agents=agents,
        step=jnp.zeros([], jnp.int32),
        rng=loop_rng,
    )
    return self.place(state)

  # ------------------------------------------------------- one particle
  def _truncation(self, group, theta, particle: Particle):
    """``inner_steps`` updates with ``theta``: (particle, loss, logs)."""
    cfg = self.config
    rng, act_rng, learn_rng, reset_rng = jax.random.split(particle.rng, 4)

    def inner(carry, keys):
      learner, actor = carry
      act_key, learn_key = keys
      actor, rollout = acting.unroll_actor(
          group.agent,
          group.env,
          learner.params,
          learner.rule_state,
          actor,
          act_key,
          cfg.rollout_len,
      )
      actor, _ = acting.episode_stats(actor, rollout)
      learner, _ = group.agent.learner_step(
          learn_key, rollout, learner, theta, False
      )
      return (learner, actor), rollout.rewards.mean()

    (learner, actor), rewards = jax.lax.scan(
        inner,
        (particle.learner, particle.actor),
        (
            jax.random.split(act_rng, cfg.inner_steps),
            jax.random.split(learn_rng, cfg.inner_steps),
        ),
    )
    loss = -rewards.mean()
    new = particle.replace(
        learner=learner, actor=actor, age=particle.age + 1, rng=rng
    )
    return new, loss, reset_rng

  # ------------------------------------------------------------- the step
  def _build_step(self):
    pcfg = self.pes_config
    lifetime = self.config.lifetime_meta_steps
    shares = population_lib.group_weights(self.groups)
    weights = [shares[g.name] for g in self.groups]

    def per_device(meta_params, meta_opt_state, step, agents, rng):
      rng, step_key = jax.random.split(rng)
      grads, new_agents, logs = None, [], {}
      for gi, (g, particles) in enumerate(
          zip(self.groups, agents, strict=True)
      ):
        local = g.num_agents // len(self.devices)
        index = jax.lax.axis_index(AXIS) * local + jnp.arange(local)

        new, accumulated, loss, reset_rngs = estimators.pes_truncation(
            functools.partial(self._truncation, g),
            meta_params,
            particles,
            particles.perturbation,
            jax.random.fold_in(step_key, gi),
            index,
            pcfg.sigma,
            pcfg.antithetic,
        )
        new = new.replace(perturbation=accumulated)
        finite = jax.vmap(ops.all_finite)((new.learner, loss))
        pair_ok = estimators.pair_all(finite)
        count = jax.lax.psum(pair_ok.sum(), AXIS)
        safe_loss = jnp.where(pair_ok, loss, 0.0)
        safe_acc = estimators.where_rows(pair_ok, new.perturbation, 0)
        group_grads = jax.lax.psum(
            estimators.pes_gradient(safe_acc, safe_loss, pcfg.sigma, 1), AXIS
        )
        # No healthy pair in the group: NaN, so the update is skipped.
        scale = jnp.where(count > 0, weights[gi] / count, jnp.nan)
        group_grads = jax.tree.map(lambda x, s=scale: x * s, group_grads)
        grads = (
            group_grads
            if grads is None
            else jax.tree.map(jnp.add, grads, group_grads)
        )
        # Lifetimes end (or pairs diverged): both particles of the pair
        # restart alike (their reset keys are equal).
        restart = jnp.logical_not(pair_ok) | (new.age >= lifetime)
        fresh = jax.vmap(lambda k, g=g: self._fresh(g, k, meta_params))(
            reset_rngs
        )
        new = estimators.where_rows(restart, fresh, new)
        new_agents.append(new)
        n = jnp.maximum(count, 1)
        logs[f"{g.name}/meta_loss"] = jax.lax.psum(safe_loss.sum(), AXIS) / n
        logs[f"{g.name}/rewards"] = -logs[f"{g.name}/meta_loss"]
        logs[f"{g.name}/{divergence.DIVERGED}"] = jax.lax.psum(
            jnp.logical_not(finite).sum(), AXIS
        )
      meta_params, meta_opt_state, update_logs = (
          population_lib.apply_meta_update(
              self.meta_optimizer, grads, meta_opt_state, meta_params
          )
      )
      logs.update(update_logs)
      logs[divergence.DIVERGED] = sum(
          logs[f"{g.name}/{divergence.DIVERGED}"] for g in self.groups
      )
      for k in ("meta_loss", "rewards"):
        logs[k] = sum(
            w * logs[f"{g.name}/{k}"]
            for w, g in zip(weights, self.groups, strict=True)
        )
      fields = dict(
          meta_params=meta_params,
          meta_opt_state=meta_opt_state,
          step=step + 1,
          agents=tuple(new_agents),
          rng=rng,
      )
      return fields, logs

    return self._jit_step(per_device, self.inputs)
