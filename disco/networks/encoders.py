"""Observation encoders of the agent network (inside a haiku transform): ids of
MiniGrid/XLand tiles embedded and convolved (``minigrid_encoder``), the
Nature-DQN convolutions for images (``nature_encoder``, through
``PatchConv2D``), and state indices read as a one-hot layer by a row gather
(``IndexLinear``, ``IndexMLP``)."""

from __future__ import annotations

from collections.abc import Sequence

from dm_env import specs
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from disco import types

# Id ranges of MiniGrid/XLand observations [H, W, 2] (tile id, colour id):
# xminigrid.core.constants.NUM_TILES and NUM_COLORS of xminigrid 0.9.
MINIGRID_NUM_TILES = 13
MINIGRID_NUM_COLORS = 12
# The convolutional encoder after the id embedding (xland-minigrid's PPO
# baseline): 2x2 kernels, VALID padding, ReLU after each.
MINIGRID_CONV_CHANNELS = (16, 32, 64)
# The DQN Nature-paper encoder (Mnih et al. 2015): (channels, kernel, stride)
# per VALID convolution, ReLU after each.
NATURE_CNN_LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
# The smallest image side the Nature encoder takes.
NATURE_CNN_MIN_SIDE = 36


def index_observation_size(spec: specs.Array) -> int | None:
  """``N`` for a state-index spec (an integer ``BoundedArray`` of shape
  ``[]`` or ``[1]`` bounded in ``[0, N - 1]``), else None."""
  if not isinstance(spec, specs.BoundedArray):
    return None
  if not np.issubdtype(spec.dtype, np.integer):
    return None
  if tuple(spec.shape) not in ((), (1,)):
    return None
  low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
  if low.size != 1 or high.size != 1 or int(low.reshape(())) != 0:
    return None
  return int(high.reshape(())) + 1


class IndexLinear(hk.Module):
  """``hk.Linear(out)(jax.nn.one_hot(i, n))`` computed as a row gather.

  Same parameters as the ``hk.Linear``: ``w`` ``[n, out]`` (default init:
  truncated normal, stddev ``1 / sqrt(n)``) and ``b`` ``[out]``. An index
  outside ``[0, n)`` reads a zero row.
  """

  def __init__(
      self,
      num_states: int,
      output_size: int,
      w_init: hk.initializers.Initializer | None = None,
      name: str | None = None,
  ):
    super().__init__(name=name)
    self.num_states = int(num_states)
    self.output_size = int(output_size)
    self.w_init = w_init

  def __call__(self, index: jax.Array) -> jax.Array:
    """``[B]`` int indices -> ``[B, output_size]``."""
    w_init = self.w_init
    if w_init is None:
      w_init = hk.initializers.TruncatedNormal(1.0 / np.sqrt(self.num_states))
    w = hk.get_parameter(
        "w", [self.num_states, self.output_size], jnp.float32, init=w_init
    )
    b = hk.get_parameter("b", [self.output_size], jnp.float32, init=jnp.zeros)
    # Negative indices would wrap around: send them out of range, where the
    # gather fills a zero row.
    index = jnp.where(index < 0, self.num_states, index)
    return jnp.take(w, index, axis=0, mode="fill", fill_value=0) + b


class IndexMLP(hk.Module):
  """``hk.nets.MLP(output_sizes, ...)`` on ``one_hot(index, num_states)``, with
  the same names and parameters; its first layer is an ``IndexLinear``."""

  def __init__(
      self,
      num_states: int,
      output_sizes: Sequence[int],
      w_init: hk.initializers.Initializer | None = None,
      activation=jax.nn.relu,
      activate_final: bool = False,
      name: str | None = None,
  ):
    super().__init__(name=name)
    if not output_sizes:
      raise ValueError("IndexMLP needs at least one layer.")
    self.activation = activation
    self.activate_final = activate_final
    self.layers = (
        IndexLinear(num_states, output_sizes[0], w_init, name="linear_0"),
        *(
            hk.Linear(size, w_init=w_init, name=f"linear_{i}")
            for i, size in enumerate(output_sizes[1:], start=1)
        ),
    )

  def __call__(self, index: jax.Array) -> jax.Array:
    """``[B]`` int indices -> ``[B, output_sizes[-1]]``."""
    out = index
    for i, layer in enumerate(self.layers):
      out = layer(out)
      if i < len(self.layers) - 1 or self.activate_final:
        out = self.activation(out)
    return out


