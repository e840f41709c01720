"""Meta-training with evolution strategies (``--config.estimator=es``).

A generation (one meta-step) has ``population_size`` members
``theta + sigma * z_i`` in antithetic pairs (``2k``, ``2k + 1``: ``z``, ``-z``),
each training fresh agents for ``lifetime_iterations`` iterations of
``disco.training.loop.EvalLoop``; a pair's members share environments and seeds.
A member's fitness is the mean normalised return ``(return - random) /
(reference - random)`` (raw without a reference) of its agents' episodes in the
last ``final_iterations`` iterations (``final_return``) or all (``auc``),
averaged over groups by weight; divergence gives NaN, which ranks worst. The
meta-gradient is OpenAI-ES's (evosax ``Open_ES``'s formula) over the centred
ranks of ``-fitness``, applied by the run's meta-optimiser; another evosax
distribution-based ``strategy`` applies its own ``tell``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import inspect
from typing import Any

import jax
import jax.numpy as jnp
from ml_collections import config_dict
import optax

from disco import ops
from disco import types
from disco.meta import divergence
from disco.meta import estimators
from disco.meta import meta_step
from disco.training import loop as loop_lib
from disco.update_rules import registry as rule_registry

FINAL_RETURN, AUC = "final_return", "auc"
FITNESSES = (FINAL_RETURN, AUC)


OPEN_ES = "open_es"


def _algorithms():
  """evosax's strategies, imported on first use (importing them runs JAX
  computations, which must follow ``jax.distributed.initialize``)."""
  from evosax import algorithms

  return algorithms


def strategy_names() -> list[str]:
  """evosax's distribution-based strategies, by name."""
  return sorted(_algorithms().distribution_based_algorithms)


def check_strategy(name: str) -> str:
  """``name`` if evosax has a distribution-based strategy of that name
  (``open_es``, the default, is OpenAI-ES); ValueError otherwise."""
  if name.lower() == OPEN_ES:
    return OPEN_ES
  names = strategy_names()
  if name not in names:
    kind = (
        "a population-based (genetic) algorithm, which has no mean to "
        "meta-train"
        if name in _algorithms().population_based_algorithms
        else "not an evosax strategy"
    )
    raise ValueError(
        f"ES strategy {name!r} is {kind}; use {OPEN_ES!r} or one of "
        f"evosax's distribution-based strategies: {', '.join(names)}."
    )
  return name


@dataclasses.dataclass(frozen=True)
class ESConfig:
  """ES settings.

  Attributes:
    strategy: ``open_es`` or an evosax distribution-based strategy's name.
    population_size: members per generation (even).
    sigma: standard deviation of the perturbations.
    lifetime_iterations: evaluation-loop iterations of a member's agents.
    fitness: ``final_return`` or ``auc``.
    final_iterations: the last iterations counted by ``final_return``.
    rank_shaping: centred-rank fitness shaping (False: raw losses).
    antithetic: antithetic perturbations (False: independent; pairs still share
      tasks).
    update_epochs: passes over each rollout per iteration (``LoopConfig``).
    num_minibatches: learner steps per pass, each on a split of the
      environments.
  """

  strategy: str = OPEN_ES
  population_size: int = 8
  sigma: float = 0.01
  lifetime_iterations: int = 64
  fitness: str = FINAL_RETURN
  final_iterations: int = 8
  rank_shaping: bool = True
  antithetic: bool = True
  update_epochs: int = 1
  num_minibatches: int = 1

  def __post_init__(self):
    if self.population_size < 2 or self.population_size % 2:
      raise ValueError(
          f"ES needs antithetic pairs: population_size must be even and >= 2,"
          f" got {self.population_size}."
      )
    if not self.sigma > 0:
      raise ValueError(f"ES sigma must be > 0, got {self.sigma}.")
    if self.fitness not in FITNESSES:
      raise ValueError(
          f"Unknown ES fitness {self.fitness!r}; use one of "
          f"{', '.join(FITNESSES)}."
      )
    if self.lifetime_iterations < 1:
      raise ValueError("ES lifetime_iterations must be >= 1.")
    if not 1 <= self.final_iterations <= self.lifetime_iterations:
      raise ValueError(
          f"ES final_iterations must be in [1, lifetime_iterations="
          f"{self.lifetime_iterations}], got {self.final_iterations}."
      )
    if self.update_epochs < 1 or self.num_minibatches < 1:
      raise ValueError("ES update_epochs and num_minibatches must be >= 1.")

  @classmethod
  def from_config(
      cls, values: Mapping[str, Any], agent: config_dict.ConfigDict | None
  ) -> ESConfig:
    """The settings ``config.es`` holds (missing keys: defaults);
    ``update_epochs`` and ``num_minibatches`` (None) default to the loop of the
    ``agent`` settings' rule (1 x 1 without).

    Raises:
      ValueError, TypeError: bad or unknown settings.
    """
    values = dict(values)
    loop = {} if agent is None else rule_registry.get_entry(agent.rule).loop
    for key in ("update_epochs", "num_minibatches"):
      if values.get(key) is None:
        values[key] = loop.get(key, 1)
    values["strategy"] = check_strategy(str(values.get("strategy", OPEN_ES)))
    return cls(**values)

  @property
  def lifetime_updates(self) -> int:
    """Optimiser steps of a member's agent over its lifetime."""
    return self.lifetime_iterations * self.update_epochs * self.num_minibatches


