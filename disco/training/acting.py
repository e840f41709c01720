"""Acting in jittable environments: rollouts and episode statistics.

Per-episode environment metrics (``EnvTimestep.info``, e.g. Craftax's
achievements) travel with the rollout as ``ActorTimestep.env_info``
(``with_env_info``) and come out of ``episode_stats`` as
``episode/<name>``: their mean over the episodes that ended in the rollout.
Environments without info add nothing (not even the names).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from disco import agent as agent_lib
from disco import types
from disco.environments import base as env_base

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


def with_env_info(
    actor_ts: types.ActorTimestep, timestep: types.EnvTimestep
) -> types.ActorTimestep:
  """``actor_ts`` (chosen at ``timestep``) carrying ``timestep.info``; the
  same object where the environment has no info."""
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
) -> tuple[ActorCarry, types.ActorRollout]:
  """``length`` acting steps in a jittable environment (a ``lax.scan``).

  Returns the advanced carry and the rollout ``[length, B, ...]``; step ``i``
  uses the ``i``-th key of ``jax.random.split(rng, length)``. The carry's
  episode statistics are not updated here (see ``episode_stats``); where the
  environment has info, the rollout carries it (``with_env_info``).
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
  """Episode returns/lengths completed within a ``[T, B]`` rollout.

  ``rollout.rewards[t]`` is the reward of arriving at step ``t``, and
  ``rollout.is_last[t]`` marks the last step of an episode. Where the
  rollout carries environment info (``rollout.env_info``, ``{name: [T,
  B]}``), ``episode/<name>`` is its mean over the episodes that ended (NaN
  where none did), as ``mean_return`` is for returns.
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
