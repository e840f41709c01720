"""Meta-training a rule on a population of agents.

One *meta-step* is one compiled program. For every agent it generates
``inner_steps`` training rollouts and one validation rollout (twice as long)
on device, computes the agent's meta-gradient (``meta_gradient``), and keeps
the agent's updated learner, value-function and environment states. The
meta-gradients are averaged over the agents (``vmap`` within a device) and
over devices (``jax.shard_map`` over a 1-D device mesh, ``lax.pmean``), and the
meta-optimiser updates the meta-parameters, which stay replicated.

The devices may belong to several processes (hosts) joined by
``jax.distributed``: every process runs the same program on the global mesh,
holds and steps only its own devices' agents, and the ``pmean`` averages over
every agent of every process.

A population may mix environments (kinds, observation shapes and action
counts): agents are grouped by environment, each group with its own
environment, agent network and value function, and the meta-gradient is the
mean over all agents, or a weighted mean of the groups' means
(``AgentGroup.weight``). Every device holds the same number of agents of
every group.

Agents are reset to new lifetimes (fresh parameters and statistics) after
``lifetime_meta_steps`` meta-steps, staggered across the population so that
it always holds agents of different ages.

Divergence is checked inside the step (see ``divergence``): an agent with
non-finite parameters, losses or meta-gradient is left out of the
meta-gradient (each group's mean is over its finite agents) and starts a new
lifetime; a non-finite meta-gradient or update leaves the meta-parameters and
the meta-optimiser state unchanged. A healthy step computes what it would
without these checks (XLA may fuse its operations differently around them,
which can change results in the last bits).

Levels (``AgentGroup.level_sampler``): an agent starting a lifetime draws
its level from the group's sampler and its environment restarts on it; when
the lifetime ends, its score goes to the sampler (see
``disco.meta.level_samplers``). The sampler's state is replicated: each
device draws for its agents, the ended lifetimes are gathered from every
device and every device applies the same update.

Random keys follow ``PopulationConfig.key_scheme`` (``disco.meta.keys``): by
default the published notebook's, so that a run can be compared with it step
by step.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax

from disco import agent as agent_lib
from disco import ops
from disco import types
from disco.environments import base as env_base
from disco.meta import divergence
from disco.meta import keys as keys_lib
from disco.meta import level_samplers
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import value_function
from disco.training import acting

AXIS = "devices"
# fold_in salts of the level keys (they leave every other key unchanged).
_LEVEL_SALT, _REFERENCE_SALT = 0x1E7E1, 0x4EFE


@dataclasses.dataclass(frozen=True)
class AgentGroup:
  """Agents sharing an environment setting.

  Attributes:
    name: a label for logs (e.g. ``catch-5x5``).
    env: the batched (jittable) environment of ONE agent.
    agent: the agent (rule, network, optimiser) of this group.
    value_fn: the group's meta-training value function.
    num_agents: agents in this group (over all devices).
    weight: the group's share of the meta-gradient (the weights of all
      groups are normalised to sum to 1); None: ``num_agents``, i.e. every
      agent counts the same.
    level_sampler: draws each lifetime's level (None: the environment's own
      resets); needs lifetimes (``lifetime_meta_steps`` or
      ``lifetime_updates``).
    reference_agent: GROOVE's reference agent (a hand-designed rule), trained
      beside every agent on its level (GROOVE samplers only).
  """

  name: str
  env: env_base.Environment
  agent: agent_lib.Agent
  value_fn: value_function.ValueFunction
  num_agents: int
  weight: float | None = None
  level_sampler: level_samplers.LevelSampler | None = None
  reference_agent: agent_lib.Agent | None = None


@dataclasses.dataclass(frozen=True)
class PopulationConfig:
  """Attributes:
  rollout_len: actor steps per training rollout (the validation rollout is
    twice as long).
  inner_steps: learner steps per agent and meta-step.
  lifetime_meta_steps: meta-steps after which an agent starts a new
    lifetime (0: never).
  lifetime_updates: ``(low, high)``: every agent draws its lifetime, in
    learner updates, log-uniformly from ``[low, high]`` when it starts
    (GROOVE's ``all_vrandlife``), tells it its rule
    (``UpdateRule.start_lifetime``) and starts a new lifetime after the
    last meta-step that fits in it (so it takes ``inner_steps * floor(
    lifetime / inner_steps)`` updates). None: no drawn lifetimes.
  outer: outer-loss settings.
  faults: faults to inject, for tests only (None: none, and the compiled
    program holds no trace of them; any schedule: one program).
  key_scheme: which random keys the agents use (``disco.meta.keys``):
    ``published`` (the notebook's) or ``per_agent``.
  """

  rollout_len: int = 16
  inner_steps: int = 2
  lifetime_meta_steps: int = 0
  lifetime_updates: tuple[int, int] | None = None
  outer: meta_gradient_lib.OuterLossConfig = meta_gradient_lib.OuterLossConfig()
  faults: divergence.FaultInjection | None = None
  key_scheme: str = keys_lib.PUBLISHED

  def __post_init__(self):
    keys_lib.check_scheme(self.key_scheme)
    if self.lifetime_updates is not None:
      low, high = self.lifetime_updates
      if not self.inner_steps <= low <= high:
        raise ValueError(
            f"lifetime_updates {self.lifetime_updates} cannot hold: a "
            f"meta-step takes inner_steps={self.inner_steps} updates, so "
            "lifetimes need inner_steps <= low <= high."
        )
      if self.lifetime_meta_steps:
        raise ValueError(
            "Set lifetime_updates or lifetime_meta_steps, not both."
        )


@chex.dataclass(frozen=True)
class AgentState:
  learner: types.LearnerState
  value: value_function.ValueState
  actor: acting.ActorCarry
  age: jax.Array  # meta-steps into the current lifetime
  rng: jax.Array
  # Learner updates of the current lifetime (with lifetime_updates only).
  lifetime: jax.Array | None = None
  # The lifetime's level and its scores (with a level sampler only).
  levels: level_samplers.LevelTrack | None = None


@chex.dataclass(frozen=True)
class MetaTrainState:
  """Everything a meta-training run needs to continue bit for bit.

  ``agents`` holds one stacked ``AgentState`` per group (leading axis: the
  group's agents over all devices). ``estimator``: an estimator's own
  replicated state (``disco.meta.estimators``; None for backprop).
  """

  meta_params: types.MetaParams
  meta_opt_state: types.ArrayTree
  agents: tuple[AgentState, ...]
  step: jax.Array
  rng: jax.Array  # the loop key (``disco.meta.keys``)
  estimator: Any = None
  # Per group: its level sampler's state (None without); None: no samplers.
  levels: Any = None


def draw_lifetime(rng: jax.Array, low: int, high: int) -> jax.Array:
  """An integer in ``[low, high]``, log-uniformly: ``int32 []``."""
  u = jax.random.uniform(rng, minval=np.log(low), maxval=np.log(high + 1.0))
  return jnp.clip(jnp.floor(jnp.exp(u)), low, high).astype(jnp.int32)


def group_weights(groups: Sequence[AgentGroup]) -> dict[str, float]:
  """Each group's normalised share of the meta-gradient and of the logs:
  its ``weight``, else its number of agents, over the sum."""
  raw = {
      g.name: float(g.num_agents if g.weight is None else g.weight)
      for g in groups
  }
  total = sum(raw.values())
  return {name: w / total for name, w in raw.items()}


def apply_meta_update(
    meta_optimizer: optax.GradientTransformation,
    meta_grads: types.MetaParams,
    meta_opt_state: Any,
    meta_params: types.MetaParams,
) -> tuple[types.MetaParams, Any, types.Logs]:
  """One meta-optimiser step, skipped (meta-parameters and optimiser state
  unchanged) when the gradient, the update or the new state is not finite.

  Returns the new meta-parameters, optimiser state and logs
  (``meta_grad_norm``, ``meta_update_norm``, ``skipped_update``).
  """
  updates, new_opt_state = meta_optimizer.update(
      meta_grads, meta_opt_state, meta_params
  )
  new_meta_params = optax.apply_updates(meta_params, updates)
  apply = ops.all_finite((meta_grads, new_meta_params, new_opt_state))
  meta_params, meta_opt_state = ops.tree_where(
      apply,
      (new_meta_params, new_opt_state),
      (meta_params, meta_opt_state),
  )
  logs = {
      "meta_grad_norm": optax.tree.norm(meta_grads),
      "meta_update_norm": optax.tree.norm(updates),
      divergence.SKIPPED: jnp.logical_not(apply).astype(jnp.float32),
  }
  return meta_params, meta_opt_state, logs


class MetaStepProgram:
  """A meta-step compiled over a ``MetaTrainState`` (what every estimator's
  population shares).

  Subclasses set ``mesh``, ``inputs`` (the ``MetaTrainState`` fields the
  program takes, in order) and ``_step`` (from ``_jit_step``): a function
  of ``_step_args(state)`` returning ``(fields, logs)``, where ``fields``
  maps ``MetaTrainState`` field names to their new values.
  """

  mesh: Mesh
  inputs: tuple[str, ...] = (
      "meta_params",
      "meta_opt_state",
      "step",
      "agents",
      "rng",
  )
  _step: Any

  def _step_args(self, state: MetaTrainState) -> tuple[Any, ...]:
    return tuple(getattr(state, name) for name in self.inputs)

  def _jit_step(self, per_device, outputs: Sequence[str], extra_in_specs=()):
    """``per_device`` (one device's part, taking the ``inputs`` then any
    extra arguments, and returning ``(fields, logs)`` with ``outputs`` as
    the fields) over ``mesh``, jitted: agents sharded, the rest
    replicated."""

    def spec(name):
      return P(AXIS) if name == "agents" else P()

    sharded = jax.shard_map(
        per_device,
        mesh=self.mesh,
        in_specs=tuple(spec(f) for f in self.inputs) + tuple(extra_in_specs),
        out_specs=({f: spec(f) for f in outputs}, P()),
        check_vma=False,
    )
    return jax.jit(sharded)

  def place(self, state: MetaTrainState) -> MetaTrainState:
    """Shards agents over the devices and replicates the rest.

    With several processes, every process must pass the same values (e.g.
    meta-parameters loaded from a file); it keeps the shards of its own
    devices.
    """
    replicated = NamedSharding(self.mesh, P())
    sharded = NamedSharding(self.mesh, P(AXIS))
    return state.replace(
        meta_params=jax.device_put(state.meta_params, replicated),
        meta_opt_state=jax.device_put(state.meta_opt_state, replicated),
        step=jax.device_put(state.step, replicated),
        rng=jax.device_put(state.rng, replicated),
        estimator=jax.device_put(state.estimator, replicated),
        levels=jax.device_put(state.levels, replicated),
        agents=jax.device_put(state.agents, sharded),
    )

  def lower(self, state: MetaTrainState) -> jax.stages.Lowered:
    """The meta-step program for ``state``, lowered (e.g. for XLA's
    ``compile().cost_analysis()``: FLOPs and bytes of one device's part)."""
    return self._step.lower(*self._step_args(state))

  def step(self, state: MetaTrainState) -> tuple[MetaTrainState, types.Logs]:
    """One meta-step (one compiled program)."""
    fields, logs = self._step(*self._step_args(state))
    return state.replace(**fields), logs


class Population(MetaStepProgram):
  """Builds and runs the meta-training program.

  Args:
    groups: agent groups; ``num_agents`` of each must be divisible by the
      number of devices.
    config: population settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard agents across (default: ``jax.devices()``).
  """

  inputs = MetaStepProgram.inputs + ("levels",)

  def __init__(
      self,
      groups: Sequence[AgentGroup],
      config: PopulationConfig,
      meta_optimizer: optax.GradientTransformation,
      devices: Sequence[jax.Device] | None = None,
  ):
    self.groups = tuple(groups)
    self.config = config
    self.meta_optimizer = meta_optimizer
    self.devices = tuple(devices or jax.devices())
    if not self.groups:
      raise ValueError("A population needs at least one agent group.")
    names = [g.name for g in self.groups]
    if len(set(names)) != len(names):
      # Logs and their weights are keyed by group name.
      raise ValueError(f"Agent group names must be unique, got {names}.")
    for g in self.groups:
      if g.num_agents < 1 or g.num_agents % len(self.devices):
        raise ValueError(
            f"Group {g.name!r} has {g.num_agents} agents, which does not split "
            f"evenly over {len(self.devices)} devices; use a multiple of "
            f"{len(self.devices)}."
        )
      if not g.env.is_jittable:
        raise ValueError(
            f"Group {g.name!r}: meta-training generates rollouts on device and "
            "needs a jittable environment."
        )
      if g.agent.axis_name is not None or g.value_fn.axis_name is not None:
        raise ValueError("Population agents must be built with axis_name=None.")
    self.num_agents = sum(g.num_agents for g in self.groups)
    self._weights = group_weights(self.groups)
    self.mesh = Mesh(np.asarray(self.devices), (AXIS,))
    self._step = self._build_step()

  # ------------------------------------------------------------------ init
  def _init_agent(
      self,
      group: AgentGroup,
      rng: jax.Array,
      draw: level_samplers.Draw | None = None,
  ) -> AgentState:
    """A fresh agent; with a level sampler, on ``draw``'s level (None: a
    fresh level drawn from ``rng``)."""
    sampler = group.level_sampler
    if sampler is not None and draw is None:
      draw = sampler.draw(sampler.init(), jax.random.fold_in(rng, _LEVEL_SALT))
    env_rng, learner_rng, value_rng, rng = keys_lib.split_agent_key(
        self.config.key_scheme, rng
    )
    level = None if draw is None else draw.level
    actor = acting.init_actor(group.env, env_rng, level)
    obs = jax.tree.map(lambda x: x[0], actor.timestep.observation)
    track = None
    if sampler is not None:
      reference = None
      if group.reference_agent is not None:
        ref_rng = jax.random.fold_in(learner_rng, _REFERENCE_SALT)
        reference = level_samplers.ReferenceState(
            learner=group.reference_agent.initial_learner_state(ref_rng, obs),
            actor=acting.init_actor(
                group.env, jax.random.fold_in(env_rng, _REFERENCE_SALT), level
            ),
            last_return=jnp.full([], level_samplers.NO_RETURN, jnp.float32),
        )
      track = level_samplers.new_track(draw, reference)
    lifetime = None
    if self.config.lifetime_updates is not None:
      lifetime = draw_lifetime(
          jax.random.fold_in(learner_rng, 1), *self.config.lifetime_updates
      )
    return AgentState(
        learner=group.agent.initial_learner_state(learner_rng, obs, lifetime),
        value=group.value_fn.initial_state(value_rng, obs),
        actor=actor,
        age=jnp.zeros([], jnp.int32),
        rng=rng,
        lifetime=lifetime,
        levels=track,
    )

  def init(
      self, rng: jax.Array, meta_params: types.MetaParams
  ) -> MetaTrainState:
    """Initial state; agent ages are staggered over the lifetime.

    Every device initialises only its own agents (one compiled program per
    group, its output sharded like the agents), so with several processes
    each process holds only its agents' states.
    """
    sharded = NamedSharding(self.mesh, P(AXIS))
    agents = []
    loop_rng, group_rngs = keys_lib.initial_keys(
        self.config.key_scheme, rng, [g.num_agents for g in self.groups]
    )
    for g, rngs in zip(self.groups, group_rngs, strict=True):
      init_group = jax.jit(
          functools.partial(self._init_group, g), out_shardings=sharded
      )
      agents.append(init_group(rngs))
    state = MetaTrainState(
        meta_params=meta_params,
        meta_opt_state=self.meta_optimizer.init(meta_params),
        agents=tuple(agents),
        step=jnp.zeros([], jnp.int32),
        rng=loop_rng,
        levels=self._init_levels(),
    )
    return self.place(state)

  def _init_levels(self):
    """Per group its sampler's initial state (None: no samplers at all)."""
    if all(g.level_sampler is None for g in self.groups):
      return None
    return tuple(
        None if g.level_sampler is None else g.level_sampler.init()
        for g in self.groups
    )

  def _init_group(self, group: AgentGroup, rngs: jax.Array) -> AgentState:
    """The group's agents from their keys ``[num_agents, 2]``."""
    stacked = jax.vmap(functools.partial(self._init_agent, group))(rngs)
    if self.config.lifetime_meta_steps:
      ages = (
          np.arange(group.num_agents)
          * self.config.lifetime_meta_steps
          // group.num_agents
      )
      stacked = stacked.replace(age=jnp.asarray(ages, jnp.int32))
    return stacked

  # ------------------------------------------------------------ one agent
  def _agent_meta_step(
      self,
      group: AgentGroup,
      meta_params,
      state: AgentState,
      keys: keys_lib.AgentKeys | None = None,
      draw: level_samplers.Draw | None = None,
  ):
    """``keys``: the agent's keys (None: from its own chain); ``draw``: the
    level a new lifetime would start on (with a level sampler)."""
    cfg = self.config
    rng = state.rng
    if keys is None:
      rng, keys = keys_lib.per_agent_keys(state.rng)
    act_rng, grad_rng, reset_rng = keys.act, keys.grad, keys.reset
    learner = state.learner

    def rollout(actor, key, length):
      return acting.unroll_actor(
          group.agent,
          group.env,
          learner.params,
          learner.rule_state,
          actor,
          key,
          length,
      )

    tracking = group.level_sampler is not None

    def train_rollout(actor, key):
      actor, r = rollout(actor, key, cfg.rollout_len)
      best = level_samplers.best_episode_return(actor, r) if tracking else 0
      actor, stats = acting.episode_stats(actor, r)
      if tracking:
        stats = dict(stats, best_return=best)
      return actor, (r, stats)

    actor, (train, stats) = jax.lax.scan(
        train_rollout, state.actor, jax.random.split(act_rng, cfg.inner_steps)
    )
    actor, valid = rollout(actor, act_rng, 2 * cfg.rollout_len)
    valid_best = None
    if tracking:
      valid_best = level_samplers.best_episode_return(actor, valid)
    actor, valid_stats = acting.episode_stats(actor, valid)

    grads, (learner, value, train_logs, meta_logs) = (
        meta_gradient_lib.meta_gradient(
            meta_params,
            group.agent,
            group.value_fn,
            learner,
            state.value,
            train,
            valid,
            grad_rng,
            cfg.outer,
        )
    )

    rewards = train.rewards
    logs = dict(
        meta_logs,
        **{f"inner/{k}": v for k, v in train_logs.items()},
        rewards=rewards.mean(),
        pos_rewards=(rewards > 0).sum(axis=(1, 2)).mean(),
        neg_rewards=(rewards < 0).sum(axis=(1, 2)).mean(),
        episodes=stats["episodes"].sum(),
        return_sum=stats["return_sum"].sum(),
    )
    new_state = state.replace(
        learner=learner, value=value, actor=actor, age=state.age + 1, rng=rng
    )
    losses = (meta_logs["meta_loss"], train_logs["total_loss"])
    finite = ops.all_finite((grads, learner, value, losses))
    # A diverged agent starts a new lifetime, as an expired one does.
    restart = jnp.logical_not(finite)
    if cfg.lifetime_meta_steps:
      restart |= new_state.age >= cfg.lifetime_meta_steps
    if cfg.lifetime_updates is not None:
      # Restart after the last meta-step that fits in the lifetime.
      restart |= (new_state.age + 1) * cfg.inner_steps > new_state.lifetime
    end = None
    if tracking:
      track, end = self._track_level(
          group,
          state,
          act_rng,
          stats,
          valid_stats,
          jnp.maximum(stats["best_return"].max(), valid_best),
          valid,
          restart,
      )
      new_state = new_state.replace(levels=track)
    fresh = self._init_agent(group, reset_rng, draw)
    if not tracking:
      # The environment streams go on into the new lifetime.
      fresh = fresh.replace(actor=new_state.actor)
    new_state = ops.tree_where(restart, fresh, new_state)
    return grads, new_state, logs, finite, end

  def _track_level(
      self, group, state, act_rng, stats, valid_stats, best, valid, restart
  ):
    """The agent's level track after this meta-step, and what its lifetime
    tells the sampler if it ends here (``LifetimeEnd``, one agent)."""
    sampler = group.level_sampler
    track = state.levels
    episodes = stats["episodes"].sum() + valid_stats["episodes"]
    total = stats["return_sum"].sum() + valid_stats["return_sum"]
    mean_return = total / jnp.maximum(episodes, 1)
    track = track.replace(
        max_return=jnp.maximum(track.max_return, best),
        last_return=jnp.where(episodes > 0, mean_return, track.last_return),
    )
    if sampler.config.kind == level_samplers.PLR:
      outs, _, _, _ = group.value_fn.value_outs(
          state.value, valid, valid.logits
      )
      score = level_samplers.step_score(
          sampler.config.score_fn, outs, track.max_return
      )
      track = track.replace(
          score_sum=track.score_sum + score,
          score_count=track.score_count + 1,
      )
    reference_return = jnp.zeros([], jnp.float32)
    if track.reference is not None:
      ref = self._reference_step(group, track.reference, act_rng)
      track = track.replace(reference=ref)
      reference_return = ref.last_return
    if sampler.config.kind == level_samplers.GROOVE:
      # Without ended episodes (NO_RETURN) the sampler skips the lifetime.
      score = track.last_return
    else:
      score = track.score_sum / jnp.maximum(track.score_count, 1)
    end = level_samplers.LifetimeEnd(
        level=track.level,
        slot=track.slot,
        score=score,
        reference=reference_return,
        ended=restart,
    )
    return track, end

  def _reference_step(self, group, ref, act_rng):
    """``inner_steps`` updates of GROOVE's reference agent on its level."""
    cfg, agent = self.config, group.reference_agent
    rng = jax.random.fold_in(act_rng, _REFERENCE_SALT)

    def update(carry, key):
      learner, actor = carry
      act_key, learn_key = jax.random.split(key)
      actor, r = acting.unroll_actor(
          agent,
          group.env,
          learner.params,
          learner.rule_state,
          actor,
          act_key,
          cfg.rollout_len,
      )
      actor, stats = acting.episode_stats(actor, r)
      learner, _ = agent.learner_step(learn_key, r, learner, {})
      return (learner, actor), stats

    (learner, actor), stats = jax.lax.scan(
        update,
        (ref.learner, ref.actor),
        jax.random.split(rng, cfg.inner_steps),
    )
    episodes = stats["episodes"].sum()
    mean_return = stats["return_sum"].sum() / jnp.maximum(episodes, 1)
    return ref.replace(
        learner=learner,
        actor=actor,
        last_return=jnp.where(episodes > 0, mean_return, ref.last_return),
    )

  # ------------------------------------------------------------- the step
  def _build_step(self):
    faults = self.config.faults is not None
    local = {g.name: g.num_agents // len(self.devices) for g in self.groups}

    def finite_mean(x, finite, group):
      """This device's share of the mean over the group's finite agents of
      ``x`` ``[local agents, ...]`` (``pmean`` over devices gives the mean):
      NaN if none is finite; the plain mean's share, bit for bit, if all
      are."""
      mask = finite.reshape(finite.shape + (1,) * (x.ndim - 1))
      share = jnp.where(mask, x, 0).sum(0) / local[group.name]
      scale = group.num_agents / jax.lax.psum(finite.sum(), AXIS)
      return share * scale.astype(share.dtype)

    def per_device(
        meta_params, meta_opt_state, step, agents, rng, levels, *schedule
    ):
      grad_sums, new_agents, group_logs = None, [], {}
      level_rng = jax.random.fold_in(rng, _LEVEL_SALT)
      new_levels = None if levels is None else list(levels)
      rng, agent_keys = self._agent_keys(rng)
      for i, (group, group_state, keys) in enumerate(
          zip(self.groups, agents, agent_keys, strict=True)
      ):
        sampler, draws = group.level_sampler, None
        if sampler is not None:
          draw_rng = jax.random.fold_in(
              jax.random.fold_in(level_rng, i), jax.lax.axis_index(AXIS)
          )
          draws = sampler.draw_many(levels[i], draw_rng, local[group.name])
        if i == 0 and faults:
          first = jnp.arange(local[group.name]) == 0
          hit = divergence.at_meta_steps(step, schedule[1])
          hit &= jax.lax.axis_index(AXIS) == 0
          learner = group_state.learner
          group_state = group_state.replace(
              learner=learner.replace(
                  params=divergence.poison(learner.params, first & hit)
              )
          )
        grads, new_state, logs, finite, ends = jax.vmap(
            functools.partial(self._agent_meta_step, group, meta_params)
        )(group_state, keys, draws)
        # The group's mean over its finite agents (over all devices after
        # the pmean below), times its weight; a group without any finite
        # agent makes the meta-gradient NaN, so the update is skipped.
        mean = functools.partial(finite_mean, finite=finite, group=group)
        weight = self._weights[group.name]
        grad_sum = jax.tree.map(lambda g, m=mean, w=weight: m(g) * w, grads)
        grad_sums = (
            grad_sum
            if grad_sums is None
            else jax.tree.map(jnp.add, grad_sums, grad_sum)
        )
        new_agents.append(new_state)
        group_logs[group.name] = jax.tree.map(
            lambda x, m=mean: jax.lax.pmean(m(x), AXIS), logs
        )
        group_logs[group.name][divergence.DIVERGED] = jax.lax.psum(
            jnp.logical_not(finite).sum(), AXIS
        )
        if sampler is not None:
          new_levels[i], level_logs = self._update_levels(
              group, levels[i], ends, draws, new_state
          )
          group_logs[group.name].update(level_logs)
      meta_grads = jax.lax.pmean(grad_sums, AXIS)
      if faults:
        meta_grads = divergence.poison(
            meta_grads, divergence.at_meta_steps(step, schedule[0])
        )
      meta_params, meta_opt_state, logs = apply_meta_update(
          self.meta_optimizer, meta_grads, meta_opt_state, meta_params
      )
      logs[divergence.DIVERGED] = 0
      for name, glogs in group_logs.items():
        logs.update({f"{name}/{k}": v for k, v in glogs.items()})
        logs[divergence.DIVERGED] += glogs[divergence.DIVERGED]
        for k in ("meta_loss", "rewards", "pos_rewards", "neg_rewards"):
          logs[k] = logs.get(k, 0.0) + glogs[k] * self._weights[name]
      fields = dict(
          meta_params=meta_params,
          meta_opt_state=meta_opt_state,
          step=step + 1,
          agents=tuple(new_agents),
          rng=rng,
          levels=None if new_levels is None else tuple(new_levels),
      )
      return fields, logs

    return self._jit_step(per_device, self.inputs, (P(), P()) if faults else ())

  def _update_levels(self, group, sampler_state, ends, draws, agents):
    """The sampler state after this meta-step's ended lifetimes (gathered
    from every device, so every device computes the same), and its logs
    (``levels/...``: the sampler's statistics and the mean features of the
    agents' current levels)."""
    sampler = group.level_sampler
    gather = functools.partial(jax.lax.all_gather, axis_name=AXIS, tiled=True)
    all_ends = jax.tree.map(gather, ends)
    state = sampler.update(sampler_state, all_ends)
    state = sampler.count_draws(
        state, jax.tree.map(gather, draws), all_ends.ended
    )
    logs = {f"levels/{k}": v for k, v in sampler.stats(state).items()}
    features = jax.vmap(group.env.level_features)(agents.levels.level)
    for k, v in features.items():
      logs[f"levels/{k}"] = jax.lax.pmean(v.mean(), AXIS)
    logs["levels/ended"] = all_ends.ended.sum().astype(jnp.float32)
    return state, logs

  def _agent_keys(self, rng: jax.Array):
    """``(next loop key, per group: this device's agents' keys or None)``;
    inside ``shard_map``."""
    rng, step_rng = keys_lib.next_step_key(rng)
    if self.config.key_scheme != keys_lib.PUBLISHED:
      return rng, [None] * len(self.groups)
    keys, first = [], 0
    for g in self.groups:
      local = g.num_agents // len(self.devices)
      index = first + jax.lax.axis_index(AXIS) * local + jnp.arange(local)
      keys.append(
          jax.vmap(
              lambda i: keys_lib.published_agent_keys(
                  step_rng, i, self.num_agents
              )
          )(index)
      )
      first += g.num_agents
    return rng, keys

  def _step_args(self, state: MetaTrainState) -> tuple[Any, ...]:
    schedule = ()
    if self.config.faults is not None:
      schedule = self.config.faults.schedule()
    return super()._step_args(state) + tuple(schedule)