def member_fitness(
    metrics: Mapping[str, jax.Array],
    config: ESConfig,
    offset: float = 0.0,
    scale: float = 1.0,
) -> jax.Array:
  """One member's fitness on one group from its agents' loop metrics
  ``{name: [agents, iterations]}``: the mean over agents of
  ``(return - offset) / scale`` of the counted iterations' episodes; NaN if any
  agent diverged."""
  returns, episodes = metrics["return_sum"], metrics["episodes"]
  if config.fitness == FINAL_RETURN:
    returns = returns[:, -config.final_iterations :]
    episodes = episodes[:, -config.final_iterations :]
  mean = returns.sum(1) / jnp.maximum(episodes.sum(1), 1)
  fitness = ((mean - offset) / scale).mean()
  diverged = metrics["diverged"].any() | ~jnp.isfinite(fitness)
  return jnp.where(diverged, jnp.nan, fitness)


@dataclasses.dataclass(frozen=True)
class Members:
  """This device's members of a generation (while tracing): their
  meta-parameters ``thetas`` and pair indices ``pairs`` ``[members]`` (which
  pick their tasks); ``open_es``: their unit ``noise``; evosax strategies:
  ``ask``, what ``tell`` needs."""

  thetas: types.MetaParams
  pairs: jax.Array
  noise: types.MetaParams | None = None
  ask: tuple[Any, ...] | None = None


