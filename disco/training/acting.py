"""Acting in jittable environments: rollouts and episode statistics."""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from disco import agent as agent_lib
from disco import types
from disco.environments import base as env_base


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
  """A new lifetime's carry; ``level``: the level to reset to (environments
  with levels only; None: the environment's own reset)."""
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


def unroll_actor(
    agent: agent_lib.Agent,
    env: env_base.Environment,
    params: types.Params,
    rule_state: types.RuleState | None,
    actor: ActorCarry,
    rng: jax.Array,
    length: int,
) -> tuple[ActorCarry, types.ActorRollout]:
  """``length`` acting steps in a jittable environment (a ``lax.scan``).

  Returns the advanced carry and the rollout ``[length, B, ...]``; step ``i``
  uses the ``i``-th key of ``jax.random.split(rng, length)``. The carry's
  episode statistics are not updated here (see ``episode_stats``).
  """
  search_env = env if agent.rule.needs_env_copies else None

  def step(carry, step_rng):
    env_state, timestep = carry
    actor_ts = agent.actor_step(
        params,
        step_rng,
        timestep,
        rule_state,
        env=search_env,
        env_state=env_state,
    )
    env_state, timestep = env.step(env_state, actor_ts.actions)
    return (env_state, timestep), actor_ts

  (env_state, timestep), rollout = jax.lax.scan(
      step, (actor.env_state, actor.timestep), jax.random.split(rng, length)
  )
  return actor.replace(env_state=env_state, timestep=timestep), rollout


def episode_stats(
    actor: ActorCarry, rollout: types.ActorRollout
) -> tuple[ActorCarry, dict[str, jax.Array]]:
  """Episode returns/lengths completed within a ``[T, B]`` rollout.

  ``rollout.rewards[t]`` is the reward of arriving at step ``t``, and
  ``rollout.is_last[t]`` marks the last step of an episode.
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
  return actor.replace(episode_return=ret, episode_length=length), stats
