"""Agent networks (haiku): an MLP torso with flat heads and an optional
action-conditional model for per-action outputs.

Parameter names follow the published DiscoRL agent network, so published
parameters load as they are:
  ``<name>/~_embedding_pass/torso/~/linear_i``  torso MLP (with
  ``separate_torsos``: ``torso_<output>``, one per flat output);
  ``<name>/~_head_pass/torso_head[_k]/~/linear_0``  one linear head per flat
  output, in sorted key order;
  ``<name>/linear``, ``<name>/action_cond/linear``, ``<name>/mlp[_k]/~/linear_i``
  the action-conditional model (see ``action_models``).

``NetConfig.compute_dtype`` sets a mixed-precision policy (``jmp``) for the
network: ``"bfloat16"`` keeps the parameters in float32, casts them and the
observations to bfloat16 for the forward (and so backward) pass, and returns
float32 outputs, so whatever reads the outputs (losses, targets, the
meta-network) stays in float32. The default ``"float32"`` builds the network
as without a policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import jmp
import numpy as np

from disco import types
from disco.networks import action_models

ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}
# Compute dtypes of the agent network; the first is the default.
COMPUTE_DTYPES = ("float32", "bfloat16")
# Observation embeddings (``NetConfig.obs_embedding``); the first is the
# default (none: observations go to the torso as they are).
OBS_EMBEDDINGS = ("none", "minigrid")
# Id ranges of MiniGrid/XLand observations [H, W, 2] (tile id, colour id):
# xminigrid.core.constants.NUM_TILES and NUM_COLORS of xminigrid 0.9.
MINIGRID_NUM_TILES = 13
MINIGRID_NUM_COLORS = 12
# The convolutional encoder after the id embedding (xland-minigrid's PPO
# baseline): 2x2 kernels, VALID padding, ReLU after each.
MINIGRID_CONV_CHANNELS = (16, 32, 64)
Outputs = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class NetConfig:
  """Settings of the agent network (the ``network`` entry of agent settings).

  Attributes:
    dense: torso layer sizes (``activation`` between layers, and after the
      last with ``activate_final``).
    head_w_init_std: stddev of the truncated-normal init of the flat heads
      (``None``: haiku's default).
    model_lstm_size: LSTM size of the action-conditional model.
    model_head_hiddens: hidden sizes of the per-action head MLPs.
    conv_channels: channels of a convolutional torso (3x3 kernels, stride
      1, ``SAME`` padding, ReLU after each) in front of the dense torso, for
      image-like observations ``[H, W, C]`` such as MinAtar's and
      MiniGrid's; empty (the default): observations are flattened into the
      dense torso, whatever their shape.
    activation: of the dense torso, a name in ``ACTIVATIONS``.
    activate_final: apply ``activation`` after the torso's last layer too
      (the published network does not: its heads read the last layer's
      linear output).
    separate_torsos: give every flat output its own torso (e.g. separate
      actor and critic networks, as purejaxrl's PPO) instead of one shared
      torso; not with per-action outputs, which grow from the shared one.
    compute_dtype: the dtype the network computes in, a name in
      ``COMPUTE_DTYPES``: ``"float32"`` (the default), or ``"bfloat16"``
      (parameters stored in float32, outputs cast back to float32; see
      ``compute_policy``). Faster on accelerators with bfloat16 matrix
      units (GPUs, TPUs); usually no faster, or slower, on CPUs.
    obs_embedding: ``"none"`` (the default) or ``"minigrid"``: MiniGrid/XLand
      observations ``[H, W, 2]`` hold integer tile and colour ids; each id
      is embedded (``obs_embedding_dim`` features per channel, learnt
      tables), the two embeddings are concatenated (``[H, W, 2 * dim]``) and
      go through xland-minigrid's PPO encoder (``MINIGRID_CONV_CHANNELS``
      2x2 VALID convolutions, ReLU, orthogonal init) before the dense
      torso. Not with ``conv_channels``.
    obs_embedding_dim: features of each id embedding (xland-minigrid: 16).
  """

  dense: Sequence[int] = (512, 512)
  head_w_init_std: float | None = 1e-2
  model_lstm_size: int = 128
  model_head_hiddens: Sequence[int] = (128,)
  conv_channels: Sequence[int] = ()
  activation: str = "relu"
  activate_final: bool = False
  separate_torsos: bool = False
  compute_dtype: str = COMPUTE_DTYPES[0]
  obs_embedding: str = OBS_EMBEDDINGS[0]
  obs_embedding_dim: int = 16

  def __post_init__(self):
    if self.obs_embedding not in OBS_EMBEDDINGS:
      raise ValueError(
          f"Unknown network obs_embedding {self.obs_embedding!r}; use one of "
          f"{', '.join(OBS_EMBEDDINGS)}."
      )
    if self.obs_embedding != "none" and self.conv_channels:
      raise ValueError(
          f"network.obs_embedding={self.obs_embedding!r} brings its own "
          "convolutional encoder: set network.conv_channels=()."
      )
    if int(self.obs_embedding_dim) < 1:
      raise ValueError(
          f"network.obs_embedding_dim={self.obs_embedding_dim} must be >= 1."
      )
    if self.activation not in ACTIVATIONS:
      raise ValueError(
          f"Unknown network activation {self.activation!r}; use one of "
          f"{', '.join(ACTIVATIONS)}."
      )
    if self.compute_dtype not in COMPUTE_DTYPES:
      raise ValueError(
          f"Unknown network compute_dtype {self.compute_dtype!r}; use one of "
          f"{', '.join(COMPUTE_DTYPES)}."
      )

  def check_observation(self, shape: Sequence[int]) -> None:
    """Raises ``ValueError`` if this network cannot take observations of
    ``shape`` (one unbatched observation)."""
    if self.conv_channels and len(shape) != 3:
      raise ValueError(
          f"The convolutional torso (network.conv_channels="
          f"{tuple(self.conv_channels)}) takes image-like observations "
          f"[H, W, C]; this environment's are {list(shape)}: set "
          "network.conv_channels=() to flatten them into the dense torso."
      )
    if self.obs_embedding == "minigrid" and (
        len(shape) != 3 or shape[-1] != 2 or min(shape[:2]) < 4
    ):
      raise ValueError(
          "network.obs_embedding='minigrid' takes MiniGrid/XLand "
          "observations [H, W, 2] (tile and colour ids, H and W >= 4); this "
          f"environment's are {list(shape)}: set network.obs_embedding="
          "'none'."
      )


class AgentNet(hk.Module):
  """Observation ``[B, ...]`` -> dict of outputs described by the specs.

  Flat outputs are ``[B, *spec.shape]``; per-action outputs are
  ``[B, A, *spec.shape]``.
  """

  def __init__(
      self,
      config: NetConfig,
      num_actions: int,
      flat_spec: Mapping[str, types.ArraySpec],
      model_spec: Mapping[str, types.ArraySpec] | None = None,
      name: str = "mlp",
  ):
    super().__init__(name=name)
    self._config = config
    self._num_actions = num_actions
    self._flat_spec = dict(flat_spec)
    self._model_spec = dict(model_spec or {})
    overlap = set(self._flat_spec) & set(self._model_spec)
    if overlap:
      raise ValueError(
          f"Output names {sorted(overlap)} are declared both as flat and as "
          "per-action outputs; give them distinct names."
      )
    if config.separate_torsos and self._model_spec:
      raise ValueError(
          "network.separate_torsos gives each flat output its own torso, but "
          f"this rule also needs per-action outputs {sorted(self._model_spec)}"
          ", which grow from one shared torso: set separate_torsos=False."
      )

  def __call__(
      self,
      observations: types.ArrayTree,
      grad_actions: jax.Array | None = None,
      with_every: bool = False,
  ) -> Outputs | tuple[Outputs, Outputs]:
    """Outputs for ``[B, ...]`` observations.

    ``grad_actions`` (``[B]`` int, optional): per-action outputs then carry
    gradients only at these actions (values are unchanged); see
    ``action_models.per_action_outputs``. With ``with_every`` (and
    ``grad_actions``) the per-action outputs with gradients at every action
    come too, as a second dict (see
    ``action_models.per_action_outputs_and_taken``).
    """
    if self._config.separate_torsos:  # no per-action outputs (checked)
      outputs = self._head_pass(
          {
              key: self._embedding_pass(observations, f"torso_{key}")
              for key in sorted(self._flat_spec)
          }
      )
      return (outputs, {}) if with_every else outputs
    embedding = self._embedding_pass(observations)
    outputs = self._head_pass({key: embedding for key in self._flat_spec})
    if self._model_spec:
      c = self._config
      root = action_models.root_state(embedding, c.model_lstm_size)
      model = action_models.make_action_model(
          self._model_spec,
          c.model_lstm_size,
          c.model_head_hiddens,
          self._num_actions,
      )
      if with_every:
        every, at_taken = action_models.per_action_outputs_and_taken(
            model, root, grad_actions
        )
        outputs.update(at_taken)
        return outputs, every
      outputs.update(
          action_models.per_action_outputs(model, root, grad_actions)
      )
    elif with_every:
      return outputs, {}
    return outputs

  def _embedding_pass(
      self, observations: types.ArrayTree, name: str = "torso"
  ) -> jax.Array:
    leaves = jax.tree.leaves(observations)
    prefix = "" if name == "torso" else f"{name}_"
    if self._config.obs_embedding == "minigrid":
      (ids,) = leaves  # [B, H, W, 2]; see NetConfig.check_observation
      leaves = [minigrid_encoder(ids, self._config.obs_embedding_dim, prefix)]
    elif self._config.conv_channels:
      (images,) = leaves  # [B, H, W, C]; see NetConfig.check_observation
      x = images
      for i, channels in enumerate(self._config.conv_channels):
        x = jax.nn.relu(
            hk.Conv2D(channels, kernel_shape=3, name=f"{prefix}conv_{i}")(x)
        )
      leaves = [x]
    flat = [hk.Flatten()(x) for x in leaves]
    return hk.nets.MLP(
        tuple(self._config.dense),
        activation=ACTIVATIONS[self._config.activation],
        activate_final=self._config.activate_final,
        name=name,
    )(jnp.concatenate(flat, axis=-1))

  def _head_pass(
      self, embeddings: Mapping[str, jax.Array]
  ) -> dict[str, jax.Array]:
    """One linear head per flat output, on that output's embedding."""
    w_init = None
    if self._config.head_w_init_std:
      w_init = hk.initializers.TruncatedNormal(self._config.head_w_init_std)
    outputs = {}
    for key in sorted(self._flat_spec):
      embedding = hk.Flatten()(embeddings[key])
      shape = tuple(self._flat_spec[key].shape)
      out = hk.nets.MLP(
          (int(np.prod(shape)),), w_init=w_init, name="torso_head"
      )(embedding)
      outputs[key] = out.reshape((embedding.shape[0],) + shape)
    return outputs


def minigrid_encoder(ids: jax.Array, dim: int, prefix: str = "") -> jax.Array:
  """Features of MiniGrid/XLand observations (called in a haiku transform).

  Args:
    ids: ``[B, H, W, 2]`` tile and colour ids (any numeric dtype; rounded
      and clipped into their ranges).
    dim: features of each id's embedding.
    prefix: of the module names (one encoder per torso).

  Returns:
    ``[B, H - 3, W - 3, 64]``: the concatenated ``[B, H, W, 2 * dim]``
    embeddings through ``MINIGRID_CONV_CHANNELS`` 2x2 VALID convolutions,
    each followed by a ReLU.
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


def network_settings(
    dense: Sequence[int],
    model_lstm_size: int = 128,
    model_head_hiddens: Sequence[int] = (128,),
    head_w_init_std: float | None = 1e-2,
    conv_channels: Sequence[int] = (),
    activation: str = "relu",
    activate_final: bool = False,
    separate_torsos: bool = False,
    compute_dtype: str = COMPUTE_DTYPES[0],
) -> dict[str, Any]:
  """The ``network`` entry of agent settings (a plain dict of ``NetConfig``
  fields)."""
  return dict(
      dense=tuple(dense),
      head_w_init_std=head_w_init_std,
      model_lstm_size=model_lstm_size,
      model_head_hiddens=tuple(model_head_hiddens),
      conv_channels=tuple(conv_channels),
      activation=activation,
      activate_final=activate_final,
      separate_torsos=separate_torsos,
      compute_dtype=compute_dtype,
  )


def make_net_config(settings: Mapping[str, Any]) -> NetConfig:
  """``NetConfig`` from the ``network`` entry of agent settings.

  Raises:
    ValueError: for unknown or missing keys, naming the valid ones.
  """
  settings = dict(settings)
  valid = [f.name for f in dataclasses.fields(NetConfig)]
  unknown = sorted(set(settings) - set(valid))
  if unknown:
    raise ValueError(
        f"Unknown network setting(s) {unknown}; valid: " f"{', '.join(valid)}."
    )
  for key in ("dense", "model_head_hiddens", "conv_channels"):
    if key in settings:
      settings[key] = tuple(settings[key])
  return NetConfig(**settings)


def make_network(
    config: NetConfig,
    num_actions: int,
    flat_spec: Mapping[str, types.ArraySpec],
    model_spec: Mapping[str, types.ArraySpec] | None = None,
    name: str = "mlp",
) -> hk.Transformed:
  """A pure ``(init, apply)`` pair over ``[B, ...]`` observations, computing
  in ``config.compute_dtype`` (see ``compute_policy``)."""

  def forward(observations, grad_actions=None, with_every=False):
    net = AgentNet(config, num_actions, flat_spec, model_spec, name)
    if config.compute_dtype == COMPUTE_DTYPES[0]:
      return net(observations, grad_actions, with_every)
    return with_policy(compute_policy(config.compute_dtype), net)(
        observations, grad_actions, with_every
    )

  return hk.without_apply_rng(hk.transform(forward))


def compute_policy(compute_dtype: str) -> jmp.Policy:
  """The ``jmp`` policy of a network computing in ``compute_dtype``:
  float32 parameters and outputs."""
  return jmp.get_policy(
      f"params=float32,compute={compute_dtype},output=float32"
  )


def with_policy(policy: jmp.Policy, fn):
  """``fn`` (called inside a haiku transform) under ``policy``.

  Its parameters are created in ``policy.param_dtype`` and read in the
  compute dtype, its floating-point arguments are cast to the compute dtype
  and its outputs to the output dtype. The policy applies to this call only
  (haiku's ``mixed_precision.set_policy`` would set it for every instance
  of a module class, other agents' included).
  """

  def creator(next_creator, shape, dtype, init, context):
    del dtype, context
    return next_creator(shape, policy.param_dtype, init)

  def getter(next_getter, value, context):
    del context
    return next_getter(policy.cast_to_compute(value))

  def wrapped(*args):
    with hk.custom_creator(creator), hk.custom_getter(getter):
      out = fn(*policy.cast_to_compute(args))
    return policy.cast_to_output(out)

  return wrapped


def unroll(
    apply_fn,
    params,
    observations: types.ArrayTree,
    grad_actions: jax.Array | None = None,
    with_every: bool = False,
):
  """Applies a ``[B, ...]`` network to ``[T, B, ...]`` observations (and
  optional ``[T, B]`` ``grad_actions``, with ``with_every``, see
  ``AgentNet.__call__``)."""
  leaf = jax.tree.leaves(observations)[0]
  t, b = leaf.shape[:2]
  flatten = lambda x: x.reshape((t * b,) + x.shape[2:])
  flat_obs = jax.tree.map(flatten, observations)
  if grad_actions is None:
    out = apply_fn(params, flat_obs)
  else:
    out = apply_fn(params, flat_obs, flatten(grad_actions), with_every)
  return jax.tree.map(lambda x: x.reshape((t, b) + x.shape[1:]), out)
