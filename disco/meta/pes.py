"""Meta-training with persistent evolution strategies
(``--config.estimator=pes``).

PES (Vicol, Metz and Sohl-Dickstein, ICML 2021, Algorithm 2) estimates a whole
lifetime's loss gradient from truncated unrolls, without bias. Each group's
agents are particles in antithetic pairs (``2k``, ``2k + 1``, sharing keys).
Each meta-step a particle draws ``eps = sigma * z`` (``-eps`` for the pair's
second), adds it to its accumulated ``xi``, trains ``inner_steps`` on-policy
updates with ``theta + eps`` and scores ``L``, minus the mean reward per actor
step. The gradient is ``sum_i xi_i L_i / (N sigma^2)`` per group. A pair
restarts with one fresh agent (``xi = 0``) after ``lifetime_meta_steps``
truncations (ages staggered) or when a particle diverges (then it is left out of
the gradient).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
from ml_collections import config_dict
import numpy as np
import optax

from disco import ops
from disco import types
from disco.meta import divergence
from disco.meta import estimators
from disco.meta import meta_step
from disco.training import acting


@dataclasses.dataclass(frozen=True)
class PESConfig:
  """PES settings.

  Attributes:
    sigma: standard deviation of the perturbations.
    antithetic: antithetic pairs of particles (False: independent perturbations;
      pairs still share agents and keys).
  """

  sigma: float = 0.01
  antithetic: bool = True

  def __post_init__(self):
    if not self.sigma > 0:
      raise ValueError(f"PES sigma must be > 0, got {self.sigma}.")

  @classmethod
  def from_config(
      cls, values: Mapping[str, Any], agent: config_dict.ConfigDict | None
  ) -> PESConfig:
    """The settings ``config.pes`` holds (missing keys: defaults; ``agent`` is
    not read).

    Raises:
      ValueError, TypeError: bad or unknown settings.
    """
    del agent
    return cls(**values)


@chex.dataclass(frozen=True)
class Particle:
  """One particle: an agent part-way through its lifetime; ``perturbation`` sums
  the perturbations it has trained with since its lifetime began."""

  learner: types.LearnerState
  actor: acting.ActorCarry
  age: jax.Array
  rng: jax.Array
  perturbation: types.MetaParams


class PESPopulation(meta_step.MetaStepProgram):
  """Builds and runs the PES meta-step.

  Args:
    groups: agent groups (``num_agents``: particles, even on every device).
    config: the population settings (``lifetime_meta_steps`` >= 1).
    pes_config: PES settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard over (default: ``jax.devices()``).
  """

  def __init__(
      self,
      groups: Sequence[meta_step.AgentGroup],
      config: meta_step.PopulationConfig,
      pes_config: PESConfig,
      meta_optimizer: optax.GradientTransformation,
      devices: Sequence[jax.Device] | None = None,
  ):
    self.pes_config = pes_config
    super().__init__(groups, config, meta_optimizer, devices)

  def _check(self) -> None:
    if self.config.lifetime_meta_steps < 1:
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

  def _initial(self, rng, meta_params):
    loop_rng, *group_rngs = jax.random.split(rng, len(self.groups) + 1)
    agents = self._init_groups(self._init_group, group_rngs, meta_params)
    return dict(rng=loop_rng, agents=agents)

  # ------------------------------------------------------- one particle
  def _truncation(self, group, theta, particle: Particle):
    """``inner_steps`` updates with ``theta``: (particle, loss, reset key)."""
    cfg = self.config
    rng, act_rng, learn_rng, reset_rng = jax.random.split(particle.rng, 4)
    learner, actor, stats = meta_step.on_policy_updates(
        group.agent,
        group.env,
        theta,
        particle.learner,
        particle.actor,
        (
            jax.random.split(act_rng, cfg.inner_steps),
            jax.random.split(learn_rng, cfg.inner_steps),
        ),
        cfg.rollout_len,
    )
    loss = -stats["rewards"].mean()
    new = particle.replace(
        learner=learner, actor=actor, age=particle.age + 1, rng=rng
    )
    return new, loss, reset_rng

  # ------------------------------------------------------------- the step
  def _step_keys(self, rng):
    return tuple(jax.random.split(rng))

  def _members(self, ctx):
    """Per group: its particles' ``theta + eps_i`` and accumulated perturbations
    ``xi_i`` (this ``eps_i`` included)."""
    out = []
    for gi, (g, particles) in enumerate(
        zip(self.groups, ctx.state["agents"], strict=True)
    ):
      out.append(
          estimators.pes_perturbations(
              ctx.state["meta_params"],
              particles.perturbation,
              jax.random.fold_in(ctx.keys, gi),
              meta_step.local_index(g.num_agents // len(self.devices)),
              self.pes_config.sigma,
              self.pes_config.antithetic,
          )
      )
    return out

  def _group_step(self, index, group, ctx):
    """Every particle's truncation; the estimate is PES's weighted gradient over
    the healthy pairs. Particles whose lifetime ends or whose pair diverged
    restart, both of a pair alike."""
    thetas, accumulated = ctx.members[index]
    new, loss, reset_rngs = jax.vmap(
        functools.partial(self._truncation, group)
    )(thetas, ctx.state["agents"][index])
    new = new.replace(perturbation=accumulated)
    finite = jax.vmap(ops.all_finite)((new.learner, loss))
    pair_ok = estimators.pair_all(finite)
    count = jax.lax.psum(pair_ok.sum(), meta_step.AXIS)
    safe_loss = jnp.where(pair_ok, loss, 0.0)
    safe_acc = estimators.where_rows(pair_ok, new.perturbation, 0)
    grads = jax.lax.psum(
        estimators.pes_gradient(safe_acc, safe_loss, self.pes_config.sigma, 1),
        meta_step.AXIS,
    )
    # No healthy pair in the group: NaN, so the update is skipped.
    scale = jnp.where(count > 0, self.weights[group.name] / count, jnp.nan)
    grads = jax.tree.map(lambda x: x * scale, grads)
    restart = jnp.logical_not(pair_ok) | (
        new.age >= self.config.lifetime_meta_steps
    )
    fresh = jax.vmap(lambda k: self._fresh(group, k, ctx.state["meta_params"]))(
        reset_rngs
    )
    new = estimators.where_rows(restart, fresh, new)
    meta_loss = jax.lax.psum(safe_loss.sum(), meta_step.AXIS) / jnp.maximum(
        count, 1
    )
    logs = {
        "meta_loss": meta_loss,
        "rewards": -meta_loss,
        divergence.DIVERGED: jax.lax.psum(
            jnp.logical_not(finite).sum(), meta_step.AXIS
        ),
    }
    return meta_step.GroupStep(grads, logs, agents=new)
