"""Random keys of meta-training (``PopulationConfig.key_scheme``), independent
of the number of devices.

``published`` (default), the published meta-training notebook's: each meta-step
splits the loop key into the next one and a step key, which gives every agent
(over all groups, in order) an acting key ``act`` (training rollouts
``split(act, inner_steps)``, validation ``act``) and a meta-gradient key. The
run's key gives the loop key and one key per agent (its environments;
``split(key, 3)``: network 0, value function 2). A run draws the notebook's
random numbers on one device (``tests/test_parity.py``). ``per_agent``: each
agent splits its own chain four ways per meta-step (next, acting, meta-gradient,
new lifetime).
"""

from __future__ import annotations

from collections.abc import Sequence

import chex
import jax

PUBLISHED, PER_AGENT = "published", "per_agent"
KEY_SCHEMES = (PUBLISHED, PER_AGENT)


@chex.dataclass(frozen=True)
class AgentKeys:
  """One agent's keys for one meta-step.

  Attributes:
    act: rollouts (training: ``split(act, inner_steps)``; validation: act).
    grad: the meta-gradient (its inner learner steps).
    reset: a new lifetime's initial state, where one starts.
  """

  act: jax.Array
  grad: jax.Array
  reset: jax.Array


def check_scheme(scheme: str) -> str:
  if scheme not in KEY_SCHEMES:
    raise ValueError(
        f"Unknown key_scheme {scheme!r}; use one of {', '.join(KEY_SCHEMES)}."
    )
  return scheme


def initial_keys(
    scheme: str, rng: jax.Array, group_sizes: Sequence[int]
) -> tuple[jax.Array, list[jax.Array]]:
  """The loop key and every group's agent keys ``[num_agents, 2]``."""
  if scheme == PUBLISHED:
    loop_rng, agents_rng = jax.random.split(rng)
    keys = jax.random.split(agents_rng, sum(group_sizes))
    starts = [sum(group_sizes[:i]) for i in range(len(group_sizes))]
    return loop_rng, [
        keys[s : s + n] for s, n in zip(starts, group_sizes, strict=True)
    ]
  # The loop key is unused; agents split their own chains.
  group_rngs = jax.random.split(rng, len(group_sizes))
  return rng, [
      jax.random.split(r, n)
      for r, n in zip(group_rngs, group_sizes, strict=True)
  ]


def split_agent_key(
    scheme: str, key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """An agent's initial key -> ``(environments, learner, value function,
  the agent's own key chain)``."""
  if scheme == PUBLISHED:
    learner, own, value = jax.random.split(key, 3)
    return key, learner, value, own
  env, learner, value, own = jax.random.split(key, 4)
  return env, learner, value, own


def next_step_key(loop_rng: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(next loop key, this meta-step's key)``."""
  loop_rng, step_rng = jax.random.split(loop_rng)
  # The notebook splits the step key over its devices; we use one device's.
  return loop_rng, jax.random.split(step_rng, 1)[0]


def published_agent_keys(
    step_rng: jax.Array, index: jax.Array, num_agents: int
) -> AgentKeys:
  """Agent ``index``'s keys (of ``num_agents``) from the step key."""
  act, grad = jax.random.split(step_rng)
  reset = jax.random.fold_in(step_rng, 1)  # not in the notebook (no lifetimes)
  return AgentKeys(
      act=jax.random.split(act, num_agents)[index],
      grad=jax.random.split(grad, num_agents)[index],
      reset=jax.random.split(reset, num_agents)[index],
  )


def per_agent_keys(agent_rng: jax.Array) -> tuple[jax.Array, AgentKeys]:
  """``(the agent's next key, its keys)`` from its own chain."""
  agent_rng, act, grad, reset = jax.random.split(agent_rng, 4)
  return agent_rng, AgentKeys(act=act, grad=grad, reset=reset)
