"""Jittable, batched delayed chain MDP of LPG (Oh et al. 2020,
arXiv:2007.08794, Appendix A.3; ``VARIANTS`` after its table).

Two actions. An episode starts in one of two start states, drawn
uniformly; start state ``k`` rewards first action ``k`` (our reading). The
first action picks the rewarding chain or the other; later actions are
ignored. After ``N`` steps the episode terminates (LAST, discount 0) with
+1 on the rewarding chain, else -1; other steps give 0, or a fresh fair
+1/-1 in the noisy variants. ``N`` is drawn once per lifetime (one
``reset``, shared by the ``B`` streams) unless ``chain_length`` fixes it.

Observations (float32): a one-hot over ``2 + 2 * (max_length - 1)`` states
(start states, then the rewarding and the other chain's depths);
``state_distraction``: the start state, whether on the rewarding chain,
and 20 fresh fair coins. Levels (``ChainLevel``) fix length, noise and
distractor bits; the ``random`` variant (not in A.3) draws all three and
shows the one-hot then 20 bits, its first ``distractors`` random.

Caveat: the first action is taken at the observation of a LAST timestep;
``loss_mask="published"`` (``disco.agent.Agent``) drops those transitions,
so no rule learns this environment with it.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import numbers
from typing import Any

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from disco import types
from disco.environments import base

NUM_ACTIONS = 2


@dataclasses.dataclass(frozen=True)
class ChainVariant:
  """A delayed chain MDP of the A.3 table.

  Attributes:
    name: the variant's name in the A.3 table.
    min_length, max_length: range of the chain length ``N`` (inclusive).
    noisy_rewards: non-final steps give a random +1 or -1.
    distractor_bits: random observation bits (0: tabular observation).
  """

  name: str
  min_length: int
  max_length: int
  noisy_rewards: bool = False
  distractor_bits: int = 0


VARIANTS: dict[str, ChainVariant] = {
    # A.3: chain length in [5, 30].
    "short": ChainVariant("Short", 5, 30),
    # A.3: chain length in [5, 30], noisy rewards.
    "short_noisy": ChainVariant("Short and Noisy", 5, 30, noisy_rewards=True),
    # A.3: chain length in [5, 50].
    "long": ChainVariant("Long", 5, 50),
    # A.3: chain length in [5, 50], noisy rewards.
    "long_noisy": ChainVariant("Long and Noisy", 5, 50, noisy_rewards=True),
    # A.3: chain length in [5, 30], 2 relevant + 20 distractor bits.
    "state_distraction": ChainVariant(
        "State Distraction", 5, 30, distractor_bits=20
    ),
    # Not in A.3: every level draws its length in [5, 50], its noise and
    # 0..20 distractor bits (levels for curricula).
    "random": ChainVariant("Random", 5, 50, distractor_bits=20),
}
RANDOM = "random"


def check_settings(batch_size: Any, variant: Any, chain_length: Any) -> None:
  """Raises ``ValueError`` naming the first invalid delayed-chain setting."""
  if (
      not isinstance(batch_size, numbers.Integral)
      or isinstance(batch_size, bool)
      or batch_size < 1
  ):
    raise ValueError(
        f"Delayed chain setting batch_size={batch_size!r} must "
        "be an integer >= 1."
    )
  if variant not in VARIANTS:
    raise ValueError(
        f"Delayed chain setting variant={variant!r} is invalid; "
        f"valid values: {', '.join(VARIANTS)}."
    )
  top = VARIANTS[variant].max_length
  if chain_length is not None and (
      not isinstance(chain_length, numbers.Integral)
      or isinstance(chain_length, bool)
      or not 1 <= chain_length <= top
  ):
    raise ValueError(
        f"Delayed chain setting chain_length={chain_length!r} must be None "
        f"(drawn per lifetime) or an integer in [1, {top}] for variant "
        f"{variant!r}."
    )


@chex.dataclass(frozen=True)
class ChainLevel:
  """A delayed-chain level: int32 ``length``, bool ``noisy``, int32
  ``distractors`` (random bits shown; the ``random`` variant only)."""

  length: types.Array
  noisy: types.Array
  distractors: types.Array


@chex.dataclass(frozen=True)
class ChainState:
  """State of ``B`` delayed-chain streams (every field ``[B]``).

  Attributes:
    start: int32 start state (= the rewarded first action).
    depth: int32 steps taken in the episode.
    rewarding: bool, the first action was the rewarded one (False before).
    length: int32 chain length ``N`` of the lifetime.
    rng: one PRNG key per stream.
    noisy: bool, the lifetime's rewards are noisy.
    distractors: int32 distractor bits shown (``random`` variant).
  """

  start: types.Array
  depth: types.Array
  rewarding: types.Array
  length: types.Array
  rng: types.Array
  noisy: types.Array
  distractors: types.Array


def _observe(start, depth, rewarding, rng, variant, distractors=None):
  if variant.name == VARIANTS[RANDOM].name:
    tabular = _observe(start, depth, rewarding, rng, _TABULAR_RANDOM)
    noise = jax.random.bernoulli(rng, 0.5, (variant.distractor_bits,))
    noise &= jnp.arange(variant.distractor_bits) < distractors
    return jnp.concatenate([tabular, noise.astype(jnp.float32)])
  if variant.distractor_bits:
    noise = jax.random.bernoulli(rng, 0.5, (variant.distractor_bits,))
    relevant = jnp.stack([start == 1, rewarding & (depth > 0)])
    return jnp.concatenate([relevant, noise]).astype(jnp.float32)
  chain_states = variant.max_length - 1
  index = jnp.where(
      depth == 0, start, 2 + jnp.where(rewarding, 0, chain_states) + depth - 1
  )
  return jax.nn.one_hot(index, 2 + 2 * chain_states, dtype=jnp.float32)


def _reset_stream(rng, level, variant):
  length = level.length
  next_rng, start_rng, obs_rng = jax.random.split(rng, 3)
  start = jax.random.randint(start_rng, (), 0, NUM_ACTIONS, jnp.int32)
  depth = jnp.zeros((), jnp.int32)
  rewarding = jnp.zeros((), bool)
  state = ChainState(
      start=start,
      depth=depth,
      rewarding=rewarding,
      length=length,
      rng=next_rng,
      noisy=level.noisy,
      distractors=level.distractors,
  )
  timestep = types.EnvTimestep(
      observation=_observe(
          start, depth, rewarding, obs_rng, variant, level.distractors
      ),
      reward=jnp.zeros((), jnp.float32),
      step_type=jnp.asarray(types.FIRST, jnp.int32),
      discount=jnp.ones((), jnp.float32),
  )
  return state, timestep


def _step_stream(state, action, variant):
  next_rng, noise_rng, start_rng, obs_rng = jax.random.split(state.rng, 4)
  rewarding = jnp.where(
      state.depth == 0, action == state.start, state.rewarding
  )
  depth = state.depth + 1
  done = depth >= state.length
  final = jnp.where(rewarding, 1.0, -1.0)
  noise = jnp.where(
      state.noisy,
      jnp.where(jax.random.bernoulli(noise_rng), 1.0, -1.0),
      0.0,
  )
  reward = jnp.where(done, final, noise).astype(jnp.float32)
  # A finished episode restarts at once; the timestep keeps its reward and
  # LAST but shows the next episode's start state.
  start = jnp.where(
      done,
      jax.random.randint(start_rng, (), 0, NUM_ACTIONS, jnp.int32),
      state.start,
  )
  depth = jnp.where(done, 0, depth)
  rewarding = rewarding & ~done
  new_state = state.replace(
      start=start, depth=depth, rewarding=rewarding, rng=next_rng
  )
  timestep = types.EnvTimestep(
      observation=_observe(
          start, depth, rewarding, obs_rng, variant, state.distractors
      ),
      reward=reward,
      step_type=jnp.where(done, types.LAST, types.MID).astype(jnp.int32),
      discount=jnp.where(done, 0.0, 1.0).astype(jnp.float32),
  )
  return new_state, timestep


class DelayedChain(base.Environment):
  """``batch_size`` streams of the LPG delayed chain MDP (Appendix A.3).

  Observations are ``[B, 2 + 2 * (max_length - 1)]`` one-hots, ``[B, 22]``
  bits (``state_distraction``) or ``[B, 2 * max_length + 20]`` (``random``),
  float32. Actions are int32 in {0, 1}.
  """

  is_jittable = True
  has_levels = True

  def __init__(
      self,
      batch_size: int,
      variant: str = "short",
      chain_length: int | None = None,
  ):
    """Builds the environment.

    Args:
      batch_size: number of streams ``B``.
      variant: a key of ``VARIANTS``.
      chain_length: None draws ``N`` at each ``reset``; an integer in ``[1,
        max_length]`` fixes it.

    Raises:
      ValueError: naming the first invalid setting and its valid values.
    """
    check_settings(batch_size, variant, chain_length)
    self.batch_size = int(batch_size)
    self.variant_name = variant
    self.variant = VARIANTS[variant]
    self.chain_length = None if chain_length is None else int(chain_length)
    self._reset = jax.jit(self._reset_fn)
    self._sample = jax.jit(self._sample_level)
    self._step = jax.jit(
        jax.vmap(functools.partial(_step_stream, variant=self.variant))
    )

  def _sample_level(self, rng):
    # The length is drawn from ``rng`` itself.
    length_rng = rng
    noise_rng, bits_rng = (jax.random.fold_in(rng, i) for i in (1, 2))
    v = self.variant
    if self.chain_length is None:
      length = jax.random.randint(
          length_rng, (), v.min_length, v.max_length + 1, jnp.int32
      )
    else:
      length = jnp.asarray(self.chain_length, jnp.int32)
    if self.variant_name == RANDOM:
      noisy = jax.random.bernoulli(noise_rng)
      bits = jax.random.randint(
          bits_rng, (), 0, v.distractor_bits + 1, jnp.int32
      )
    else:
      noisy = jnp.asarray(v.noisy_rewards)
      bits = jnp.asarray(v.distractor_bits, jnp.int32)
    return ChainLevel(length=length, noisy=noisy, distractors=bits)

  def _reset_fn(self, rng, level=None):
    length_rng, stream_rng = jax.random.split(rng)
    if level is None:
      level = self._sample_level(length_rng)
    return jax.vmap(
        functools.partial(_reset_stream, variant=self.variant),
        in_axes=(0, None),
    )(jax.random.split(stream_rng, self.batch_size), level)

  def sample_level(self, rng: types.Array) -> ChainLevel:
    """A random level of the variant."""
    return self._sample(rng)

  def level_features(self, level: ChainLevel) -> dict[str, types.Array]:
    return dict(
        length=level.length.astype(jnp.float32),
        noisy=level.noisy.astype(jnp.float32),
        distractors=level.distractors.astype(jnp.float32),
    )

  def reset(
      self, rng: types.Array, level: ChainLevel | None = None
  ) -> tuple[ChainState, types.EnvTimestep]:
    """Starts a lifetime: ``B`` first episodes from one key (on ``level``;
    None: one drawn from the key)."""
    return self._reset(rng, level)

  def step(
      self, state: ChainState, actions: types.Array
  ) -> tuple[ChainState, types.EnvTimestep]:
    """Applies ``actions`` ``[B]`` (ints in {0, 1})."""
    actions = jnp.asarray(actions, jnp.int32)
    chex.assert_shape(actions, (self.batch_size,))
    return self._step(state, actions)

  def observation_spec(self) -> specs.Array:
    if self.variant_name == RANDOM:
      return specs.Array(
          (2 * self.variant.max_length + self.variant.distractor_bits,),
          np.float32,
          name="state_one_hot_and_bits",
      )
    if self.variant.distractor_bits:
      return specs.Array(
          (2 + self.variant.distractor_bits,), np.float32, name="bits"
      )
    return specs.Array(
        (2 * self.variant.max_length,), np.float32, name="state_one_hot"
    )

  def action_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray((), np.int32, 0, NUM_ACTIONS - 1, name="action")


_TABULAR_RANDOM = dataclasses.replace(
    VARIANTS[RANDOM], name="Random (tabular part)", distractor_bits=0
)

CHAIN_SETTINGS: dict[str, Any] = dict(variant="short", chain_length=None)

# Registry entry: "delayed_chain" -> (factory, settings with defaults).
ENV_SPECS: dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]] = {
    "delayed_chain": (DelayedChain, dict(CHAIN_SETTINGS)),
}
