"""The LPG meta-network (Oh et al. 2020, "Discovering Reinforcement Learning
Algorithms", arXiv 2007.08794; sizes as GROOVE's ``models/lpg.py``).

Per transition ``t`` of a ``[T, B]`` rollout it reads

  * ``phi(y(s_t))`` and ``phi(y(s_{t+1}))``: a shared embedding MLP
    (``embedding_sizes``, last size 1 by default) of the agent's categorical
    prediction vectors (probabilities ``[T, B, P]``); the next state's
    embedding is zero where the transition ended its episode;
  * the reward ``r_t``, the termination flag ``d_t`` and the probability
    ``pi(a_t|s_t)`` of the taken action;
  * optionally (TA-LPG, Jackson et al. 2024) the agent's relative progress
    through its lifetime ``n / N`` and ``log N`` (``N`` in agent updates);

and runs a GRU backwards in time over them, reset where a transition ended its
episode (no information flows from an episode into the one before it). A ReLU
of the GRU outputs feeds two linear heads: a scalar ``pi_hat [T, B]`` and a
softmax ``y_hat [T, B, P]``.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses

import haiku as hk
import jax
import jax.numpy as jnp

# The inputs besides the two embeddings: reward, termination, pi(a|s).
NUM_SCALAR_INPUTS = 3
NUM_LIFETIME_INPUTS = 2


@dataclasses.dataclass(frozen=True)
class LPGNetConfig:
  """Sizes of the LPG meta-network.

  Attributes:
    prediction_size: ``P``, the size of the agent's categorical prediction
      ``y`` and of ``y_hat``: 8 as GROOVE (``lpg_target_width``); the paper
      uses 30.
    embedding_sizes: the shared embedding MLP of ``y`` (ReLU between
      layers): ``(16, 1)`` as GROOVE and the paper.
    hidden_size: GRU units (256 as GROOVE; the paper's LSTM has 256 too).
    lifetime_conditioning: TA-LPG: also read the relative lifetime progress
      and the log lifetime length.
  """

  prediction_size: int = 8
  embedding_sizes: Sequence[int] = (16, 1)
  hidden_size: int = 256
  lifetime_conditioning: bool = False

  def __post_init__(self):
    if self.prediction_size < 2:
      raise ValueError(
          f"prediction_size must be >= 2 (a categorical vector), got "
          f"{self.prediction_size}."
      )
    if self.hidden_size < 1 or not self.embedding_sizes:
      raise ValueError(
          "hidden_size must be >= 1 and embedding_sizes non-empty, got "
          f"{self.hidden_size} and {tuple(self.embedding_sizes)}."
      )

  @property
  def num_features(self) -> int:
    """Width of the GRU's input."""
    extra = NUM_LIFETIME_INPUTS if self.lifetime_conditioning else 0
    return 2 * self.embedding_sizes[-1] + NUM_SCALAR_INPUTS + extra


def lpg_features(
    config: LPGNetConfig,
    rewards: jax.Array,
    terminal: jax.Array,
    episode_ends: jax.Array,
    pi_a: jax.Array,
    y_t: jax.Array,
    y_tp1: jax.Array,
    lifetime: jax.Array | None = None,
) -> jax.Array:
  """The GRU's inputs ``[T, B, F]`` (inside ``hk.transform``).

  Args:
    config: network sizes.
    rewards: ``[T, B]``.
    terminal: ``[T, B]`` termination flags (bool or float).
    episode_ends: ``[T, B]`` bool, transitions that ended their episode
      (terminated or truncated): ``y_tp1``'s embedding is zero there.
    pi_a: ``[T, B]`` probability of the taken action.
    y_t: ``[T, B, P]`` prediction probabilities at ``s_t``.
    y_tp1: ``[T, B, P]`` at ``s_{t+1}``.
    lifetime: ``[2]`` (progress ``n / N``, ``log N``), with
      ``lifetime_conditioning`` only.
  """
  embed = hk.nets.MLP(tuple(config.embedding_sizes), name="embedding")
  e_t = embed(y_t)
  e_tp1 = embed(y_tp1) * (1.0 - episode_ends.astype(y_t.dtype))[..., None]
  scalars = jnp.stack(
      [rewards, terminal.astype(rewards.dtype), pi_a], axis=-1
  ).astype(y_t.dtype)
  parts = [scalars, e_t, e_tp1]
  if config.lifetime_conditioning:
    if lifetime is None:
      raise ValueError(
          "The LPG meta-network conditions on the lifetime: give its "
          "[progress, log length]."
      )
    parts.append(
        jnp.broadcast_to(jnp.asarray(lifetime, y_t.dtype), rewards.shape + (2,))
    )
  return jnp.concatenate(parts, axis=-1)


class BackwardGRU(hk.Module):
  """A GRU run backwards in time that starts afresh at every episode end.

  Haiku's ``hk.GRU`` maths and parameters (``w_i [I, 3H]``, ``w_h [H, 3H]``,
  ``b [3H]``, created in that order), as ``hk.dynamic_unroll(
  hk.ResetCore(hk.GRU(H)), (x, ends), zeros, reverse=True)`` computes them,
  with the loop-invariant work taken out of the time loop: the inputs of all
  steps are projected in one matmul, and the recurrent weights are split
  once (XLA left the split in the loop: 6% of an LPG ES generation in a CPU
  profile, BENCHMARKS.md "ES generation against GROOVE's ES").
  """

  def __init__(self, hidden_size: int, name: str = "gru"):
    super().__init__(name=name)
    self.hidden_size = hidden_size

  def __call__(self, x: jax.Array, ends: jax.Array) -> jax.Array:
    """``x [T, B, I]``, ``ends [T, B]`` (transition t ended its episode:
    the state from step t+1 is zeroed before step t reads it) -> the states
    ``[T, B, H]``."""
    hidden = self.hidden_size
    w_i = hk.get_parameter(
        "w_i",
        [x.shape[-1], 3 * hidden],
        x.dtype,
        init=hk.initializers.VarianceScaling(),
    )
    w_h = hk.get_parameter(
        "w_h",
        [hidden, 3 * hidden],
        x.dtype,
        init=hk.initializers.VarianceScaling(),
    )
    b = hk.get_parameter("b", [3 * hidden], x.dtype, init=jnp.zeros)
    w_h_zr, w_h_a = w_h[:, : 2 * hidden], w_h[:, 2 * hidden :]
    gates_x = jnp.matmul(x, w_i) + b  # [T, B, 3H]
    zr_x, a_x = gates_x[..., : 2 * hidden], gates_x[..., 2 * hidden :]

    def step(state, inputs):
      zr_x, a_x, end = inputs
      state = jnp.where(end[:, None], jnp.zeros_like(state), state)
      z, r = jnp.split(jax.nn.sigmoid(zr_x + state @ w_h_zr), 2, axis=-1)
      a = jnp.tanh(a_x + (r * state) @ w_h_a)
      state = (1 - z) * state + z * a
      return state, state

    initial = jnp.zeros((x.shape[1], hidden), x.dtype)
    _, states = jax.lax.scan(step, initial, (zr_x, a_x, ends), reverse=True)
    return states


class LPGMetaNet(hk.Module):
  """Rollout features -> ``pi_hat [T, B]``, ``y_hat [T, B, P]``."""

  def __init__(self, config: LPGNetConfig):
    super().__init__(name="lpg")
    self._config = config

  def __call__(
      self,
      rewards: jax.Array,
      terminal: jax.Array,
      episode_ends: jax.Array,
      pi_a: jax.Array,
      y_t: jax.Array,
      y_tp1: jax.Array,
      lifetime: jax.Array | None = None,
  ) -> dict[str, jax.Array]:
    """Arguments as ``lpg_features``; returns ``{pi_hat, y_hat,
    y_hat_logits, core}`` (``y_hat = softmax(y_hat_logits)``; ``core``: the
    GRU outputs ``[T, B, H]``)."""
    c = self._config
    x = lpg_features(
        c, rewards, terminal, episode_ends, pi_a, y_t, y_tp1, lifetime
    )
    h = BackwardGRU(c.hidden_size)(x, episode_ends)
    z = jax.nn.relu(h)
    pi_hat = hk.Linear(1, name="pi_hat")(z)[..., 0]
    y_hat_logits = hk.Linear(c.prediction_size, name="y_hat")(z)
    return dict(
        pi_hat=pi_hat,
        y_hat=jax.nn.softmax(y_hat_logits),
        y_hat_logits=y_hat_logits,
        core=h,
    )


def make_lpg_net(config: LPGNetConfig) -> hk.Transformed:
  """``init(rng, *args)`` / ``apply(params, None, *args)`` with the
  arguments of ``LPGMetaNet.__call__``."""

  def forward(*args):
    return LPGMetaNet(config)(*args)

  return hk.transform(forward)
