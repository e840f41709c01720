"""Acting in jittable environments: rollouts and episode statistics.

Per-episode environment metrics (``EnvTimestep.info``) ride in rollouts as
``ActorTimestep.env_info`` and come out of ``episode_stats`` as
``episode/<name>``.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from disco import agent as agent_lib
from disco import types
from disco.environments import base as env_base
from disco.training import normalization

# episode_stats's name of the mean of an environment's info ``<name>``.
EPISODE_INFO_PREFIX = "episode/"


@chex.dataclass(frozen=True)
class ActorCarry:
  """Environment side of an agent: env state, last timestep, episode stats."""

  env_state: Any
  timestep: types.EnvTimestep
  episode_return: jax.Array  # [B] return so far of the running episodes
  episode_length: jax.Array  # [B]


def init_actor(
    env: env_base.Environment, rng: jax.Array, level: Any = None
) -> ActorCarry:
  """A new lifetime's carry, reset to ``level`` if given (environments with
  levels only)."""
  if level is None:
    env_state, timestep = env.reset(rng)
  else:
    env_state, timestep = env.reset(rng, level)
  batch = env.batch_size
  return ActorCarry(
      env_state=env_state,
      timestep=jax.tree.map(jnp.asarray, timestep),
      episode_return=jnp.zeros([batch]),
      episode_length=jnp.zeros([batch], jnp.int32),
  )


def with_env_info(
    actor_ts: types.ActorTimestep, timestep: types.EnvTimestep
) -> types.ActorTimestep:
  """``actor_ts`` (chosen at ``timestep``) carrying its ``info``, if any."""
  if not timestep.info:
    return actor_ts
  return actor_ts.replace(env_info=timestep.info)


def unroll_actor(
    agent: agent_lib.Agent,
    env: env_base.Environment,
    params: types.Params,
    rule_state: types.RuleState | None,
    actor: ActorCarry,
    rng: jax.Array,
    length: int,
    normalizer: normalization.NormalizerState | None = None,
) -> tuple[ActorCarry, types.ActorRollout]:
  """``length`` acting steps in a jittable environment (a ``lax.scan``).

  Returns the advanced carry and the rollout ``[length, B, ...]``; step ``i``
  uses key ``i`` of ``jax.random.split(rng, length)``. Episode statistics are
  not updated here (``episode_stats``). With a ``normalizer`` the agent sees
  normalised observations (``normalization.observe_actor``) and the rollout
  holds the raw ones.
  """
  normalizes = normalizer is not None and normalizer.observations is not None
  search_env = env if agent.rule.needs_env_copies else None

  def step(carry, step_rng):
    env_state, timestep = carry
    seen = timestep
    if normalizes:
      seen = timestep.replace(
          observation=normalization.observe_actor(
              normalizer, timestep.observation
          )
      )
    actor_ts = agent.actor_step(
        params,
        step_rng,
        seen,
        rule_state,
        env=search_env,
        env_state=env_state,
    )
    if normalizes:
      actor_ts = actor_ts.replace(observations=timestep.observation)
    actor_ts = with_env_info(actor_ts, timestep)
    env_state, timestep = env.step(env_state, actor_ts.actions)
    return (env_state, timestep), actor_ts

  (env_state, timestep), rollout = jax.lax.scan(
      step, (actor.env_state, actor.timestep), jax.random.split(rng, length)
  )
  return actor.replace(env_state=env_state, timestep=timestep), rollout


def episode_stats(
    actor: ActorCarry, rollout: types.ActorRollout
) -> tuple[ActorCarry, dict[str, jax.Array]]:
  """Returns and lengths of the episodes completed in a ``[T, B]`` rollout.

  ``rollout.rewards[t]`` is the reward of arriving at step ``t``;
  ``rollout.is_last[t]`` ends an episode. ``episode/<name>`` is the mean of
  ``env_info[name]`` over the ended episodes. Means are NaN where no episode
  ended.
  """

  def step(acc, x):
    ret, length = acc
    reward, done = x
    ret, length = ret + reward, length + 1
    return (jnp.where(done, 0.0, ret), jnp.where(done, 0, length)), (
        jnp.where(done, ret, 0.0),
        jnp.where(done, length, 0),
        done,
    )

  (ret, length), (returns, lengths, done) = jax.lax.scan(
      step,
      (actor.episode_return, actor.episode_length),
      (rollout.rewards, rollout.is_last),
  )
  episodes = done.sum()
  denom = jnp.maximum(episodes, 1)
  stats = dict(
      episodes=episodes,
      return_sum=returns.sum(),
      mean_return=jnp.where(episodes > 0, returns.sum() / denom, jnp.nan),
      mean_episode_length=jnp.where(
          episodes > 0, lengths.sum() / denom, jnp.nan
      ),
      reward_mean=rollout.rewards.mean(),
  )
  for name, value in (rollout.env_info or {}).items():
    total = jnp.where(done, value, 0.0).sum()
    stats[EPISODE_INFO_PREFIX + name] = jnp.where(
        episodes > 0, total / denom, jnp.nan
    )
  return actor.replace(episode_return=ret, episode_length=length), stats