class ESPopulation(meta_step.MetaStepProgram):
  """Builds and runs the ES generation program.

  Args:
    groups: agent groups (``num_agents``: per member and group).
    config: the population settings.
    es_config: ES settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard over (default: ``jax.devices()``).
    normalizers: ``{group name: (random return, reference - random)}`` (absent:
      raw returns).
  """

  inputs = ("meta_params", "meta_opt_state", "step", "rng", "estimator")

  def __init__(
      self,
      groups: Sequence[meta_step.AgentGroup],
      config: meta_step.PopulationConfig,
      es_config: ESConfig,
      meta_optimizer: optax.GradientTransformation,
      devices: Sequence[jax.Device] | None = None,
      normalizers: Mapping[str, tuple[float, float]] | None = None,
  ):
    self.es_config = es_config
    self.normalizers = dict(normalizers or {})
    self.loops = tuple(_eval_loop(g, config, es_config) for g in groups)
    super().__init__(groups, config, meta_optimizer, devices)

  @property
  def num_agents(self) -> int:
    """Members per generation (for logs)."""
    return self.es_config.population_size

  def _check(self) -> None:
    if self.es_config.population_size % len(self.devices):
      raise ValueError(
          f"ES population_size {self.es_config.population_size} does not "
          f"split evenly over {len(self.devices)} devices; use a multiple of "
          f"{len(self.devices)}."
      )

  def env_steps_per_generation(self) -> int:
    """Environment steps of one generation (all members and agents)."""
    per_member = sum(
        g.num_agents * lp.config.env_steps_per_iteration
        for g, lp in zip(self.groups, self.loops, strict=True)
    )
    return (
        per_member
        * self.es_config.lifetime_iterations
        * self.es_config.population_size
    )

  # ------------------------------------------------ evosax strategies
  def _strategy(self, meta_params):
    """The evosax strategy (not ``open_es``) over ``meta_params``' tree."""
    cfg = self.es_config
    cls = _algorithms().distribution_based_algorithms[cfg.strategy]
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {}
    if "use_antithetic_sampling" in accepted:
      kwargs["use_antithetic_sampling"] = cfg.antithetic
    if "std_schedule" in accepted:
      kwargs["std_schedule"] = optax.constant_schedule(cfg.sigma)
    template = jax.tree.map(
        lambda x: jnp.zeros(jnp.shape(x), jnp.result_type(x)), meta_params
    )
    return cls(cfg.population_size, template, **kwargs)

  def strategy_mean(self, es_state, like: types.MetaParams):
    """The meta-parameters (a tree like ``like``) at an evosax strategy
    state's mean."""
    return self._strategy(like).get_mean(es_state)

  def _strategy_params(self, strategy):
    params = strategy.default_params
    if hasattr(params, "std_init"):
      params = params.replace(std_init=self.es_config.sigma)
    return params

  def _initial(self, rng, meta_params):
    """No agents; an evosax strategy's state (centred on ``meta_params``) is the
    estimator state."""
    es_state = ()
    if self.es_config.strategy != OPEN_ES:
      strategy = self._strategy(meta_params)
      rng, init_rng = jax.random.split(rng)
      es_state = jax.jit(strategy.init)(
          init_rng, meta_params, self._strategy_params(strategy)
      )
    return dict(rng=rng, agents=(), estimator=es_state)

  # ----------------------------------------------------- the generation
  def _step_keys(self, rng):
    """The noise key and the task key."""
    rng, step_key = jax.random.split(rng)
    return rng, tuple(jax.random.split(step_key))

  def _members(self, ctx) -> Members:
    """``theta + sigma z_i`` (``open_es``), or the strategy's ask."""
    cfg = self.es_config
    local = cfg.population_size // len(self.devices)
    index = meta_step.local_index(local)
    meta_params, (noise_key, _) = ctx.state["meta_params"], ctx.keys
    if cfg.strategy == OPEN_ES:
      thetas, z = estimators.es_perturbations(
          meta_params, noise_key, index, cfg.sigma, cfg.antithetic
      )
      return Members(thetas=thetas, pairs=index // 2, noise=z)
    strategy = self._strategy(meta_params)
    params = self._strategy_params(strategy)
    ask_key, tell_key = jax.random.split(noise_key)
    population, asked = strategy.ask(ask_key, ctx.state["estimator"], params)
    thetas = jax.tree.map(
        lambda x: jax.lax.dynamic_slice_in_dim(x, index[0], local), population
    )
    # evosax's antithetic pairs are members i and i + M/2.
    return Members(
        thetas=thetas,
        pairs=index % (cfg.population_size // 2),
        ask=(strategy, params, tell_key, population, asked),
    )

  def _group_step(self, index, group, ctx):
    """Every member trains the group's agents for a lifetime (a pair's members
    share tasks); the estimate is their fitness ``[members]``."""
    cfg, loop = self.es_config, self.loops[index]
    offset, scale = self.normalizers.get(group.name, (0.0, 1.0))
    _, task_key = ctx.keys

    def member(theta, pair):
      key = jax.random.fold_in(jax.random.fold_in(task_key, index), pair)
      states = jax.vmap(loop.init)(jax.random.split(key, group.num_agents))
      _, metrics = loop._run_impl(states, theta, cfg.lifetime_iterations)
      f = member_fitness(metrics, cfg, offset, scale)
      returns = metrics["return_sum"].sum(0) / jnp.maximum(
          metrics["episodes"].sum(0), 1
      )
      return f, dict(
          fitness=f,
          final_return=returns[-cfg.final_iterations :].mean(),
          diverged=jnp.isnan(f).astype(jnp.int32),
      )

    fitness, logs = jax.vmap(member)(ctx.members.thetas, ctx.members.pairs)
    ok = jnp.isfinite(logs["fitness"])
    count = jnp.maximum(jax.lax.psum(ok.sum(), meta_step.AXIS), 1)
    out = {
        k: jax.lax.psum(jnp.where(ok, logs[k], 0).sum(), meta_step.AXIS) / count
        for k in ("fitness", "final_return")
    }
    out[divergence.DIVERGED] = jax.lax.psum(
        logs["diverged"].sum(), meta_step.AXIS
    )
    return meta_step.GroupStep(fitness, out)

  def _combine(self, ctx, groups):
    """A member's fitness is its groups' weighted sum; returns ``open_es``'s
    gradient of the (rank-shaped) losses, or the losses ``[M]`` for an evosax
    ``tell``."""
    cfg = self.es_config
    fitness = sum(
        self.weights[g.name] * out.estimate
        for g, out in zip(self.groups, groups, strict=True)
    )
    all_fitness = jax.lax.all_gather(fitness, meta_step.AXIS, tiled=True)  # [M]
    losses = -all_fitness
    finite = jnp.isfinite(all_fitness)
    mean_fitness = jnp.where(finite, all_fitness, 0).sum() / jnp.maximum(
        finite.sum(), 1
    )
    logs = {
        "meta_loss": -mean_fitness,
        "fitness": mean_fitness,
        "best_fitness": jnp.nanmax(all_fitness),
        divergence.DIVERGED: cfg.population_size - finite.sum(),
    }
    if cfg.strategy != OPEN_ES:
      return losses, logs
    shaped = estimators.centered_ranks(losses) if cfg.rank_shaping else losses
    local = cfg.population_size // len(self.devices)
    mine = jax.lax.dynamic_slice_in_dim(
        shaped, jax.lax.axis_index(meta_step.AXIS) * local, local
    )
    grads = jax.lax.psum(
        estimators.es_gradient(
            ctx.members.noise, mine, cfg.sigma, cfg.population_size
        ),
        meta_step.AXIS,
    )
    return grads, logs

  def _update(self, ctx, direction):
    """``open_es``: the meta-optimiser's step; an evosax strategy: its ``tell``,
    skipped when not finite."""
    if self.es_config.strategy == OPEN_ES:
      return super()._update(ctx, direction)
    strategy, params, tell_key, population, asked = ctx.members.ask
    meta_params, es_state = ctx.state["meta_params"], ctx.state["estimator"]
    told, _ = strategy.tell(tell_key, population, direction, asked, params)
    new_params = strategy.get_mean(told)
    apply = ops.all_finite((new_params, told.mean))
    update_norm = optax.tree.norm(
        jax.tree.map(jnp.subtract, new_params, meta_params)
    )
    meta_params, es_state = ops.tree_where(
        apply, (new_params, told), (meta_params, es_state)
    )
    logs = {
        "meta_update_norm": update_norm,
        divergence.SKIPPED: jnp.logical_not(apply).astype(jnp.float32),
    }
    return meta_params, ctx.state["meta_opt_state"], es_state, logs


def _eval_loop(
    group: meta_step.AgentGroup,
    config: meta_step.PopulationConfig,
    es_config: ESConfig,
) -> loop_lib.EvalLoop:
  """The evaluation loop of a member's agents of ``group``."""
  return loop_lib.EvalLoop(
      group.agent,
      group.env,
      loop_lib.LoopConfig(
          num_envs=group.env.batch_size,
          rollout_len=config.rollout_len + 1,
          batch_size=group.env.batch_size,
          replay_capacity=0,
          min_replay_size=0,
          update_epochs=es_config.update_epochs,
          num_minibatches=es_config.num_minibatches,
      ),
  )
