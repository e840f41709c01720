"""Level samplers: which level an agent starting a new lifetime trains on
(``SamplerConfig.kind``; ``none``: no sampler).

  * ``uniform`` (``LevelSampler``): a fresh level every lifetime.
  * ``plr`` (``PLRSampler``): Prioritized Level Replay (Jiang et al., ICML 2021;
    robust PLR's buffer, NeurIPS 2021). Once the buffer is ``min_fill`` full, a
    lifetime replays a level with probability ``replay_prob``, drawing ``i``
    with ``P_i = (1 - staleness_coef) * S_i + staleness_coef * C_i``: ``S`` the
    scores transformed (``rank``: ``(1 / rank_i) ** (1 / temperature)``;
    ``power``: ``max(score_i, 0) ** (1 / temperature)``), ``C`` the staleness
    ``clock - last_used_i``, each normalised. An ended lifetime's score
    (``pvl``: mean ``max(A_t, 0)``; ``max_mc``: mean ``R_max - V(s_t)``)
    replaces its slot's; a fresh level takes an empty slot, or the lowest-scored
    one if it scores higher.
  * ``groove`` (``GrooveSampler``): PLR's buffer scored by GROOVE's regret
    (Jackson et al., NeurIPS 2023): the return of a reference rule
    (``actor_critic`` or ``ppo``) trained beside each agent on its level, minus
    the meta-learned rule's (cached when the level enters the buffer).

Returns are the mean undiscounted return of the episodes ending in a lifetime's
last meta-step; ``R_max`` is the lifetime's best undiscounted return (PLR's is
discounted). Drawing never writes the state; every device applies the same
``update``, so it stays replicated.
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
  """Settings of a level sampler (ValueError on invalid values).

  Attributes:
    kind: a registered sampler's name, or ``none``.
    buffer_size: levels a buffered sampler keeps.
    replay_prob: probability of replaying a buffered level.
    score_fn: PLR's score (``SCORE_FNS``).
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
  """A sampler's replicated state (``N``: ``buffer_size``, 1 for uniform): the
  buffered ``levels`` (leaves ``[N, ...]``), float32 ``scores`` ``[N]``, int32
  ``last_used`` ``[N]`` (clock), bool ``filled`` ``[N]``, float32 ``reference``
  ``[N]`` (GROOVE's cached returns), and int32 counts ``clock`` (lifetimes
  ended), ``draws`` (lifetimes started on a drawn level) and ``replays`` (of
  them replayed)."""

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
    score: the lifetime's PLR score (GROOVE: the meta-rule's return).
    reference: GROOVE's reference return (else unused).
    ended: bool, which entries are ended lifetimes (the rest are ignored).

  A score or reference of ``NO_RETURN`` or NaN (no episode ended, or a diverged
  agent) leaves the buffer unchanged.
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
  """A level sampler over ``env``'s levels (pure methods over ``SamplerState``),
  by itself the uniform one. Subclasses set ``buffered`` (PLR's scored buffer)
  and ``uses_reference`` (GROOVE's reference agent), and may override
  ``score_step``, ``lifetime_score``, ``buffer_score`` and ``draw``.

  Raises:
    base.LevelsUnsupportedError: ``env`` has no levels.
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
      ends: this meta-step's ended lifetimes (leaves ``[M, ...]``). A replayed
        level whose slot was meanwhile given to another level counts as fresh.
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
    """An agent's level track after one meta-step's score of its level (inside
    the compiled step); ``value_outs()`` gives its value function's
    ``types.ValueOuts`` on the validation rollout (computed only if called).
    Default: no score."""
    del value_outs
    return track

  def lifetime_score(self, track: LevelTrack) -> jax.Array:
    """``LifetimeEnd.score`` of an ended lifetime's ``track``: by default the
    mean of its ``score_step`` scores."""
    return track.score_sum / jnp.maximum(track.score_count, 1)

  def buffer_score(self, score: jax.Array, reference: jax.Array) -> jax.Array:
    """The score a buffered level keeps from ``lifetime_score`` and the
    reference return (GROOVE's): by default ``score``."""
    del reference
    return score


class PLRSampler(LevelSampler):
  """Prioritized Level Replay: a buffer scored by ``config.score_fn`` every
  meta-step."""

  buffered = True

  def score_step(self, track, value_outs):
    score = step_score(self.config.score_fn, value_outs(), track.max_return)
    return track.replace(
        score_sum=track.score_sum + score,
        score_count=track.score_count + 1,
    )


class GrooveSampler(LevelSampler):
  """GROOVE: a buffer scored by algorithmic regret against a reference agent."""

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
  """GROOVE's reference agent on a meta-training agent's level: learner, actor
  and the mean return of the episodes that ended in its last meta-step
  (``NO_RETURN`` before any)."""

  learner: Any
  actor: Any
  last_return: jax.Array


@chex.dataclass(frozen=True)
class LevelTrack:
  """What an agent's lifetime tracks about its level: ``level``, its int32
  ``slot`` (-1: fresh), bool ``replay``, PLR's ``score_sum`` and
  ``score_count``, the best episode return ``max_return`` and the mean return
  ``last_return`` of the last meta-step that ended episodes (``NO_RETURN``: none
  yet), and GROOVE's ``reference`` (``ReferenceState``, else None)."""

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
  """``[]`` best return of the episodes ending in a ``[T, B]`` rollout that
  continues ``actor``'s episodes (``NO_RETURN``: none ended)."""

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
    score_fn: ``pvl`` (mean positive advantage) or ``max_mc`` (mean of
      ``max_return - V(s_t)``; 0 before any episode ends).
    value_outs: ``types.ValueOuts`` of the rollout.
    max_return: the lifetime's best episode return so far.
  """
  if score_fn == "pvl":
    return jnp.maximum(value_outs.adv, 0.0).mean()
  values = value_outs.value[:-1]
  best = jnp.where(max_return > NO_RETURN, max_return, values)
  return (best - values).mean()
