"""The training loop: agents trained by a fixed rule, fully on device.

An iteration is an actor rollout of ``rollout_len`` steps in ``num_envs``
environments, added to the replay, then (once it holds ``min_replay_size``
trajectories) learning on a sampled batch (``reuse_samples``). With a
jittable environment ``run`` compiles all iterations into one ``lax.scan``
with seeds vmapped; host environments are stepped from Python with the same
random numbers. The ``diverged`` metric is 1 where the learner state holds
a NaN or an infinity after the iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from disco import agent as agent_lib
from disco import ops
from disco import policies
from disco import types
from disco.environments import base as env_base
from disco.training import acting
from disco.training import normalization
from disco.training import replay as replay_lib


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Settings of the training loop.

  Attributes:
    num_envs: environments stepped in parallel per seed.
    rollout_len: actor steps per iteration (``rollout_len - 1`` transitions).
    batch_size: trajectories per learner step.
    replay_capacity: trajectories the FIFO replay keeps; 0: no replay, the
      learner uses each rollout (``batch_size`` must equal ``num_envs``).
    min_replay_size: trajectories needed before learning starts.
    update_epochs: passes over each batch.
    num_minibatches: learner steps per pass, each on ``batch_size /
      num_minibatches`` trajectories (reshuffled every pass).
    normalize_observations: the agent acts on and learns from observations
      standardised by their running statistics
      (``disco.training.normalization``).
    normalize_rewards: the learner's rewards are divided by the running
      standard deviation of a discounted return (episode returns in the
      metrics stay the environment's).
    normalize_rewards_discount: that return's discount.
    reward_clip: the learner's rewards are clipped to ``[-reward_clip,
      reward_clip]`` (before any normalisation; episode returns in the
      metrics stay the environment's); 0: no clip.

  Raises:
    ValueError: for inconsistent settings.
  """

  num_envs: int = 2
  rollout_len: int = 29
  batch_size: int = 64
  replay_capacity: int = 1024
  min_replay_size: int = 64
  update_epochs: int = 1
  num_minibatches: int = 1
  normalize_observations: bool = False
  normalize_rewards: bool = False
  normalize_rewards_discount: float = normalization.DEFAULT_DISCOUNT
  reward_clip: float = 0.0

  def __post_init__(self):
    for name in (
        "num_envs",
        "rollout_len",
        "batch_size",
        "update_epochs",
        "num_minibatches",
    ):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
    if self.rollout_len < 2:
      raise ValueError("rollout_len must be >= 2 (one transition at least).")
    if self.replay_capacity == 0 and self.batch_size != self.num_envs:
      raise ValueError(
          f"Without replay (replay_capacity=0) the learner trains on each "
          f"rollout, so batch_size ({self.batch_size}) must equal num_envs "
          f"({self.num_envs})."
      )
    if self.replay_capacity and self.replay_capacity < self.num_envs:
      raise ValueError(
          f"replay_capacity ({self.replay_capacity}) must hold at least one "
          f"rollout's num_envs ({self.num_envs}) trajectories."
      )
    if self.replay_capacity and self.min_replay_size > self.replay_capacity:
      raise ValueError(
          f"min_replay_size ({self.min_replay_size}) exceeds replay_capacity "
          f"({self.replay_capacity})."
      )
    if self.batch_size % self.num_minibatches:
      raise ValueError(
          f"batch_size ({self.batch_size}) must be divisible by "
          f"num_minibatches ({self.num_minibatches}): minibatches split the "
          "batch's trajectories evenly."
      )
    for name in ("normalize_observations", "normalize_rewards"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(
            f"{name} must be True or False, got {getattr(self, name)!r}."
        )
    if not self.reward_clip >= 0.0:
      raise ValueError(f"reward_clip must be >= 0, got {self.reward_clip}.")
    if not 0.0 <= self.normalize_rewards_discount <= 1.0:
      raise ValueError(
          "normalize_rewards_discount must be in [0, 1], got "
          f"{self.normalize_rewards_discount}."
      )

  @property
  def normalizes(self) -> bool:
    """Whether observations or rewards are normalised."""
    return self.normalize_observations or self.normalize_rewards

  @property
  def env_steps_per_iteration(self) -> int:
    return self.num_envs * self.rollout_len

  @property
  def updates_per_learning_iteration(self) -> int:
    """Learner (optimiser) steps of an iteration that learns."""
    return self.update_epochs * self.num_minibatches

  @property
  def iterations_before_learning(self) -> int:
    """Iterations that only fill the replay: learning starts in the one after
    them, once the replay holds ``min_replay_size`` trajectories (0 without
    a replay)."""
    if not self.replay_capacity:
      return 0
    return max(0, -(-self.min_replay_size // self.num_envs) - 1)

  def num_updates(self, num_iterations: int) -> int:
    """Learner steps of the first ``num_iterations`` iterations (none before
    the replay holds ``min_replay_size`` trajectories)."""
    learning = max(0, num_iterations - self.iterations_before_learning)
    return learning * self.updates_per_learning_iteration


def reuse_samples(
    step: Callable[[Any, Any, jax.Array], tuple[Any, types.Logs]],
    learner: Any,
    batch: types.ArrayTree,
    rng: jax.Array,
    epochs: int,
    minibatches: int,
) -> tuple[Any, types.Logs]:
  """Learns from a batch in ``epochs`` passes of ``minibatches`` steps, each
  pass on a fresh shuffle of the ``B`` trajectories (one pass of one
  minibatch: ``step(learner, batch, rng)``).

  Args:
    step: ``(learner, minibatch [T+1, B / minibatches, ...], rng) ->
      (learner, logs)``.
    learner: the learner state.
    batch: ``[T+1, B, ...]`` trajectories, ``B`` divisible by ``minibatches``.
    rng: random key.
    epochs: passes over the batch.
    minibatches: steps per pass.

  Returns:
    The learner after ``epochs * minibatches`` steps, and the mean logs.
  """
  if epochs == 1 and minibatches == 1:
    return step(learner, batch, rng)
  size = jax.tree.leaves(batch)[0].shape[1]

  def split(order, x):  # [T+1, B, ...] -> [M, T+1, B / M, ...]
    x = jnp.take(x, order, axis=1)
    x = x.reshape((x.shape[0], minibatches, size // minibatches) + x.shape[2:])
    return jnp.swapaxes(x, 0, 1)

  def epoch(learner, rng):
    order_rng, step_rng = jax.random.split(rng)
    order = jax.random.permutation(order_rng, size)
    return jax.lax.scan(
        lambda learner, xs: step(learner, *xs),
        learner,
        (
            jax.tree.map(lambda x: split(order, x), batch),
            jax.random.split(step_rng, minibatches),
        ),
    )

  learner, logs = jax.lax.scan(epoch, learner, jax.random.split(rng, epochs))
  return learner, jax.tree.map(lambda x: x.mean(axis=(0, 1)), logs)


@chex.dataclass(frozen=True)
class TrainState:
  """One seed's loop state; ``normalizer``: the running observation and
  reward statistics (None: neither is normalised)."""

  learner: types.LearnerState
  actor: acting.ActorCarry
  replay: replay_lib.ReplayState | None
  rng: jax.Array
  env_steps: jax.Array
  learner_steps: jax.Array
  normalizer: normalization.NormalizerState | None = None


class EvalLoop:
  """Trains one agent per seed with a fixed rule.

  Args:
    agent: the agent (rule, network, optimiser).
    env: a batched environment with ``batch_size == config.num_envs``.
    config: loop settings.
    lifetime: the run's learner updates, told to the rule
      (``UpdateRule.start_lifetime``; None: not told).

  Raises:
    ValueError: if the environment does not fit the config, the agent's
      policy or the rule.
  """

  def __init__(
      self,
      agent: agent_lib.Agent,
      env: env_base.Environment,
      config: LoopConfig,
      lifetime: int | None = None,
  ):
    if env.batch_size != config.num_envs:
      raise ValueError(
          f"The environment has batch_size {env.batch_size} but the loop "
          f"needs num_envs={config.num_envs}."
      )
    expected = policies.make_policy(env.action_spec())
    if (expected.is_continuous, expected.param_size) != (
        agent.policy.is_continuous,
        agent.policy.param_size,
    ):
      raise ValueError(
          f"The environment's actions need the policy {expected}, the agent "
          f"has {agent.policy}."
      )
    if agent.rule.needs_env_copies and not env.is_jittable:
      raise ValueError(
          f"Rule {type(agent.rule).__name__} searches over copies of the "
          "environment state and needs a jittable environment; use e.g. "
          "'catch' instead of a host (dm_env) environment."
      )
    agent.rule.check_env(env)
    if config.normalizes and agent.rule.needs_env_copies:
      raise ValueError(
          f"Rule {type(agent.rule).__name__} searches over copies of the "
          "environment, whose observations and rewards are the raw ones: "
          "set normalize_observations=False and normalize_rewards=False."
      )
    if config.normalize_observations:
      normalization.check_observation(env.observation_spec())
    self.agent = agent
    self.env = env
    self.config = config
    self.lifetime = lifetime
    self._search_env = env if agent.rule.needs_env_copies else None
    self._actor_step = jax.jit(self._actor_step_impl)
    # Kept, so that JAX's trace cache serves both of ``_maybe_learn``'s uses.
    self._seed_learner_step = jax.jit(self._learner_step)
    self._seeds_learner_step = jax.jit(
        jax.vmap(self._learner_step, in_axes=(0, 0, 0, None))
    )
    self._learn = jax.jit(self._learn_impl)
    self._run = jax.jit(self._run_impl, static_argnums=2)
    self._init_seeds = jax.jit(
        jax.vmap(lambda seed: self.init(jax.random.PRNGKey(seed)))
    )
    self._seed_keys = jax.jit(
        lambda seed: tuple(jax.random.split(jax.random.PRNGKey(seed), 3))
    )
    self._init_host_seed = jax.jit(
        lambda *args: jax.tree.map(
            lambda x: x[None], self._init_from_actor(*args)
        )
    )

  # ------------------------------------------------------------------ setup
  def init(self, rng: jax.Array) -> TrainState:
    """Initial state for one seed (traceable where the environment is
    jittable)."""
    env_rng, learner_rng, loop_rng = jax.random.split(rng, 3)
    actor = acting.init_actor(self.env, env_rng)
    return self._init_from_actor(actor, learner_rng, loop_rng)

  def _init_from_actor(
      self, actor: acting.ActorCarry, learner_rng: jax.Array, loop_rng
  ) -> TrainState:
    """The state of one seed around its reset environments ``actor``."""
    learner = self.agent.initial_learner_state(
        learner_rng,
        jax.tree.map(lambda x: x[0], actor.timestep.observation),
        self.lifetime,
    )
    normalizer = normalization.init(
        actor.timestep.observation,
        self.config.normalize_observations,
        self.config.normalize_rewards,
    )
    replay = None
    if self.config.replay_capacity:
      # The rollout's shape from one actor step (host environments cannot
      # be traced through ``_unroll``'s scan).
      step = jax.eval_shape(
          lambda: self._actor_step_impl(
              learner.params,
              learner.rule_state,
              actor.timestep,
              actor.env_state,
              loop_rng,
              normalizer,
          )
      )
      example = jax.tree.map(
          lambda s: jax.ShapeDtypeStruct(
              (self.config.rollout_len, *s.shape), s.dtype
          ),
          step,
      )
      replay = replay_lib.init(example, self.config.replay_capacity)
    return TrainState(
        learner=learner,
        actor=actor,
        replay=replay,
        rng=loop_rng,
        env_steps=jnp.zeros([], jnp.int32),
        learner_steps=jnp.zeros([], jnp.int32),
        normalizer=normalizer,
    )

  def init_seeds(self, seeds: Sequence[int] | np.ndarray) -> TrainState:
    """Initial states stacked over seeds (leading ``[S]``); seed ``s`` starts
    from ``init(PRNGKey(s))``."""
    seeds = ops.prng_seeds(seeds)
    if self.env.is_jittable:
      return self._init_seeds(seeds)
    states = []
    for seed in seeds:
      env_rng, learner_rng, loop_rng = self._seed_keys(seed)
      actor = acting.init_actor(self.env, env_rng)
      states.append(self._init_host_seed(actor, learner_rng, loop_rng))
    if len(states) == 1:
      return states[0]
    return jax.tree.map(lambda *x: np.concatenate(x), *states)

  # ----------------------------------------------------------------- acting
  def _actor_step_impl(
      self, params, rule_state, timestep, env_state, rng, normalizer=None
  ):
    """The agent's step at ``timestep``; with a ``normalizer`` it sees the
    normalised observations, the step records the raw ones."""
    raw = timestep.observation
    normalizes = normalizer is not None and normalizer.observations is not None
    if normalizes:
      timestep = timestep.replace(
          observation=normalization.observe_actor(normalizer, raw)
      )
    actor_ts = self.agent.actor_step(
        params,
        rng,
        timestep,
        rule_state,
        env=self._search_env,
        env_state=env_state,
    )
    if normalizes:
      actor_ts = actor_ts.replace(observations=raw)
    return actor_ts

  def _unroll(
      self, params, rule_state, actor: acting.ActorCarry, rng, normalizer=None
  ):
    """Scanned actor rollout in a jittable environment: ``[T+1, B, ...]``
    (raw observations; the actor sees them through ``normalizer``)."""
    return acting.unroll_actor(
        self.agent,
        self.env,
        params,
        rule_state,
        actor,
        rng,
        self.config.rollout_len,
        normalizer=normalizer,
    )

  def _host_unroll(self, state: TrainState, rng):
    """The same rollout with a host environment stepped from Python."""
    actor = state.actor
    env_state, timestep = actor.env_state, actor.timestep
    steps = []
    for step_rng in jax.random.split(rng, self.config.rollout_len):
      actor_ts = self._actor_step(
          state.learner.params,
          state.learner.rule_state,
          timestep,
          env_state,
          step_rng,
          state.normalizer,
      )
      steps.append(acting.with_env_info(actor_ts, timestep))
      # Host arrays go to the actor step as they are: its call moves them.
      env_state, timestep = self.env.step(
          env_state, np.asarray(actor_ts.actions)
      )
    rollout = jax.tree.map(lambda *x: jnp.stack(x), *steps)
    timestep = jax.tree.map(jnp.asarray, timestep)
    return actor.replace(env_state=env_state, timestep=timestep), rollout

  # --------------------------------------------------------------- learning
  def _collect(
      self, state: TrainState, actor: acting.ActorCarry, rollout, sample_rng
  ):
    """Episode statistics (of the raw rewards), normalisation, replay insert
    and the learner's batch (the environment's info is dropped after the
    statistics; the replay stores what the learner sees)."""
    actor, stats = acting.episode_stats(actor, rollout)
    rollout = self._clip_rewards(rollout.replace(env_info=None))
    if state.normalizer is not None:
      normalizer, rollout = normalization.learner_rollout(
          state.normalizer, rollout, self.config.normalize_rewards_discount
      )
      state = state.replace(normalizer=normalizer)
    if state.replay is None:
      replay, batch = None, rollout
    else:
      replay = replay_lib.add(state.replay, rollout)
      batch = replay_lib.sample(replay, sample_rng, self.config.batch_size)
    return state.replace(actor=actor, replay=replay), batch, stats

  def _clip_rewards(self, rollout: types.ActorRollout) -> types.ActorRollout:
    """``rollout`` with the learner's rewards clipped (``reward_clip``)."""
    c = self.config.reward_clip
    if not c:
      return rollout
    return rollout.replace(rewards=jnp.clip(rollout.rewards, -c, c))

  def learner_batch(self, state: TrainState, rng: jax.Array):
    """What one seed's learner trains on next, drawn afresh: a replay sample
    ``[T+1, B]``, or without replay a new rollout (the actor state is left as
    it was). Jittable environments only."""
    if state.replay is None:
      _, rollout = self._unroll(
          state.learner.params,
          state.learner.rule_state,
          state.actor,
          rng,
          state.normalizer,
      )
      rollout = self._clip_rewards(rollout.replace(env_info=None))
      if state.normalizer is not None:
        rollout = normalization.learner_view(state.normalizer, rollout)
      return rollout
    return replay_lib.sample(state.replay, rng, self.config.batch_size)

  def _ready(self, state: TrainState) -> jax.Array:
    """Whether to learn this iteration (the same for every seed)."""
    if state.replay is None:
      return jnp.array(True)
    return state.replay.size >= self.config.min_replay_size

  def _learner_step(self, learner, batch, rng, meta_params):
    step = lambda learner, batch, rng: self.agent.learner_step(
        rng, batch, learner, meta_params, False
    )
    return reuse_samples(
        step,
        learner,
        batch,
        rng,
        self.config.update_epochs,
        self.config.num_minibatches,
    )

  def _maybe_learn(self, ready, learner, batch, rng, meta_params, learner_step):
    """One learner step if ``ready`` (a scalar shared by all seeds), else the
    unchanged learner with NaN logs. ``learner_step`` (vmapped over seeds or
    not) is one ``jax.jit`` object kept by the loop, so the skip branch's
    ``eval_shape`` reuses the learn branch's trace of it."""

    def skip(learner, batch, rng):
      logs = jax.eval_shape(learner_step, learner, batch, rng, meta_params)[1]
      return learner, jax.tree.map(
          lambda s: jnp.full(s.shape, jnp.nan, s.dtype), logs
      )

    return jax.lax.cond(
        ready,
        lambda *a: learner_step(*a, meta_params),
        skip,
        learner,
        batch,
        rng,
    )

  def _finish(self, state: TrainState, learner, logs, stats, ready):
    env_steps = state.env_steps + self.config.env_steps_per_iteration
    learner_steps = state.learner_steps + (
        ready.astype(jnp.int32) * self.config.updates_per_learning_iteration
    )
    metrics = dict(
        stats,
        env_steps=env_steps,
        learner_steps=learner_steps,
        diverged=jnp.logical_not(ops.all_finite(learner)).astype(jnp.int32),
        **{f"learner/{k}": v for k, v in logs.items()},
    )
    return (
        state.replace(
            learner=learner, env_steps=env_steps, learner_steps=learner_steps
        ),
        metrics,
    )

  def _learn_impl(
      self,
      state: TrainState,
      actor: acting.ActorCarry,
      rollout,
      meta_params,
      rngs,
  ):
    """Everything after acting, for one seed."""
    learner_rng, sample_rng = rngs
    state, batch, stats = self._collect(state, actor, rollout, sample_rng)
    ready = self._ready(state)
    learner, logs = self._maybe_learn(
        ready,
        state.learner,
        batch,
        learner_rng,
        meta_params,
        self._seed_learner_step,
    )
    return self._finish(state, learner, logs, stats, ready)

  def _split(self, rng):
    rng, actor_rng, learner_rng, sample_rng = jax.random.split(rng, 4)
    return rng, actor_rng, (learner_rng, sample_rng)

  def _act(self, state: TrainState):
    rng, actor_rng, learn_rngs = self._split(state.rng)
    actor, rollout = self._unroll(
        state.learner.params,
        state.learner.rule_state,
        state.actor,
        actor_rng,
        state.normalizer,
    )
    return state.replace(rng=rng), actor, rollout, learn_rngs

  def _run_impl(self, states: TrainState, meta_params, num_iterations: int):
    """Iterations scanned, seeds vmapped inside each, so the learner step is
    under a real ``cond`` (not a vmapped select)."""

    def iteration(states, _):
      states, actor, rollout, (learner_rngs, sample_rngs) = jax.vmap(self._act)(
          states
      )
      states, batch, stats = jax.vmap(self._collect)(
          states, actor, rollout, sample_rngs
      )
      ready = self._ready(jax.tree.map(lambda x: x[0], states))
      learner, logs = self._maybe_learn(
          ready,
          states.learner,
          batch,
          learner_rngs,
          meta_params,
          self._seeds_learner_step,
      )
      return jax.vmap(self._finish, in_axes=(0, 0, 0, 0, None))(
          states, learner, logs, stats, ready
      )

    states, metrics = jax.lax.scan(
        iteration, states, None, length=num_iterations
    )
    return states, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics)

  # ---------------------------------------------------------------- running
  def run_traceable(
      self, states: TrainState, meta_params, num_iterations: int
  ) -> tuple[TrainState, dict[str, jax.Array]]:
    """``run``'s body, traceable (jittable environments): new states and
    device metrics ``{name: [S, num_iterations]}``, for callers that jit or
    vmap it themselves (``num_iterations`` static)."""
    return self._run_impl(states, meta_params, num_iterations)

  def run(
      self, states: TrainState, meta_params, num_iterations: int
  ) -> tuple[TrainState, dict[str, np.ndarray]]:
    """Runs ``num_iterations`` iterations for every seed in ``states``.

    Args:
      states: stacked per-seed states (``init_seeds``).
      meta_params: the rule's meta-parameters, shared by all seeds.
      num_iterations: static (keep it fixed across calls to avoid recompiling).

    Returns:
      New states and host metrics ``{name: [S, num_iterations]}``.

    Raises:
      ValueError: for several seeds with a host environment that keeps one
        set of streams (``Environment.keeps_lifetimes``).
    """
    if self.env.is_jittable:
      states, metrics = self._run(states, meta_params, num_iterations)
      return states, jax.device_get(metrics)
    return self._run_host(states, meta_params, num_iterations)

  def _run_host(self, states, meta_params, num_iterations):
    """Each seed in turn (a host environment steps one batch at a time)."""
    num_seeds = jax.tree.leaves(states.rng)[0].shape[0]
    if num_seeds != 1 and not self.env.keeps_lifetimes:
      raise ValueError(
          f"Host environment {type(self.env).__name__} keeps one set of "
          "streams, so it trains one seed at a time; pass states for a "
          "single seed."
      )
    seeds_out, seeds_metrics = [], []
    for s in range(num_seeds):
      state = jax.tree.map(lambda x, s=s: x[s], states)
      history = []
      for _ in range(num_iterations):
        rng, actor_rng, learn_rngs = self._split(state.rng)
        state = state.replace(rng=rng)
        actor, rollout = self._host_unroll(state, actor_rng)
        state, metrics = self._learn(
            state, actor, rollout, meta_params, learn_rngs
        )
        history.append(jax.device_get(metrics))
      seeds_out.append(state)
      seeds_metrics.append(
          {k: np.stack([h[k] for h in history]) for k in history[0]}
      )
    metrics = {
        k: np.stack([m[k] for m in seeds_metrics]) for k in seeds_metrics[0]
    }
    return jax.tree.map(lambda *x: jnp.stack(x), *seeds_out), metrics
