"""Level samplers: which level an agent starting a new lifetime trains on.

Three kinds, registered by name in ``disco.meta.level_sampler_registry``
and chosen by ``SamplerConfig.kind`` (``none``: no sampler):

  * ``uniform`` (``LevelSampler``, the base of every sampler): a fresh level
    of the environment's generator every lifetime.
  * ``plr`` (``PLRSampler``): Prioritized Level Replay (Jiang, Grefenstette and Rocktäschel,
    ICML 2021; the robust variant's buffer, Jiang et al., NeurIPS 2021). A
    buffer of ``buffer_size`` levels with their scores and the time each was
    last used. An agent starting a lifetime replays a buffered level with
    probability ``replay_prob`` once the buffer is ``min_fill`` full, else
    plays a fresh level. Replay draws level ``i`` with probability
    ``P_i = (1 - staleness_coef) * S_i + staleness_coef * C_i``, where ``S``
    transforms the scores (``rank``: ``h_i = (1 / rank_i) ** (1 /
    temperature)``, ranks from 1 for the highest score; ``power``: ``h_i =
    max(score_i, 0) ** (1 / temperature)``), normalised over the filled
    slots, and ``C_i`` is the staleness ``clock - last_used_i``, normalised
    (uniform when all are 0). When a lifetime ends, its level's score
    (``score_fn``: ``pvl``, the positive value loss, mean of ``max(A_t,
    0)``, or ``max_mc``, mean of ``R_max - V(s_t)``) replaces the slot's; a
    fresh level enters an empty slot, or replaces the lowest-scored level if
    it scores higher.
  * ``groove`` (``GrooveSampler``): PLR's buffer, whose score is GROOVE's
    *algorithmic regret* (Jackson, Lu, Kirsch, Lange, Whiteson and
    Foerster, NeurIPS 2023): the return of a hand-designed reference rule
    (``actor_critic`` or ``ppo``) trained on the level for the same
    lifetime, minus the meta-learned rule's. The
    reference trains alongside each agent (same level, same number of
    updates); its return is cached with the level when the level enters the
    buffer, and replays use the cached value.

Returns are the mean undiscounted return of the episodes that ended in a
lifetime's last meta-step; ``R_max`` in MaxMC is the largest episode return
seen in the lifetime (undiscounted, where PLR's uses discounted returns).

Why not ``jaxued``'s ``LevelSampler`` (0.0.1, read from its wheel): it calls
``jax.tree_map``, which JAX 0.10 no longer has; its state is a mutable dict,
not a frozen pytree; it offers rank and top-k transforms, not the power
transform; and sampling a replay level writes the buffer (timestamps and
episode count) at draw time, which would make the replicated buffer differ
between devices when each device draws its own agents' levels. Here drawing
never writes the state: each device draws for its agents, the ended
lifetimes of all devices are gathered, and every device applies the same
``update`` (so the state stays replicated, and a resumed run continues bit
for bit).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import numbers
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from disco.environments import base as env_base

# "No return yet": a finite sentinel (checkpoints refuse non-finite values).
NO_RETURN = float(np.finfo(np.float32).min)
NONE = "none"  # no sampler: the environments' own resets
SCORE_FNS = ("pvl", "max_mc")
TRANSFORMS = ("rank", "power")
REFERENCE_RULES = ("actor_critic", "ppo")


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """Settings of a level sampler (see the module docstring).

  Attributes:
    kind: a registered sampler's name
      (``disco.meta.level_sampler_registry``; checked there), or ``none``
      (the environments' own resets).
    buffer_size: levels a buffered sampler (PLR, GROOVE) keeps.
    replay_prob: probability of replaying a buffered level.
    score_fn: PLR's score (``SCORE_FNS``); GROOVE scores by regret.
    transform: ``rank`` or ``power``.
    temperature: of the transform (> 0).
    staleness_coef: weight of staleness in the replay distribution.
    min_fill: fraction of the buffer filled before replays start.
    reference_rule: GROOVE's reference rule (``REFERENCE_RULES``).
  """

  kind: str = "uniform"
  buffer_size: int = 4000
  replay_prob: float = 0.95
  score_fn: str = "pvl"
  transform: str = "rank"
  temperature: float = 0.3
  staleness_coef: float = 0.3
  min_fill: float = 0.5
  reference_rule: str = "actor_critic"

  def __post_init__(self):
    def fail(what):
      raise ValueError(f"level_sampler.{what}")

    if self.score_fn not in SCORE_FNS:
      fail(
          f"score_fn={self.score_fn!r} is unknown; valid: "
          f"{', '.join(SCORE_FNS)}."
      )
    if self.transform not in TRANSFORMS:
      fail(
          f"transform={self.transform!r} is unknown; valid: "
          f"{', '.join(TRANSFORMS)}."
      )
    if self.reference_rule not in REFERENCE_RULES:
      fail(
          f"reference_rule={self.reference_rule!r} is unknown; valid: "
          f"{', '.join(REFERENCE_RULES)}."
      )
    if (
        not isinstance(self.buffer_size, numbers.Integral)
        or self.buffer_size < 1
    ):
      fail(f"buffer_size={self.buffer_size!r} must be an integer >= 1.")
    for name in ("replay_prob", "staleness_coef", "min_fill"):
      value = getattr(self, name)
      if not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        fail(f"{name}={value!r} must be a number in [0, 1].")
    if not isinstance(self.temperature, numbers.Real) or self.temperature <= 0:
      fail(f"temperature={self.temperature!r} must be a number > 0.")


@chex.dataclass(frozen=True)
class SamplerState:
  """A sampler's state (replicated; ``N``: ``buffer_size``, 1 for uniform).

  Attributes:
    levels: the buffered levels (leaves ``[N, ...]``).
    scores: float32 ``[N]``.
    last_used: int32 ``[N]`` clock when each level was last used.
    filled: bool ``[N]``.
    reference: float32 ``[N]`` GROOVE's cached reference return.
    clock: int32 ``[]`` lifetimes ended so far.
    draws: int32 ``[]`` lifetimes started with a drawn level.
    replays: int32 ``[]`` of them on a replayed level.
  """

  levels: Any
  scores: jax.Array
  last_used: jax.Array
  filled: jax.Array
  reference: jax.Array
  clock: jax.Array
  draws: jax.Array
  replays: jax.Array


@chex.dataclass(frozen=True)
class Draw:
  """One agent's drawn level: ``level``, int32 ``slot`` (-1: a fresh
  level) and bool ``replay``. Batched draws lead with ``[M]``."""

  level: Any
  slot: jax.Array
  replay: jax.Array


@chex.dataclass(frozen=True)
class LifetimeEnd:
  """What ended lifetimes tell the sampler (every leaf ``[M, ...]``).

  Attributes:
    level: the lifetime's level.
    slot: its buffer slot (-1: a fresh level).
    score: the lifetime's PLR score (or the meta-rule's return, GROOVE).
    reference: GROOVE's reference return of the lifetime (else unused).
    ended: bool, which entries are ended lifetimes (the rest are ignored).
  A score or reference of ``NO_RETURN`` or NaN (no episode ended, or a
  diverged agent) leaves the buffer as it is.
  """

  level: Any
  slot: jax.Array
  score: jax.Array
  reference: jax.Array
  ended: jax.Array


def regret(reference_return: jax.Array, agent_return: jax.Array) -> jax.Array:
  """GROOVE's algorithmic regret: the reference's return minus the
  meta-learned rule's (0 where they match)."""
  return reference_return - agent_return


