"""Meta-training by backpropagation (``--config.estimator=backprop``):
backprop's pieces of the ``disco.meta.meta_step`` outline.

Each meta-step every agent generates ``inner_steps`` training rollouts and a
validation rollout (twice as long), computes its meta-gradient through its inner
updates (``meta_gradient``) and keeps its states; meta-gradients are averaged
over each group's finite agents, and over groups by ``AgentGroup.weight``.
Agents restart after ``lifetime_meta_steps`` meta-steps (staggered), or when
diverged; with a level sampler a new lifetime draws its level and its end
reports the score. Random keys follow ``PopulationConfig.key_scheme``.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np

from disco import ops
from disco import types
from disco.meta import divergence
from disco.meta import keys as keys_lib
from disco.meta import level_samplers
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import meta_step
from disco.meta import value_function
from disco.training import acting
from disco.training import replay as replay_lib

# fold_in salts of the level keys (they leave every other key unchanged).
_LEVEL_SALT, _REFERENCE_SALT, _REPLAY_SALT = 0x1E7E1, 0x4EFE, 0x4E91A


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
  # The trajectories the inner updates learn from (with a replay only).
  replay: replay_lib.ReplayState | None = None


def draw_lifetime(rng: jax.Array, low: int, high: int) -> jax.Array:
  """An integer in ``[low, high]``, log-uniformly: ``int32 []``."""
  u = jax.random.uniform(rng, minval=np.log(low), maxval=np.log(high + 1.0))
  return jnp.clip(jnp.floor(jnp.exp(u)), low, high).astype(jnp.int32)


class BackpropPopulation(meta_step.MetaStepProgram):
  """Backprop's meta-step: every agent's meta-gradient through its inner
  updates, averaged over each group's finite agents and over groups by weight.

  Args:
    groups: agent groups, each ``num_agents`` divisible by the number of
      devices.
    config: population settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard over (default: ``jax.devices()``).
  """

  inputs = meta_step.MetaStepProgram.inputs + ("levels",)
  weighted_logs = ("meta_loss", "rewards", "pos_rewards", "neg_rewards")

  def _check(self) -> None:
    for g in self.groups:
      if g.num_agents < 1 or g.num_agents % len(self.devices):
        raise ValueError(
            f"Group {g.name!r} has {g.num_agents} agents, which does not split "
            f"evenly over {len(self.devices)} devices; use a multiple of "
            f"{len(self.devices)}."
        )

  # ------------------------------------------------------------------ init
  def _init_agent(
      self,
      group: meta_step.AgentGroup,
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
    learner = group.agent.initial_learner_state(learner_rng, obs, lifetime)
    replay = None
    if self.config.replay_capacity:
      rollout = jax.eval_shape(
          lambda: self._unroll(
              group, learner, actor, env_rng, self.config.rollout_len
          )[1]
      )
      replay = replay_lib.init(
          rollout.replace(env_info=None), self.config.replay_capacity
      )
    return AgentState(
        learner=learner,
        value=group.value_fn.initial_state(value_rng, obs),
        actor=actor,
        age=jnp.zeros([], jnp.int32),
        rng=rng,
        lifetime=lifetime,
        levels=track,
        replay=replay,
    )

  @staticmethod
  def _unroll(group: meta_step.AgentGroup, learner, actor, key, length):
    """``length`` actor steps with ``learner``'s parameters:
    ``(actor, rollout [length, B])`` (``length - 1`` transitions)."""
    return acting.unroll_actor(
        group.agent,
        group.env,
        learner.params,
        learner.rule_state,
        actor,
        key,
        length,
    )

  def _replayed(self, replay, train, act_rng):
    """Adds ``train`` ``[N, T+1, B]`` to ``replay``; returns the new replay and
    ``N`` batches ``[N, T+1, replay_batch_size]`` drawn from it."""
    for n in range(self.config.inner_steps):
      replay = replay_lib.add(
          replay,
          jax.tree.map(lambda x, n=n: x[n], train.replace(env_info=None)),
      )
    batch = self.config.replay_batch_size or jax.tree.leaves(train)[0].shape[2]
    keys = jax.random.split(
        jax.random.fold_in(act_rng, _REPLAY_SALT), self.config.inner_steps
    )
    return replay, jax.vmap(lambda k: replay_lib.sample(replay, k, batch))(keys)

  def _initial(self, rng, meta_params):
    """Agent ages are staggered over the lifetime."""
    loop_rng, group_rngs = keys_lib.initial_keys(
        self.config.key_scheme, rng, [g.num_agents for g in self.groups]
    )
    agents = self._init_groups(self._init_group, group_rngs, meta_params)
    return dict(rng=loop_rng, agents=agents, levels=self._init_levels())

  def _init_levels(self):
    """Per group its sampler's initial state (None: no samplers at all)."""
    if all(g.level_sampler is None for g in self.groups):
      return None
    return tuple(
        None if g.level_sampler is None else g.level_sampler.init()
        for g in self.groups
    )

  def _init_group(
      self, group: meta_step.AgentGroup, rngs: jax.Array, meta_params=None
  ) -> AgentState:
    """The group's agents from their keys ``[num_agents, 2]``."""
    del meta_params
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
      group: meta_step.AgentGroup,
      meta_params,
      state: AgentState,
      keys: keys_lib.AgentKeys | None = None,
      draw: level_samplers.Draw | None = None,
  ):
    """One agent's inner updates and meta-gradient: ``(meta-gradient, new state,
    logs, finite, LifetimeEnd or None)``; ``keys`` None: from its own chain;
    ``draw``: a new lifetime's level."""
    cfg = self.config
    rng = state.rng
    if keys is None:
      rng, keys = keys_lib.per_agent_keys(state.rng)
    act_rng, grad_rng, reset_rng = keys.act, keys.grad, keys.reset
    actor, train, stats, valid, valid_best, valid_stats = self._rollouts(
        group, state, act_rng
    )
    rewards = train.rewards
    replay = state.replay
    if replay is not None:
      replay, train = self._replayed(replay, train, act_rng)
    grads, (learner, value, train_logs, meta_logs) = self._meta_gradient(
        group, meta_params, state, train, valid, grad_rng
    )
    logs = _agent_logs(meta_logs, train_logs, rewards, stats)
    new_state = state.replace(
        learner=learner,
        value=value,
        actor=actor,
        age=state.age + 1,
        rng=rng,
        replay=replay,
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
    tracking = group.level_sampler is not None
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

  def _meta_gradient(
      self,
      group: meta_step.AgentGroup,
      meta_params,
      state: AgentState,
      train,
      valid,
      rng,
  ):
    """One agent's meta-gradient from its ``[N, T+1, B]`` training rollouts
    and ``[2T+1, B]`` validation rollout: ``(meta-gradient, (learner, value
    state, train logs, meta logs))``, ``meta_logs`` with ``meta_loss``."""
    return meta_gradient_lib.meta_gradient(
        meta_params,
        group.agent,
        group.value_fn,
        state.learner,
        state.value,
        train,
        valid,
        rng,
        self.config.outer,
    )

  def _rollouts(self, group: meta_step.AgentGroup, state: AgentState, act_rng):
    """The agent's ``inner_steps`` training rollouts ``[N, T+1, B]`` and
    validation rollout: ``(actor, train, stats, valid, valid_best,
    valid_stats)`` (``valid_best``: None without a sampler)."""
    cfg, learner = self.config, state.learner

    def rollout(actor, key, length):
      return self._unroll(group, learner, actor, key, length)

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
    return actor, train, stats, valid, valid_best, valid_stats

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
    track = sampler.score_step(
        track,
        lambda: group.value_fn.value_outs(state.value, valid, valid.logits)[0],
    )
    reference_return = jnp.zeros([], jnp.float32)
    if track.reference is not None:
      ref = self._reference_step(group, track.reference, act_rng)
      track = track.replace(reference=ref)
      reference_return = ref.last_return
    end = level_samplers.LifetimeEnd(
        level=track.level,
        slot=track.slot,
        score=sampler.lifetime_score(track),
        reference=reference_return,
        ended=restart,
    )
    return track, end

  def _reference_step(self, group, ref, act_rng):
    """``inner_steps`` updates of GROOVE's reference agent on its level."""
    cfg, agent = self.config, group.reference_agent
    rng = jax.random.fold_in(act_rng, _REFERENCE_SALT)
    learner, actor, stats = meta_step.on_policy_updates(
        agent,
        group.env,
        {},
        ref.learner,
        ref.actor,
        jax.random.split(rng, cfg.inner_steps),
        cfg.rollout_len,
        split_keys=True,
    )
    episodes = stats["episodes"].sum()
    mean_return = stats["return_sum"].sum() / jnp.maximum(episodes, 1)
    return ref.replace(
        learner=learner,
        actor=actor,
        last_return=jnp.where(episodes > 0, mean_return, ref.last_return),
    )

  # ------------------------------------------------------------- the step
  def _step_keys(self, rng):
    """The level key and, per group, this device's agents' keys (None:
    from the agents' own chains)."""
    level_rng = jax.random.fold_in(rng, _LEVEL_SALT)
    rng, agent_keys = self._agent_keys(rng)
    return rng, (level_rng, agent_keys)

  def _group_step(self, index, group, ctx):
    """Every agent's meta-step; the group's share of the meta-gradient is
    its weighted mean over its finite agents, and so are its logs."""
    meta_params, levels = ctx.state["meta_params"], ctx.state["levels"]
    group_state = ctx.state["agents"][index]
    level_rng, agent_keys = ctx.keys
    local = group.num_agents // len(self.devices)
    sampler, draws = group.level_sampler, None
    if sampler is not None:
      draw_rng = jax.random.fold_in(
          jax.random.fold_in(level_rng, index),
          jax.lax.axis_index(meta_step.AXIS),
      )
      draws = sampler.draw_many(levels[index], draw_rng, local)
    grads, new_state, logs, finite, ends = jax.vmap(
        functools.partial(self._agent_meta_step, group, meta_params)
    )(group_state, agent_keys[index], draws)
    # The weighted mean over finite agents; with none, the meta-gradient is
    # NaN and the update skipped.
    mean = functools.partial(
        _finite_mean, finite=finite, local=local, total=group.num_agents
    )
    weight = self.weights[group.name]
    grad_sum = jax.tree.map(lambda g: mean(g) * weight, grads)
    group_logs = jax.tree.map(
        lambda x: jax.lax.pmean(mean(x), meta_step.AXIS), logs
    )
    group_logs[divergence.DIVERGED] = jax.lax.psum(
        jnp.logical_not(finite).sum(), meta_step.AXIS
    )
    new_levels = None if levels is None else levels[index]
    if sampler is not None:
      new_levels, level_logs = self._update_levels(
          group, levels[index], ends, draws, new_state
      )
      group_logs.update(level_logs)
    return meta_step.GroupStep(grad_sum, group_logs, new_state, new_levels)

  def _combine(self, ctx, groups):
    """The groups' shares, averaged over the devices."""
    grad_sums, logs = super()._combine(ctx, groups)
    return jax.lax.pmean(grad_sums, meta_step.AXIS), logs

  def _update_levels(self, group, sampler_state, ends, draws, agents):
    """The sampler state after this meta-step's ended lifetimes (gathered from
    every device) and its ``levels/...`` logs."""
    sampler = group.level_sampler
    gather = functools.partial(
        jax.lax.all_gather, axis_name=meta_step.AXIS, tiled=True
    )
    all_ends = jax.tree.map(gather, ends)
    state = sampler.update(sampler_state, all_ends)
    state = sampler.count_draws(
        state, jax.tree.map(gather, draws), all_ends.ended
    )
    logs = {f"levels/{k}": v for k, v in sampler.stats(state).items()}
    features = jax.vmap(group.env.level_features)(agents.levels.level)
    for k, v in features.items():
      logs[f"levels/{k}"] = jax.lax.pmean(v.mean(), meta_step.AXIS)
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
      index = (
          first + jax.lax.axis_index(meta_step.AXIS) * local + jnp.arange(local)
      )
      keys.append(
          jax.vmap(
              lambda i: keys_lib.published_agent_keys(
                  step_rng, i, self.num_agents
              )
          )(index)
      )
      first += g.num_agents
    return rng, keys


def _agent_logs(meta_logs, train_logs, rewards, stats) -> types.Logs:
  """One agent's logs of a meta-step: the outer loss's, the inner updates'
  (``inner/...``) and its training rollouts' rewards and episodes."""
  return dict(
      meta_logs,
      **{f"inner/{k}": v for k, v in train_logs.items()},
      rewards=rewards.mean(),
      pos_rewards=(rewards > 0).sum(axis=(1, 2)).mean(),
      neg_rewards=(rewards < 0).sum(axis=(1, 2)).mean(),
      episodes=stats["episodes"].sum(),
      return_sum=stats["return_sum"].sum(),
  )


def _finite_mean(x, finite, local: int, total: int):
  """This device's share (``pmean`` gives the whole) of the mean of ``x``
  ``[local agents, ...]`` over the group's ``total`` agents that are finite: NaN
  if none is, the plain mean's share bit for bit if all are."""
  mask = finite.reshape(finite.shape + (1,) * (x.ndim - 1))
  share = jnp.where(mask, x, 0).sum(0) / local
  scale = total / jax.lax.psum(finite.sum(), meta_step.AXIS)
  return share * scale.astype(share.dtype)
