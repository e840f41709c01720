"""The LPG meta-network (Oh et al. 2020, arXiv 2007.08794; sizes as
GROOVE's ``models/lpg.py``).

A GRU runs backwards in time over each transition's features
(``lpg_features``), reset at episode ends; a ReLU of its outputs feeds two
linear heads: ``pi_hat [T, B]`` and softmax ``y_hat [T, B, P]``.
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
    prediction_size: ``P``, the size of ``y`` and ``y_hat`` (GROOVE: 8; the
      paper: 30).
    embedding_sizes: the embedding MLP of ``y`` (GROOVE and the paper:
      ``(16, 1)``).
    hidden_size: GRU units.
    lifetime_conditioning: TA-LPG's lifetime inputs.
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
  """The GRU's inputs ``[T, B, F]`` (inside ``hk.transform``): ``r_t``, the
  termination flag, ``pi(a_t|s_t)``, embeddings of ``y_t`` and ``y_tp1``
  (zeroed at episode ends), and TA-LPG's lifetime inputs (Jackson et al.
  2024) with ``lifetime_conditioning``.

  Args:
    config: network sizes.
    rewards: ``[T, B]``.
    terminal: ``[T, B]`` termination flags.
    episode_ends: ``[T, B]`` bool, terminated or truncated transitions.
    pi_a: ``[T, B]`` probability of the taken action.
    y_t: ``[T, B, P]`` prediction probabilities at ``s_t``.
    y_tp1: ``[T, B, P]`` at ``s_{t+1}``.
    lifetime: ``[2]``: progress ``n / N`` and ``log N`` (agent updates).

  Raises:
    ValueError: if ``lifetime`` is missing with ``lifetime_conditioning``.
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
  """A GRU run backwards in time, restarting at every episode end.

  The maths and parameters of ``hk.GRU`` (``w_i [I, 3H]``, ``w_h [H, 3H]``,
  ``b [3H]``): equal to ``hk.dynamic_unroll(hk.ResetCore(hk.GRU(H)), (x,
  ends), zeros, reverse=True)``.
  """

  def __init__(self, hidden_size: int, name: str = "gru"):
    super().__init__(name=name)
    self.hidden_size = hidden_size

  def __call__(self, x: jax.Array, ends: jax.Array) -> jax.Array:
    """``x [T, B, I]``, ``ends [T, B]`` -> states ``[T, B, H]``; the state from
    step ``t+1`` is zeroed before step ``t`` reads it where ``ends[t]``."""
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
    """Arguments as ``lpg_features``; returns ``{pi_hat, y_hat, y_hat_logits,
    core}`` (``core``: the GRU outputs ``[T, B, H]``)."""
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