class LevelSampler:
  """A level sampler over ``env``'s levels (pure methods over
  ``SamplerState``): the base of every sampler, and by itself the uniform
  one (a fresh level every lifetime).

  A subclass sets ``buffered`` (it keeps ``config.buffer_size`` levels with
  their scores, and replays them as PLR does) and ``uses_reference`` (the
  population trains GROOVE's reference agent beside every agent, with
  ``config.reference_rule``), and may override what the population asks
  of it: ``score_step`` (a meta-step's score of an agent's level),
  ``lifetime_score`` (what an ended lifetime tells the sampler),
  ``buffer_score`` (the score a buffered level keeps), and ``draw``.

  Raises:
    base.LevelsUnsupportedError: if ``env`` has no levels.
  """

  buffered: bool = False
  uses_reference: bool = False

  def __init__(self, config: SamplerConfig, env: env_base.Environment):
    env_base.require_levels(env, getattr(env, "name", ""))
    self.config = config
    self.env = env
    self.capacity = config.buffer_size if self.buffered else 1

  # ---------------------------------------------------------------- state
  def init(self) -> SamplerState:
    example = jax.eval_shape(self.env.sample_level, jax.random.PRNGKey(0))
    n = self.capacity
    levels = jax.tree.map(lambda x: jnp.zeros((n,) + x.shape, x.dtype), example)
    return SamplerState(
        levels=levels,
        scores=jnp.zeros([n], jnp.float32),
        last_used=jnp.zeros([n], jnp.int32),
        filled=jnp.zeros([n], bool),
        reference=jnp.zeros([n], jnp.float32),
        clock=jnp.zeros([], jnp.int32),
        draws=jnp.zeros([], jnp.int32),
        replays=jnp.zeros([], jnp.int32),
    )

  # -------------------------------------------------------------- drawing
  def score_weights(self, state: SamplerState) -> jax.Array:
    """``S``: the transformed scores over the filled slots, ``[N]``."""
    c = self.config
    mask = state.filled
    if c.transform == "rank":
      keyed = jnp.where(mask, state.scores, -jnp.inf)
      order = jnp.argsort(-keyed, stable=True)
      ranks = jnp.zeros_like(order).at[order].set(jnp.arange(order.size) + 1)
      h = (1.0 / ranks.astype(jnp.float32)) ** (1.0 / c.temperature)
    else:
      h = jnp.maximum(state.scores, 0.0) ** (1.0 / c.temperature)
    h = jnp.where(mask, h, 0.0)
    total = h.sum()
    uniform = mask / jnp.maximum(mask.sum(), 1)
    return jnp.where(total > 0, h / jnp.where(total > 0, total, 1.0), uniform)

  def staleness_weights(self, state: SamplerState) -> jax.Array:
    """``C``: normalised staleness over the filled slots, ``[N]``."""
    mask = state.filled
    stale = jnp.where(mask, state.clock - state.last_used, 0).astype(
        jnp.float32
    )
    total = stale.sum()
    uniform = mask / jnp.maximum(mask.sum(), 1)
    return jnp.where(
        total > 0, stale / jnp.where(total > 0, total, 1.0), uniform
    )

  def replay_probabilities(self, state: SamplerState) -> jax.Array:
    """``P``: the probability of replaying each slot, ``[N]``."""
    rho = self.config.staleness_coef
    return (1 - rho) * self.score_weights(state) + rho * (
        self.staleness_weights(state)
    )

  def can_replay(self, state: SamplerState) -> jax.Array:
    """bool ``[]``: whether the buffer is full enough to replay."""
    need = max(1, int(np.ceil(self.config.min_fill * self.capacity)))
    return state.filled.sum() >= need

  def draw(self, state: SamplerState, rng: jax.Array) -> Draw:
    """One agent's level (does not change ``state``)."""
    fresh_rng, coin_rng, pick_rng = jax.random.split(rng, 3)
    fresh = self.env.sample_level(fresh_rng)
    if not self.buffered:
      return Draw(level=fresh, slot=jnp.int32(-1), replay=jnp.bool_(False))
    replay = self.can_replay(state) & (
        jax.random.uniform(coin_rng) < self.config.replay_prob
    )
    probs = self.replay_probabilities(state)
    slot = jax.random.categorical(
        pick_rng, jnp.where(probs > 0, jnp.log(probs), -jnp.inf)
    ).astype(jnp.int32)
    buffered = jax.tree.map(lambda x: x[slot], state.levels)
    level = jax.tree.map(lambda b, f: jnp.where(replay, b, f), buffered, fresh)
    return Draw(level=level, slot=jnp.where(replay, slot, -1), replay=replay)

  def draw_many(self, state: SamplerState, rng: jax.Array, num: int) -> Draw:
    """``num`` independent draws (leaves ``[num, ...]``)."""
    return jax.vmap(lambda k: self.draw(state, k))(jax.random.split(rng, num))

  # ------------------------------------------------------------- updating
  def update(self, state: SamplerState, ends: LifetimeEnd) -> SamplerState:
    """Applies ended lifetimes in order (the same on every device).

    Args:
      state: the sampler state.
      ends: the population's lifetimes that ended this meta-step (leaves
        ``[M, ...]``; ``ended`` marks the real ones; a non-finite score is
        ignored). A replayed level whose slot was given to another level
        meanwhile counts as a fresh level.
    """
    if not self.buffered:
      return state.replace(clock=state.clock + ends.ended.sum())

    def one(state, end):
      valid = end.ended & jnp.isfinite(end.score) & jnp.isfinite(end.reference)
      valid &= (end.score > NO_RETURN) & (end.reference > NO_RETURN)
      clock = state.clock + end.ended.astype(jnp.int32)
      same = jax.tree.leaves(
          jax.tree.map(
              lambda buf, x: jnp.all(buf[jnp.maximum(end.slot, 0)] == x),
              state.levels,
              end.level,
          )
      )
      known = (end.slot >= 0) & jnp.all(jnp.stack(same))
      slot_ref = state.reference[jnp.maximum(end.slot, 0)]
      reference = jnp.where(known, slot_ref, end.reference)
      score = self.buffer_score(end.score, reference)
      # A fresh level: the first empty slot, else the lowest-scored one if
      # this level scores higher.
      empty = ~state.filled
      lowest = jnp.argmin(jnp.where(state.filled, state.scores, jnp.inf))
      target = jnp.where(empty.any(), jnp.argmax(empty), lowest)
      insert = ~known & (empty.any() | (score > state.scores[target]))
      slot = jnp.where(known, end.slot, target)
      write = valid & (known | insert)
      new = state.replace(
          levels=jax.tree.map(
              lambda buf, x: buf.at[slot].set(
                  jnp.where(write & ~known, x, buf[slot])
              ),
              state.levels,
              end.level,
          ),
          scores=state.scores.at[slot].set(
              jnp.where(write, score, state.scores[slot])
          ),
          last_used=state.last_used.at[slot].set(
              jnp.where(write, clock, state.last_used[slot])
          ),
          filled=state.filled.at[slot].set(state.filled[slot] | write),
          reference=state.reference.at[slot].set(
              jnp.where(write, reference, state.reference[slot])
          ),
          clock=clock,
      )
      return new, None

    state, _ = jax.lax.scan(one, state, ends)
    return state

  def count_draws(self, state: SamplerState, draws: Draw, used) -> SamplerState:
    """Counts the draws that started lifetimes (``used``: bool ``[M]``)."""
    return state.replace(
        draws=state.draws + used.sum().astype(jnp.int32),
        replays=state.replays + (used & draws.replay).sum().astype(jnp.int32),
    )

  # ---------------------------------------------------------------- logs
  def stats(self, state: SamplerState) -> dict[str, jax.Array]:
    """Scalars for the metrics history (``levels/...``)."""
    logs = dict(
        replay_fraction=state.replays / jnp.maximum(state.draws, 1),
        lifetimes=state.clock.astype(jnp.float32),
    )
    if self.buffered:
      mask = state.filled
      n = jnp.maximum(mask.sum(), 1)
      scores = jnp.where(mask, state.scores, 0.0)
      mean = scores.sum() / n
      logs.update(
          buffer_fill=mask.mean(),
          score_mean=mean,
          score_std=jnp.sqrt(
              jnp.where(mask, (state.scores - mean) ** 2, 0.0).sum() / n
          ),
          score_max=jnp.where(
              mask.any(), jnp.where(mask, state.scores, -jnp.inf).max(), 0.0
          ),
          score_min=jnp.where(
              mask.any(), jnp.where(mask, state.scores, jnp.inf).min(), 0.0
          ),
      )
    return logs

  # ------------------------------------------------------------ scoring
  def score_step(
      self, track: LevelTrack, value_outs: Callable[[], Any]
  ) -> LevelTrack:
    """An agent's level track after one meta-step's score of its level
    (inside the compiled meta-step). ``value_outs()`` gives the
    ``types.ValueOuts`` of the agent's value function on its validation
    rollout (computed only if called). The default scores nothing."""
    del value_outs
    return track

  def lifetime_score(self, track: LevelTrack) -> jax.Array:
    """What an ended lifetime's ``track`` tells the sampler
    (``LifetimeEnd.score``): by default the mean of its meta-steps'
    scores (``score_step``)."""
    return track.score_sum / jnp.maximum(track.score_count, 1)

  def buffer_score(self, score: jax.Array, reference: jax.Array) -> jax.Array:
    """The score a buffered level keeps from a lifetime's ``score``
    (``lifetime_score``) and its reference return (GROOVE's; else
    unused): by default ``score``."""
    del reference
    return score