def state_indices(observations: types.ArrayTree, num_states: int) -> jax.Array:
  """``[B]`` indices from ``[B]`` or ``[B, 1]`` integer observations.

  Raises:
    ValueError: for observations that are not one integer per example.
  """
  leaves = jax.tree.leaves(observations)
  index = leaves[0] if len(leaves) == 1 else None
  if (
      index is None
      or not jnp.issubdtype(index.dtype, jnp.integer)
      or not (index.ndim == 1 or (index.ndim == 2 and index.shape[1] == 1))
  ):
    got = [(str(x.dtype), list(x.shape)) for x in leaves]
    raise ValueError(
        "network.obs_embedding='one_hot' with num_states="
        f"{num_states} takes integer state indices [B] or [B, 1]; got "
        f"{got}."
    )
  return index.reshape(index.shape[:1])


def minigrid_encoder(ids: jax.Array, dim: int, prefix: str = "") -> jax.Array:
  """Features of MiniGrid/XLand observations (inside a haiku transform).

  Args:
    ids: ``[B, H, W, 2]`` tile and colour ids (rounded and clipped).
    dim: features per id embedding.
    prefix: of the module names.

  Returns:
    ``[B, H - 3, W - 3, 64]``: the ``[B, H, W, 2 * dim]`` embeddings through
    ``MINIGRID_CONV_CHANNELS`` 2x2 VALID convolutions with ReLUs.
  """
  ids = jnp.round(ids.astype(jnp.float32)).astype(jnp.int32)
  tiles = jnp.clip(ids[..., 0], 0, MINIGRID_NUM_TILES - 1)
  colours = jnp.clip(ids[..., 1], 0, MINIGRID_NUM_COLORS - 1)
  x = jnp.concatenate(
      [
          hk.Embed(MINIGRID_NUM_TILES, dim, name=f"{prefix}tile_embed")(tiles),
          hk.Embed(MINIGRID_NUM_COLORS, dim, name=f"{prefix}colour_embed")(
              colours
          ),
      ],
      axis=-1,
  )
  w_init = hk.initializers.Orthogonal(np.sqrt(2.0))
  for i, channels in enumerate(MINIGRID_CONV_CHANNELS):
    x = jax.nn.relu(
        hk.Conv2D(
            channels,
            kernel_shape=2,
            padding="VALID",
            w_init=w_init,
            name=f"{prefix}minigrid_conv_{i}",
        )(x)
    )
  return x


class PatchConv2D(hk.Module):
  """A VALID 2-D convolution (``[B, H, W, C] -> [B, H', W', channels]``) with
  ``hk.Conv2D``'s parameters (``w`` ``[k, k, C, channels]``, ``b``) and
  initialisation, computed as image patches times a matrix: the same
  function, whose weight gradient stays a matrix product inside loops (where
  XLA's CPU backend computes a convolution's weight gradient slowly)."""

  def __init__(self, channels: int, kernel: int, stride: int, name=None):
    super().__init__(name=name)
    self._channels, self._kernel, self._stride = channels, kernel, stride

  def __call__(self, x: jax.Array) -> jax.Array:
    k, c = self._kernel, x.shape[-1]
    w = hk.get_parameter(
        "w",
        [k, k, c, self._channels],
        x.dtype,
        init=hk.initializers.TruncatedNormal(1.0 / np.sqrt(k * k * c)),
    )
    b = hk.get_parameter("b", [self._channels], x.dtype, init=jnp.zeros)
    patches = jax.lax.conv_general_dilated_patches(
        x,
        (k, k),
        (self._stride, self._stride),
        "VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # [B, H', W', C * k * k], features ordered (C, kh, kw)
    matrix = jnp.transpose(w, (2, 0, 1, 3)).reshape(c * k * k, -1)
    return patches @ matrix + b


def nature_encoder(images: jax.Array, prefix: str = "") -> jax.Array:
  """The Nature-DQN convolutions (inside a haiku transform).

  Args:
    images: ``[B, H, W, C]``; integer ones (bytes) are scaled by 1/255.
    prefix: of the module names.

  Returns:
    ``[B, H', W', 64]`` after ``NATURE_CNN_LAYERS`` (``[B, 7, 7, 64]`` for
    84x84 images), ReLU after each.
  """
  x = images.astype(jnp.float32)
  if jnp.issubdtype(images.dtype, jnp.integer):
    x = x / 255.0
  for i, (channels, kernel, stride) in enumerate(NATURE_CNN_LAYERS):
    x = jax.nn.relu(
        PatchConv2D(channels, kernel, stride, name=f"{prefix}nature_conv_{i}")(
            x
        )
    )
  return x