class PLRSampler(LevelSampler):
  """Prioritized Level Replay: a buffer scored by ``config.score_fn`` on
  every meta-step of a lifetime (see the module docstring)."""

  buffered = True

  def score_step(self, track, value_outs):
    score = step_score(self.config.score_fn, value_outs(), track.max_return)
    return track.replace(
        score_sum=track.score_sum + score,
        score_count=track.score_count + 1,
    )


class GrooveSampler(LevelSampler):
  """GROOVE: a buffer scored by algorithmic regret against a reference
  agent trained beside every agent (see the module docstring)."""

  buffered = True
  uses_reference = True

  def lifetime_score(self, track):
    # Without ended episodes (NO_RETURN) the sampler skips the lifetime.
    return track.last_return

  def buffer_score(self, score, reference):
    return regret(reference, score)


# ------------------------------------------------- an agent's lifetime ----


@chex.dataclass(frozen=True)
class ReferenceState:
  """GROOVE's reference agent, trained beside a meta-training agent on the
  same level: its learner and actor and the mean return of the episodes
  that ended in its last meta-step (``NO_RETURN`` before any)."""

  learner: Any
  actor: Any
  last_return: jax.Array


@chex.dataclass(frozen=True)
class LevelTrack:
  """What an agent's lifetime tracks about its level.

  Attributes:
    level: the lifetime's level.
    slot: int32 ``[]`` its buffer slot (-1: fresh).
    replay: bool ``[]`` whether it was replayed.
    score_sum, score_count: float32 ``[]`` PLR's per-meta-step scores.
    max_return: float32 ``[]`` best episode return so far (``NO_RETURN``:
      none yet).
    last_return: float32 ``[]`` mean return of the episodes that ended in
      the last meta-step with any (``NO_RETURN``: none yet).
    reference: GROOVE's ``ReferenceState`` (else None).
  """

  level: Any
  slot: jax.Array
  replay: jax.Array
  score_sum: jax.Array
  score_count: jax.Array
  max_return: jax.Array
  last_return: jax.Array
  reference: Any = None


def new_track(draw: Draw, reference: ReferenceState | None = None):
  """A lifetime's fresh ``LevelTrack`` on ``draw``'s level."""
  return LevelTrack(
      level=draw.level,
      slot=jnp.asarray(draw.slot, jnp.int32),
      replay=jnp.asarray(draw.replay, bool),
      score_sum=jnp.zeros([], jnp.float32),
      score_count=jnp.zeros([], jnp.float32),
      max_return=jnp.full([], NO_RETURN, jnp.float32),
      last_return=jnp.full([], NO_RETURN, jnp.float32),
      reference=reference,
  )


def best_episode_return(actor: Any, rollout: Any) -> jax.Array:
  """The best return of the episodes ending in a ``[T, B]`` rollout that
  continues ``actor``'s running episodes (``NO_RETURN``: none ended):
  ``[]``."""

  def step(ret, x):
    reward, done = x
    ret = ret + reward
    return jnp.where(done, 0.0, ret), jnp.where(done, ret, NO_RETURN)

  _, ended = jax.lax.scan(
      step, actor.episode_return, (rollout.rewards, rollout.is_last)
  )
  return ended.max()


def step_score(
    score_fn: str, value_outs: Any, max_return: jax.Array
) -> jax.Array:
  """One meta-step's PLR score from value estimates on a rollout.

  Args:
    score_fn: ``pvl`` (mean of the positive advantages, ``[T, B]``) or
      ``max_mc`` (mean of ``max_return - V(s_t)``; with no episode ended yet
      the value itself stands for ``max_return``, scoring 0).
    value_outs: ``types.ValueOuts`` of the rollout.
    max_return: the lifetime's best episode return so far.
  """
  if score_fn == "pvl":
    return jnp.maximum(value_outs.adv, 0.0).mean()
  values = value_outs.value[:-1]
  best = jnp.where(max_return > NO_RETURN, max_return, values)
  return (best - values).mean()
